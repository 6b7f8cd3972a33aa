"""Content-addressed blobs: verified into the store first, then recorded (and audited)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import Action, allows
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs.reach import reachable_clause
from modelward.registry.domains.gc.quota import require_room
from modelward.registry.domains.quarantine.service import quarantined_blobs
from modelward.registry.domains.repos.service import writable_repo
from modelward.registry.errors import Conflict, NotFound, Quarantined
from modelward.registry.models import Blob, BlobLease, Bundle, BundleBlob, Repository
from modelward.registry.storage import BlobStore, StreamCheck

__all__ = [
    "blob_size",
    "charge_repository",
    "drain",
    "lease_blob",
    "put_blob",
    "readable_blob_size",
    "record_blob",
    "verify_body",
    "visible_blob_size",
]

# Roles that may read the bytes of quarantined and tombstoned bundles (forensics).


def drain(chunks: Iterable[bytes]) -> None:
    for _ in chunks:
        pass


def verify_body(digest: str, size: int, chunks: Iterable[bytes]) -> None:
    """Read a body whose blob is stored already, hashing it: the bytes must be the ones the
    digest names, or the caller proves nothing by sending them (no lease, nothing charged).
    Raises DigestMismatchError (400 ``digest_mismatch``; ``/v2``: DIGEST_INVALID) or
    TruncatedBody, as a new blob's upload would."""
    check = StreamCheck(digest, size)
    for chunk in chunks:
        check.feed(chunk)
    check.finish()


def blob_size(session: Session, digest: str) -> int:
    """The size of a stored blob, whoever may reach it (internal: quotas, uploads); NotFound
    otherwise. A door answering a caller uses ``visible_blob_size``."""
    row = session.get(Blob, digest)
    if row is None:
        raise NotFound(f"blob {digest} not found")
    return row.size


def visible_blob_size(session: Session, digest: str, caller: Caller) -> int:
    """The size of a stored blob ``caller`` may reach (``blobs.reach``); the same NotFound as
    for a blob never stored otherwise (one query both ways): a blob only another org's
    private repository holds is "missing", and the client uploads it."""
    size = session.execute(
        select(Blob.size).where(Blob.digest == digest, reachable_clause(caller, Blob.digest))
    ).scalar_one_or_none()
    if size is None:
        raise NotFound(f"blob {digest} not found")
    return int(size)


def readable_blob_size(session: Session, digest: str, caller: Caller) -> int:
    """The size of a blob ``caller`` may download; NotFound or Quarantined otherwise.

    Admins and reviewers read every blob (forensics). For everyone else
    (docs/registry.md#quarantine):
    (1) a blob the quarantine covers (``quarantine.service.quarantined_blobs``: its own
        digest is quarantined, or a quarantined bundle holds it and no live bundle recorded
        before that quarantine does) is unreadable: quarantine is about the weights, and a
        manifest re-wrapping them after the quarantine must not serve them again;
    (2) a blob that bundles hold is readable while one of them is not tombstoned;
    (3) a blob no bundle holds yet (uploaded, not pushed) stays readable.
    Before all that, a blob the caller may not reach (``blobs.reach``: only repositories he
    may not read hold it) is NotFound, as a missing one.
    """
    size = visible_blob_size(session, digest, caller)
    if allows(caller.role, Action.REVIEW):
        return size
    # (1): covered by a quarantine.
    quarantined = quarantined_blobs(session, [digest])
    if digest in quarantined:
        raise Quarantined(
            f"blob {digest} belongs to quarantined bundle {quarantined[digest]}",
            detail={"digest": digest, "quarantined_digest": quarantined[digest]},
        )
    # (2), (3): held only by tombstoned bundles.
    held = exists().where(BundleBlob.digest == digest)
    live = (
        exists()
        .where(BundleBlob.digest == digest, Bundle.id == BundleBlob.bundle_id)
        .where(Bundle.tombstoned.is_(False))
    )
    is_held, is_live = session.execute(select(held, live)).one()
    if is_held and not is_live:
        raise Quarantined(
            f"blob {digest} belongs only to deleted bundles", detail={"digest": digest}
        )
    return size


