"""Per-repository storage quotas: what a repository is charged, and the one check.

A repository is charged the size of every **distinct** blob it holds or is about to hold:
  (a) the blobs its held bundles name (table ``bundle_blobs``; a bundle is held while it is not
      tombstoned, or while its digest is quarantined, which keeps its blobs);
  (b) the blobs stored for it by pushes that have not committed yet (``blob_leases`` younger
      than the GC window);
  (c) the blobs its open upload sessions will store: the declared size of a session that named
      its digest (``/v1``), and of one that has not (``/v2``, digest ``UNNAMED_DIGEST`` until
      its closing PUT) the bytes reserved so far, counted per session (``require_upload_room``
      charges them as they arrive). Only the sessions of principals who may publish to the
      repository (``authz.principal_may_clause``) are charged to it: a session opened by
      anyone else (a reader or reviewer attaching an attestation) is charged to its opener
      (docs/oci.md#blobs), so it cannot take the publishers' room.
A blob is counted once per repository however many of its bundles, leases and sessions name
it, and once in **each** repository that holds it: a repository's usage does not drop because
another repository happens to share a blob, nor grow when another one deletes its copy.

The check runs inside the write transaction that records the reservation (an upload session,
a lease or a bundle), and write transactions are serialized (registry/db.py), so two
concurrent uploads can never both fit into the same free bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import case, func, or_, select, union_all
from sqlalchemy.orm import Session

from modelward.registry.domains.auth.authz import Action, principal_may_clause
from modelward.registry.errors import PayloadTooLarge
from modelward.registry.models import (
    Blob,
    BlobLease,
    Bundle,
    BundleBlob,
    Principal,
    Repository,
    UploadSession,
)
from modelward.registry.settings import Settings

__all__ = [
    "QUOTA_CODE",
    "UNNAMED_DIGEST",
    "charged",
    "require_bundle_room",
    "require_room",
    "require_upload_room",
    "usage",
]

QUOTA_CODE = "repository_quota_exceeded"
# the digest of an upload session that does not name its blob until it closes (``/v2``):
# such sessions are charged one by one, under their id, never deduplicated with each other
UNNAMED_DIGEST = "sha256:" + "0" * 64


def _cutoff(settings: Settings, now: datetime | None) -> datetime:
    return (now or datetime.now(UTC)) - timedelta(seconds=settings.gc_window_seconds)


def charged(repo_id: int, settings: Settings, now: datetime | None = None) -> Any:
    """A subquery of (digest, size) rows, one per distinct blob charged to the repository."""
    cutoff = _cutoff(settings, now)
    ttl_cutoff = (now or datetime.now(UTC)) - timedelta(seconds=settings.upload_ttl_seconds)
    held = (
        select(BundleBlob.digest.label("digest"), Blob.size.label("size"))
        .join(Bundle, Bundle.id == BundleBlob.bundle_id)
        .join(Blob, Blob.digest == BundleBlob.digest)
        .where(Bundle.repo_id == repo_id)
        .where(or_(Bundle.tombstoned.is_(False), Bundle.quarantined))
    )
    leased = select(BlobLease.digest.label("digest"), BlobLease.size.label("size")).where(
        BlobLease.repo_id == repo_id, BlobLease.created_at >= cutoff
    )
    key = case(
        (UploadSession.digest == UNNAMED_DIGEST, UploadSession.id), else_=UploadSession.digest
    )
    uploading = (
        select(key.label("digest"), UploadSession.size.label("size"))
        .join(Principal, Principal.id == UploadSession.principal_id)
        .where(UploadSession.repo_id == repo_id, UploadSession.updated_at > ttl_cutoff)
        .where(principal_may_clause(Action.PUBLISH, repo_id))
    )
    rows = union_all(held, leased, uploading).subquery("charged_rows")
    return (
        select(rows.c.digest, func.max(rows.c.size).label("size"))
        .group_by(rows.c.digest)
        .subquery("charged")
    )


def usage(session: Session, repo_id: int, settings: Settings, now: datetime | None = None) -> int:
    """Bytes charged to the repository now (see the module docstring)."""
    blobs = charged(repo_id, settings, now)
    return int(session.execute(select(func.coalesce(func.sum(blobs.c.size), 0))).scalar_one())


def require_room(
    session: Session,
    repo: Repository,
    blobs: Mapping[str, int],
    settings: Settings,
    *,
    now: datetime | None = None,
) -> None:
    """Raise PayloadTooLarge (413 ``repository_quota_exceeded``) when charging ``blobs``
    (digest -> size) to ``repo`` would take it past its quota. Blobs it is charged for already
    cost nothing more; a repository with no quota, or a request that adds nothing, passes."""
    quota = repo.quota_bytes
    if quota is None or not blobs:
        return
    current = charged(repo.id, settings, now)
    have = set(
        session.execute(select(current.c.digest).where(current.c.digest.in_(list(blobs)))).scalars()
    )
    asked = sum(size for digest, size in blobs.items() if digest not in have)
    if asked == 0:
        return
    used = usage(session, repo.id, settings, now)
    if used + asked > quota:
        raise _over_quota(repo, quota, used, asked)


def require_upload_room(
    session: Session,
    repo: Repository,
    *,
    reserved: int,
    wanted: int,
    settings: Settings,
    now: datetime | None = None,
) -> None:
    """Raise PayloadTooLarge (413 ``repository_quota_exceeded``) when growing the charge of an
    upload session that has not named its digest (``UNNAMED_DIGEST``) from ``reserved`` to
    ``wanted`` bytes would take ``repo`` past its quota. The session's ``reserved`` bytes are
    part of the usage already; only the growth is asked for. Call it in the write transaction
    that records the new reservation (``UploadSession.size``)."""
    quota = repo.quota_bytes
    asked = wanted - reserved
    if quota is None or asked <= 0:
        return
    used = usage(session, repo.id, settings, now)
    if used + asked > quota:
        raise _over_quota(repo, quota, used, asked)


def _over_quota(repo: Repository, quota: int, used: int, asked: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"repository {repo.name} is over its storage quota: {asked} more bytes asked, "
        f"{used} of {quota} bytes used ({used + asked - quota} bytes too many); an admin "
        f"can raise it with `modelward repo quota set {repo.name} BYTES`",
        detail={
            "repository": repo.name,
            "quota_bytes": quota,
            "usage_bytes": used,
            "requested_bytes": asked,
        },
        code=QUOTA_CODE,
    )


def require_bundle_room(
    session: Session, repo: Repository, manifest: Any, settings: Settings
) -> None:
    """``require_room`` for every blob a parsed manifest names (its config and layers)."""
    if repo.quota_bytes is None:
        return
    blobs = {manifest.config.digest: manifest.config.size}
    blobs.update((layer.digest, layer.size) for layer in manifest.layers)
    require_room(session, repo, blobs, settings)
