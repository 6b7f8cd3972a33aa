"""Content-addressed blobs: verified into the store first, then recorded (and audited)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from registry.domains._state import AppState
from registry.domains.audit.service import append
from registry.domains.auth.service import Caller
from registry.errors import NotFound
from registry.models import Blob

__all__ = ["blob_size", "drain", "put_blob", "record_blob"]


def drain(chunks: Iterable[bytes]) -> None:
    for _ in chunks:
        pass


def blob_size(session: Session, digest: str) -> int:
    """The size of a visible blob; NotFound otherwise."""
    row = session.get(Blob, digest)
    if row is None:
        raise NotFound(f"blob {digest} not found")
    return row.size


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
