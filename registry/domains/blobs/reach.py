"""Which stored blobs a caller may learn of: deduplication must not leak a private
repository's weights (docs/registry.md#private-repositories).

The blob store is shared by every repository, so "is ``sha256:…`` stored?" would tell a
caller a digest some private repository holds, and skipping its upload would hand him the
bytes. A blob is *reachable* for a caller, as a SQL condition (``reachable_clause``), when:

(a) the caller may read every repository (``auth.authz`` ``READ`` for his role), or
(b) a bundle of a repository he may read holds it, or
(c) a lease (a recent upload, ``BlobLease``) charges it to a repository he may read: the
    caller, or a fellow reader, proved possession by sending its bytes, or
(d) no private repository holds or leases it at all (a public or orphaned blob).

Every door that answers "stored" or hands out bytes asks it: ``HEAD``/``GET /v1/blobs``,
``/v2`` blob ``HEAD``/``GET`` and mounts (``blobs.service.readable_blob_size``), and a push's
missing-blob check (``bundles.service``): an unreachable blob is answered exactly as a
missing one, so the client uploads it (and proves possession).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, exists, not_, or_, select, true
from sqlalchemy.orm import Session

from modelward.registry.domains.auth.authz import GRANTS, Action, Principal, may_clause
from modelward.registry.models import Blob, BlobLease, Bundle, BundleBlob, Repository

__all__ = ["reachable_clause", "reachable_digests"]


def reachable_clause(caller: Principal, digest: Any) -> ColumnElement[bool]:
    """``digest`` (a value or a column) is reachable for ``caller`` (module doc)."""
    if caller.role in GRANTS[Action.READ].roles:  # (a)
        return true()
    readable = may_clause(caller, Action.READ)
    held_readable = exists().where(  # (b)
        BundleBlob.digest == digest,
        Bundle.id == BundleBlob.bundle_id,
        Repository.id == Bundle.repo_id,
        readable,
    )
    leased_readable = exists().where(  # (c)
        BlobLease.digest == digest, Repository.id == BlobLease.repo_id, readable
    )
    held_private = exists().where(
        BundleBlob.digest == digest,
        Bundle.id == BundleBlob.bundle_id,
        Repository.id == Bundle.repo_id,
        Repository.private.is_(True),
    )
    leased_private = exists().where(
        BlobLease.digest == digest,
        Repository.id == BlobLease.repo_id,
        Repository.private.is_(True),
    )
    return or_(
        held_readable,
        leased_readable,
        and_(not_(held_private), not_(leased_private)),  # (d)
    )


def reachable_digests(session: Session, caller: Principal, digests: set[str]) -> set[str]:
    """Those of ``digests`` that are reachable for ``caller`` (stored or not: the caller
    asks the store separately)."""
    if not digests:
        return set()
    rows = session.execute(
        select(Blob.digest).where(Blob.digest.in_(digests), reachable_clause(caller, Blob.digest))
    ).scalars()
    return set(rows)
