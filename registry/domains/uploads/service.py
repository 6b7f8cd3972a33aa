"""Resumable upload sessions. State lives in the database and the blob store (as part objects),
so any app process can continue or commit a session. A PATCH is all-or-nothing: the offset only
advances (by a conditional UPDATE) once its whole chunk is stored.

Sessions are bounded: a principal holds at most ``max_open_uploads`` at once, and a session
idle for ``upload_ttl_seconds`` is expired — it answers 404 from then on, and the next
``start`` (any principal's) deletes it and its parts, audited as ``upload.expire``. A client
can end its own session early with ``cancel``.

A session names the repository it uploads for (``POST /v1/uploads`` refuses one that names
none: 400 ``repository_required``): the caller must be able to publish there, and the declared
size is charged to the repository's quota from ``start`` on (413 ``repository_quota_exceeded``
when it does not fit), then, once committed, through a blob lease until the push commits
(docs/registry.md#storage-hygiene).

A ``/v2`` session does not know its digest or size until it closes (digest
``gc.quota.UNNAMED_DIGEST``): its ``size`` is the bytes reserved so far, and each chunk is
charged before it is stored (``reserve``). A refused reservation ends the session (its row and
every part it stored, audited as ``upload.abort``), so a refused push leaves nothing behind."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import Action, may
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs.service import charge_repository, drain, record_blob
from modelward.registry.domains.gc.quota import require_upload_room
from modelward.registry.errors import (
    BadRequest,
    Conflict,
    DigestMismatchError,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
)
from modelward.registry.models import Principal, Repository, UploadSession

__all__ = [
    "abort",
    "append_chunk",
    "cancel",
    "charged_repository",
    "commit",
    "expire_idle",
    "get_session",
    "reserve",
    "start",
]

SWEEP_BATCH = 100  # expired sessions removed per start (the rest on the next ones)


def _expired(row: UploadSession, ttl: int, now: datetime) -> bool:
    return row.updated_at <= now - timedelta(seconds=ttl)


def charged_repository(session: Session, row: UploadSession) -> Repository | None:
    """The repository whose quota ``row`` is charged to: the one it was opened in, when its
    opener may publish there (``authz``: the same rule as ``gc.quota.charged``); None for a
    session charged to its opener (docs/oci.md#blobs)."""
    if row.repo_id is None:
        return None
    repo = session.get(Repository, row.repo_id)
    opener = session.get(Principal, row.principal_id)
    if repo is None or opener is None or not may(session, opener, Action.PUBLISH, repo):
        return None
    return repo


def _visible(session: Session, upload_id: str, caller: Caller, ttl: int) -> UploadSession:
    """The session if it exists, has not expired and belongs to the caller (admins see every
    session)."""
    query = select(UploadSession).where(UploadSession.id == upload_id)
    if not caller.is_admin:
        query = query.where(UploadSession.principal_id == caller.id)
    row = session.execute(query).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no upload session {upload_id}")
    if _expired(row, ttl, datetime.now(UTC)):
        raise NotFound(
            f"upload session {upload_id} expired after {ttl} s without a chunk",
            code="upload_expired",
        )
    return row


def expire_idle(state: AppState, *, now: datetime | None = None) -> int:
    """Delete up to SWEEP_BATCH sessions idle past the TTL, and their parts; how many.

    Each row is deleted only if it is still idle (a conditional DELETE), so a chunk that
    lands meanwhile keeps its session.
    """
    ttl = state.settings.upload_ttl_seconds
    now = now or datetime.now(UTC)
    with state.db.read() as session:
        oldest = (
            session.execute(
                select(UploadSession).order_by(UploadSession.updated_at).limit(SWEEP_BATCH)
            )
            .scalars()
            .all()
        )
    removed = 0
    for row in oldest:
        if not _expired(row, ttl, now):
            break
        with state.db.write() as session:
            gone = session.execute(
                delete(UploadSession).where(
                    UploadSession.id == row.id, UploadSession.updated_at == row.updated_at
                )
            )
            if gone.rowcount == 0:  # type: ignore[attr-defined]
                continue
            append(
                session,
                actor="registry",
                action="upload.expire",
                subject=row.digest,
                details={
                    "upload_id": row.id,
                    "offset": row.offset,
                    "size": row.size,
                    "idle_seconds": ttl,
                },
            )
        state.store.delete_upload(row.id, json.loads(row.parts))
        removed += 1
    return removed


def start(
    state: AppState,
    *,
    digest: str,
    size: int,
    caller: Caller,
    repository: str | None = None,
    repo_id: int | None = None,
) -> UploadSession:
    """Open a session for ``digest`` of ``size`` bytes, charged to ``repository`` (the
    caller must be able to publish there; the ``/v1`` door), or to ``repo_id``, a repository
    the caller's right to upload to was checked for already (the ``/v2`` door:
    ``oci.blobs.upload_limit``). One of the two is required.

    Raises BadRequest (``repository_required`` when neither is given), PayloadTooLarge
    (413: past ``max_blob_bytes``, or past the repository's quota), QuotaExceeded (429: too
    many open sessions), NotFound/Forbidden (the repository)."""
    if size < 0:
        raise BadRequest("size must not be negative")
    if size > state.settings.max_blob_bytes:
        raise PayloadTooLarge(
            f"blob of {size} bytes exceeds the limit of {state.settings.max_blob_bytes} bytes",
            detail={"size": size, "limit": state.settings.max_blob_bytes},
        )
    expire_idle(state)
    now = datetime.now(UTC)
    limit = state.settings.max_open_uploads
    with state.db.write() as session:
        repo: Repository | None = None
        if repository is not None:
            repo = charge_repository(
                session, state, repository=repository, digest=digest, size=size, caller=caller
            )
        elif repo_id is not None:
            repo = session.get(Repository, repo_id)
            if repo is None:
                raise NotFound(f"no repository with id {repo_id}")
            require_upload_room(session, repo, reserved=0, wanted=size, settings=state.settings)
        else:  # every stored byte is charged to a repository (the endpoints name one)
            raise BadRequest(
                "an upload session needs the repository it uploads for",
                code="repository_required",
            )
        open_ = session.execute(
            select(func.count())
            .select_from(UploadSession)
            .where(UploadSession.principal_id == caller.id)
        ).scalar_one()
        if open_ >= limit:
            raise QuotaExceeded(
                f"{caller.name} already has {open_} open upload sessions (limit {limit}); "
                "commit or cancel one (DELETE /v1/uploads/{id}), or wait for idle ones to "
                f"expire after {state.settings.upload_ttl_seconds} s",
                detail={"open": open_, "limit": limit},
            )
        row = UploadSession(
            id=secrets.token_hex(16),
            digest=digest,
            size=size,
            offset=0,
            parts="[]",
            principal_id=caller.id,
            created_at=now,
            updated_at=now,
            repo_id=None if repo is None else repo.id,
        )
        session.add(row)
        details: dict[str, object] = {"upload_id": row.id, "size": size}
        if repo is not None:
            details["repository"] = repo.name
        append(
            session,
            actor=caller.name,
            action="upload.start",
            subject=digest,
            details=details,
        )
        return row


def get_session(state: AppState, upload_id: str, caller: Caller) -> UploadSession:
    with state.db.read() as session:
        return _visible(session, upload_id, caller, state.settings.upload_ttl_seconds)


def cancel(state: AppState, *, upload_id: str, caller: Caller) -> None:
    """End the caller's session now: the row, then its parts (audited ``upload.cancel``)."""
    row = get_session(state, upload_id, caller)
    with state.db.write() as session:
        gone = session.execute(delete(UploadSession).where(UploadSession.id == upload_id))
        if gone.rowcount == 0:  # type: ignore[attr-defined]
            raise NotFound(f"no upload session {upload_id}")
        append(
            session,
            actor=caller.name,
            action="upload.cancel",
            subject=row.digest,
            details={"upload_id": upload_id, "offset": row.offset, "size": row.size},
        )
    state.store.delete_upload(upload_id, json.loads(row.parts))


def reserve(
    state: AppState, *, upload_id: str, offset: int, wanted: int, caller: Caller
) -> UploadSession:
    """Charge a session that has not named its digest for ``wanted`` bytes (its offset plus
    the chunk about to be stored) before a byte of the chunk is stored: the reservation
    (``size``) only grows, in one conditional UPDATE, in the write transaction that checks the
    repository's quota (``gc.quota.require_upload_room``).

    Raises PayloadTooLarge (413 ``repository_quota_exceeded``): the session is aborted first
    (``abort``), so nothing it stored stays behind; Conflict ``offset_mismatch`` when the
    session is not at ``offset``; NotFound (no such session, or expired)."""
    row = get_session(state, upload_id, caller)
    if offset != row.offset:
        raise Conflict(
            f"Upload-Offset {offset} does not match the session offset {row.offset}",
            detail={"offset": row.offset},
            code="offset_mismatch",
        )
    if wanted <= row.size:
        return row
    try:
        with state.db.write() as session:
            repo = charged_repository(session, row)
            if repo is not None:
                require_upload_room(
                    session, repo, reserved=row.size, wanted=wanted, settings=state.settings
                )
            result = session.execute(
                update(UploadSession)
                .where(
                    UploadSession.id == upload_id,
                    UploadSession.offset == offset,
                    UploadSession.size == row.size,
                )
                .values(size=wanted, updated_at=datetime.now(UTC))
            )
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise Conflict("another request advanced this upload first", code="offset_mismatch")
    except PayloadTooLarge as exc:
        abort(state, row, actor=caller.name, reason=exc.code)
        raise
    row.size = wanted
    return row


def abort(state: AppState, row: UploadSession, *, actor: str, reason: str) -> None:
    """End a session the registry refused to continue (``reason``: the refusal's code):
    the row, then every part it stored; audited as ``upload.abort``."""
    with state.db.write() as session:
        gone = session.execute(delete(UploadSession).where(UploadSession.id == row.id))
        if gone.rowcount != 0:  # type: ignore[attr-defined]
            append(
                session,
                actor=actor,
                action="upload.abort",
                subject=row.digest,
                details={
                    "upload_id": row.id,
                    "offset": row.offset,
                    "size": row.size,
                    "reason": reason,
                },
            )
    state.store.delete_upload(row.id, json.loads(row.parts))


def append_chunk(
    state: AppState,
    *,
    upload_id: str,
    offset: int,
    length: int,
    chunks: Iterable[bytes],
    caller: Caller,
) -> int:
    """Store one chunk at ``offset``; returns the new offset. 409 ``offset_mismatch`` (with
    the offset; ``/v2``: 416) if stale, or if another chunk of the session is being stored
    right now: the store's ``chunk_lock`` is held from before the offset is read until it
    has advanced, so a racing chunk is refused before it writes a byte (on the file store,
    chunks are written in place)."""
    get_session(state, upload_id, caller)  # the caller's session, before touching the store
    with state.store.chunk_lock(upload_id) as held:
        current = get_session(state, upload_id, caller)
        if not held or offset != current.offset or offset + length > current.size:
            drain(chunks)  # read the chunk so the client sees our answer, not a reset
        if not held:
            raise Conflict(
                f"another chunk of upload {upload_id} is being stored; ask for the offset "
                "and resume from there",
                detail={"offset": current.offset},
                code="offset_mismatch",
            )
        if offset != current.offset:
            raise Conflict(
                f"Upload-Offset {offset} does not match the session offset {current.offset}",
                detail={"offset": current.offset},
                code="offset_mismatch",
            )
        if offset + length > current.size:
            raise BadRequest(
                f"chunk would end at {offset + length}, past the declared size {current.size}",
                detail={"offset": current.offset, "size": current.size},
            )
        part = f"{offset:020d}-{secrets.token_hex(4)}"
        state.store.put_part(upload_id, part, length, chunks)
        parts = [*json.loads(current.parts), part]
        with state.db.write() as session:
            result = session.execute(
                update(UploadSession)
                .where(UploadSession.id == upload_id, UploadSession.offset == offset)
                .values(
                    offset=offset + length, parts=json.dumps(parts), updated_at=datetime.now(UTC)
                )
            )
            if result.rowcount == 0:  # type: ignore[attr-defined]
                state.store.discard_part(upload_id, part)
                raise Conflict("another request advanced this upload first", code="offset_mismatch")
    return offset + length


def commit(state: AppState, *, upload_id: str, caller: Caller) -> tuple[str, int]:
    """Assemble, verify and publish the blob; the session ends either way once complete."""
    row = get_session(state, upload_id, caller)
    if row.offset != row.size:
        raise BadRequest(
            f"upload incomplete: {row.offset} of {row.size} bytes received",
            detail={"offset": row.offset, "size": row.size},
            code="upload_incomplete",
        )
    parts: list[str] = json.loads(row.parts)
    try:
        state.store.assemble(upload_id, parts, row.digest, row.size)
    except DigestMismatchError:
        _end(state, upload_id, parts)
        raise
    try:
        with state.db.write() as session:
            repo = charged_repository(session, row)
            record_blob(
                session,
                digest=row.digest,
                size=row.size,
                actor=caller.name,
                via="upload",
                repo_id=None if repo is None else repo.id,
                store=state.store,
            )
            session.execute(delete(UploadSession).where(UploadSession.id == upload_id))
    except Conflict:  # collected meanwhile (record_blob): the parts are gone, so is the session
        _end(state, upload_id, parts)
        raise
    return row.digest, row.size


def _end(state: AppState, upload_id: str, parts: list[str]) -> None:
    with state.db.write() as session:
        session.execute(delete(UploadSession).where(UploadSession.id == upload_id))
    state.store.delete_upload(upload_id, parts)
