"""Content-addressed blobs: verified into the store first, then recorded (and audited)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.errors import BundleQuarantined, NotFound
from modelward.registry.models import Blob, Bundle, BundleBlob

__all__ = ["blob_size", "drain", "put_blob", "readable_blob_size", "record_blob"]

# Roles that may read the bytes of quarantined and tombstoned bundles (forensics).
INSPECTORS = frozenset({"admin", "reviewer"})


def drain(chunks: Iterable[bytes]) -> None:
    for _ in chunks:
        pass


def blob_size(session: Session, digest: str) -> int:
    """The size of a visible blob; NotFound otherwise."""
    row = session.get(Blob, digest)
    if row is None:
        raise NotFound(f"blob {digest} not found")
    return row.size


def readable_blob_size(session: Session, digest: str, caller: Caller) -> int:
    """The size of a blob ``caller`` may download; NotFound or BundleQuarantined otherwise.

    A blob that bundles hold is readable while at least one of them is neither quarantined
    nor tombstoned; once every holder is, only admins and reviewers may read it. A blob no
    bundle holds yet (uploaded, not pushed) stays readable.
    """
    size = blob_size(session, digest)
    if caller.role in INSPECTORS:
        return size
    held = exists().where(BundleBlob.digest == digest)
    live = (
        exists()
        .where(BundleBlob.digest == digest, Bundle.id == BundleBlob.bundle_id)
        .where(Bundle.quarantined.is_(False), Bundle.tombstoned.is_(False))
    )
    is_held, is_live = session.execute(select(held, live)).one()
    if is_held and not is_live:
        raise BundleQuarantined(
            f"blob {digest} belongs only to quarantined or tombstoned bundles",
            detail={"digest": digest},
        )
    return size


def record_blob(session: Session, *, digest: str, size: int, actor: str, via: str) -> bool:
    """Make a stored blob visible; returns False when it already was."""
    if session.get(Blob, digest) is not None:
        return False
    session.add(Blob(digest=digest, size=size))
    append(
        session, actor=actor, action="blob.put", subject=digest, details={"size": size, "via": via}
    )
    return True


def put_blob(
    state: AppState, *, digest: str, size: int, chunks: Iterable[bytes], caller: Caller
) -> bool:
    """Stream, verify, store and record one blob; True when it is new.

    Raises DigestMismatchError, TruncatedBody or BadRequest (nothing becomes visible then).
    """
    with state.db.read() as session:
        if session.get(Blob, digest) is not None:
            drain(chunks)  # read the body so the client sees our answer, not a reset
            return False
    state.store.put_verified(digest, size, chunks)
    with state.db.write() as session:
        return record_blob(session, digest=digest, size=size, actor=caller.name, via="put")