def _collected(digest: str) -> Conflict:
    return Conflict(
        f"blob {digest} was garbage-collected while this upload ran; send it again",
        detail={"digest": digest},
        code="blob_collected",
    )


def _require_stored(session: Session, digest: str) -> None:
    """Conflict ``blob_collected`` when garbage collection removed a blob found stored."""
    if session.get(Blob, digest) is None:
        raise _collected(digest)


def lease_blob(session: Session, *, digest: str, size: int, repo_id: int | None) -> BlobLease:
    """Keep ``digest`` from garbage collection for the GC window, charged to ``repo_id``'s
    quota meanwhile (docs/registry.md#storage-hygiene)."""
    lease = BlobLease(digest=digest, size=size, repo_id=repo_id, created_at=datetime.now(UTC))
    session.add(lease)
    session.flush()
    return lease


def charge_repository(
    session: Session,
    state: AppState,
    *,
    repository: str,
    digest: str,
    size: int,
    caller: Caller,
) -> Repository:
    """The repository an upload names, once the caller may publish to it and the blob fits
    its quota (413 ``repository_quota_exceeded`` otherwise). Call it in the write transaction
    that records the reservation."""
    repo = writable_repo(session, repository, caller)
    require_room(session, repo, {digest: size}, state.settings)
    return repo


def record_blob(
    session: Session,
    *,
    digest: str,
    size: int,
    actor: str,
    via: str,
    repo_id: int | None = None,
    store: BlobStore | None = None,
) -> bool:
    """Make a stored blob visible and lease it for the push that stored it; returns False when
    it was visible already.

    With ``store``, the stored object is checked first (in this serialized write): garbage
    collection may have removed it while the request ran, if it had collected an earlier copy
    of the same bytes — then Conflict ``blob_collected``, and the client sends it again.
    """
    if store is not None and store.size(digest) != size:
        raise _collected(digest)
    lease_blob(session, digest=digest, size=size, repo_id=repo_id)
    if session.get(Blob, digest) is not None:
        return False
    session.add(Blob(digest=digest, size=size))
    append(
        session, actor=actor, action="blob.put", subject=digest, details={"size": size, "via": via}
    )
    return True


def put_blob(
    state: AppState,
    *,
    digest: str,
    size: int,
    chunks: Iterable[bytes],
    caller: Caller,
    repository: str,
) -> bool:
    """Stream, verify, store and record one blob for ``repository``; True when it is new.

    The caller must be able to publish to ``repository`` and the blob is charged to its
    quota before a byte is read (413 ``repository_quota_exceeded``): a lease reserves it, so
    every byte stored is some repository's (docs/registry.md#storage-hygiene). A blob stored
    already keeps that lease only once the body received hashes to its digest
    (``verify_body``): naming a stored digest with other bytes is refused like a new upload's.
    Raises DigestMismatchError, TruncatedBody or BadRequest (nothing becomes visible then),
    Forbidden or NotFound (the repository), PayloadTooLarge (its quota).
    """
    with state.db.write() as session:
        repo = charge_repository(
            session, state, repository=repository, digest=digest, size=size, caller=caller
        )
        repo_id = repo.id
        reserved = lease_blob(session, digest=digest, size=size, repo_id=repo_id).id
    try:
        with state.db.read() as session:
            row = session.get(Blob, digest)
        if row is not None and state.store.size(digest) == row.size:
            verify_body(digest, size, chunks)  # the same bytes, or refused
            with state.db.write() as session:
                _require_stored(session, digest)
            return False
        state.store.put_verified(digest, size, chunks)
        with state.db.write() as session:
            return record_blob(
                session,
                digest=digest,
                size=size,
                actor=caller.name,
                via="put",
                repo_id=repo_id,
                store=state.store,
            )
    except BaseException:
        with state.db.write() as session:
            session.execute(delete(BlobLease).where(BlobLease.id == reserved))
        raise
