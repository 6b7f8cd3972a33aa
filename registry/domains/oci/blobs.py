"""Blobs and upload sessions of ``/v2`` over the registry's one blob store and its upload
sessions (registry.domains.uploads.service): the same verified writes, quotas and expiry
as ``/v1`` (docs/oci.md#blobs).

An OCI upload does not name its digest or size until its last request, so a session starts
as ``uploads.service.start`` with digest ``UNKNOWN_DIGEST`` (``gc.quota.UNNAMED_DIGEST``),
with nothing reserved yet. Only a principal that may write to the repository of its URL opens
one (``upload_limit``: a publisher of it, or one that may attach some attestation there,
``authz``), and it is charged to whoever opened it: to the repository's quota when its opener
may publish there, else to the opener alone (``uploads.service.charged_repository``: at most
``max_open_uploads`` sessions of ``max_attestation_bytes`` each), so a reader attaching a
baseline cannot take the publishers' room. Each ``PATCH`` chunk (and
the closing ``PUT``'s) goes, in order:
  (1) the session belongs to the caller and to the repository in the URL (else 404
      BLOB_UPLOAD_UNKNOWN), and ``Content-Range`` starts at its offset (else 416
      RANGE_INVALID);
  (2) the upload stays within the most the caller may upload (``upload_limit``:
      ``max_blob_bytes``; ``max_attestation_bytes`` for a principal that may only attach
      attestations), else 413 SIZE_INVALID;
  (3) the chunk is charged to the repository's quota before a byte of it is stored
      (``uploads.service.reserve``), else 413 DENIED ``repository_quota_exceeded``; a body
      without ``Content-Length`` (chunked transfer) is charged and stored in pieces of at
      most ``PIECE_BYTES``, cut short where the quota's headroom ends, so the refusal comes as
      soon as the limit is passed and memory stays bounded;
  (4) the chunk is stored (``uploads.service.append_chunk``).
A refusal at (2) or (3) aborts the session: its row and every part it stored are deleted
(audited ``upload.abort``), so a refused push leaves no blob behind. The closing
``PUT ?digest=`` names the digest and the size received, in one conditional UPDATE on the
session, and ``uploads.service.commit`` assembles, verifies and records the blob.

Every door that hands out a blob asks ``quarantine.service.require_readable`` about it
(``readable_size``, ``mount``), besides ``blobs.service.readable_blob_size``. A monolithic
upload of a stored digest (``blobs.service.put_blob``) and a session closed on one
(``uploads.service.commit``) hash the bytes received all the same: other bytes are refused
(``DIGEST_INVALID``) and lease nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sqlalchemy import exists, select, update

from modelward.registry.domains._state import AppState
from modelward.registry.domains.auth.authz import require_may_attach_some
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs import service as blobs
from modelward.registry.domains.gc.quota import UNNAMED_DIGEST, require_room, usage
from modelward.registry.domains.oci.errors import OciError
from modelward.registry.domains.quarantine.service import require_readable
from modelward.registry.domains.repos.service import get_repo, may_publish
from modelward.registry.domains.uploads import service as uploads
from modelward.registry.errors import Forbidden, NotFound, PayloadTooLarge, Quarantined
from modelward.registry.models import Bundle, BundleBlob, UploadSession

__all__ = [
    "PIECE_BYTES",
    "UNKNOWN_DIGEST",
    "append",
    "finish",
    "mount",
    "readable_size",
    "session_of",
    "start",
    "upload_limit",
]

UNKNOWN_DIGEST = UNNAMED_DIGEST  # an OCI session's digest until its closing PUT
PIECE_BYTES = 16 << 20  # a chunk of unknown length is stored in pieces this large


def upload_limit(state: AppState, repo_name: str, caller: Caller) -> int:
    """The most an upload by ``caller`` to ``repo_name`` may hold; DENIED when nothing."""
    return _uploadable(state, repo_name, caller)[1]


def _uploadable(state: AppState, repo_name: str, caller: Caller) -> tuple[int, int]:
    """(the repository's id, ``upload_limit``)."""
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        if may_publish(session, repo, caller):
            return repo.id, state.settings.max_blob_bytes
        try:
            require_may_attach_some(session, repo, caller)
        except Forbidden as exc:
            raise OciError(
                403, "DENIED", f"{caller.name} ({caller.role}) may not push to {repo_name}"
            ) from exc
        repo_id = repo.id
    return repo_id, min(state.settings.max_attestation_bytes, state.settings.max_blob_bytes)


def start(state: AppState, *, repo_name: str, caller: Caller) -> UploadSession:
    """A new session charged to ``repo_name`` (nothing reserved until a chunk comes)."""
    repo_id, _ = _uploadable(state, repo_name, caller)
    return uploads.start(state, digest=UNKNOWN_DIGEST, size=0, caller=caller, repo_id=repo_id)


def session_of(state: AppState, *, upload_id: str, repo_name: str, caller: Caller) -> UploadSession:
    """The caller's open session ``upload_id`` of ``repo_name``; 404 BLOB_UPLOAD_UNKNOWN for a
    session of another repository (or none)."""
    row = uploads.get_session(state, upload_id, caller)
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
    if row.repo_id != repo.id or row.digest != UNKNOWN_DIGEST:
        raise OciError(404, "BLOB_UPLOAD_UNKNOWN", f"no upload session {upload_id} in {repo_name}")
    return row


def readable_size(state: AppState, *, digest: str, caller: Caller) -> int:
    """The size of a stored blob ``caller`` may download: NotFound when none is stored,
    Quarantined when the quarantine covers it (``quarantine.service.quarantined_blobs``) or
    only tombstoned bundles hold it (admins and reviewers excepted)."""
    with state.db.read() as session:
        size = blobs.readable_blob_size(session, digest, caller)
        require_readable(session, digest, caller)
    return size


def mount(
    state: AppState, *, repo_name: str, digest: str, source: str, caller: Caller
) -> int | None:
    """The size of ``digest`` when a bundle of ``source`` holds it and ``caller`` may read
    it (and push here), leased to ``repo_name`` and charged to its quota (413 DENIED
    ``repository_quota_exceeded`` when it does not fit); None when the client must upload it
    instead (an unknown source, a blob the source does not hold, a quarantined one)."""
    upload_limit(state, repo_name, caller)
    with state.db.write() as session:
        try:
            repo = get_repo(session, source, caller)
        except NotFound:  # an unknown source: upload instead (the spec's fallback)
            return None
        held = session.execute(
            select(
                exists().where(
                    BundleBlob.digest == digest,
                    Bundle.id == BundleBlob.bundle_id,
                    Bundle.repo_id == repo.id,
                )
            )
        ).scalar_one()
        if not held:
            return None
        try:
            size = blobs.readable_blob_size(session, digest, caller)
            require_readable(session, digest, caller)
        except (NotFound, Quarantined):  # unreadable: upload instead
            return None
        target = get_repo(session, repo_name, caller)
        require_room(session, target, {digest: size}, state.settings)
        blobs.lease_blob(session, digest=digest, size=size, repo_id=target.id)
        return size


def _pieces(chunks: Iterable[bytes], piece: int, headroom: int | None) -> Iterator[bytes]:
    """The body in pieces of at most ``piece`` bytes; with ``headroom`` (the bytes the
    quota has room for), the piece that would pass it ends one byte past it, so the
    reservation refuses it before more is read."""
    buffer = bytearray()
    given = 0

    def cap() -> int:
        return piece if headroom is None else max(1, min(piece, headroom - given + 1))

    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= cap():
            size = cap()
            yield bytes(buffer[:size])
            del buffer[:size]
            given += size
    if buffer:
        yield bytes(buffer)


def _headroom(state: AppState, row: UploadSession) -> int | None:
    """The bytes past the session's offset its repository's quota has room for now; None
    without a quota, or for a session charged to its opener (``charged_repository``). Only
    a hint for cutting pieces: ``uploads.service.reserve`` decides."""
    with state.db.read() as session:
        repo = uploads.charged_repository(session, row)
        if repo is None or repo.quota_bytes is None:
            return None
        used = usage(session, repo.id, state.settings)
        return max(0, repo.quota_bytes - used) + max(0, row.size - row.offset)


def _drain(chunks: Iterable[bytes], limit: int) -> None:
    """Read (and drop) what is left of a refused body, at most ``limit`` bytes, so the client
    sees the answer rather than a reset."""
    seen = 0
    for chunk in chunks:
        seen += len(chunk)
        if seen >= limit:
            return


def _charge(
    state: AppState,
    *,
    row: UploadSession,
    repo_name: str,
    offset: int,
    wanted: int,
    limit: int,
    caller: Caller,
    chunks: Iterable[bytes],
) -> None:
    """(2) and (3) of the module doc for a chunk taking the session to ``wanted`` bytes."""
    # (2): within the most the caller may upload here.
    if wanted > limit:
        current = uploads.get_session(state, row.id, caller)  # the parts stored so far
        uploads.abort(state, current, actor=caller.name, reason="too_large")
        _drain(chunks, state.settings.max_blob_bytes)
        raise OciError(
            413,
            "SIZE_INVALID",
            f"upload of {wanted} bytes or more exceeds the {limit} bytes {caller.name} may "
            f"upload to {repo_name}; the upload is ended",
            detail={"offset": offset, "limit": limit},
        )
    # (3): charged to the repository's quota before a byte is stored.
    try:
        uploads.reserve(state, upload_id=row.id, offset=offset, wanted=wanted, caller=caller)
    except PayloadTooLarge:  # the session is aborted (uploads.service.reserve)
        _drain(chunks, state.settings.max_blob_bytes)
        raise


def append(
    state: AppState,
    *,
    upload_id: str,
    repo_name: str,
    start_at: int | None,
    length: int | None,
    chunks: Iterable[bytes],
    caller: Caller,
) -> int:
    """Append one PATCH (or the closing PUT's) body, in the order of the module doc;
    returns the new offset."""
    # (1): the caller's session of this repository, at the offset the chunk says.
    row = session_of(state, upload_id=upload_id, repo_name=repo_name, caller=caller)
    if start_at is not None and start_at != row.offset:
        blobs.drain(chunks)
        raise OciError(
            416,
            "RANGE_INVALID",
            f"Content-Range starts at {start_at}, the upload is at {row.offset}",
            detail={"offset": row.offset},
        )
    limit = upload_limit(state, repo_name, caller)
    offset = row.offset
    if length is not None:
        if length == 0:
            blobs.drain(chunks)
            return offset
        _charge(
            state,
            row=row,
            repo_name=repo_name,
            offset=offset,
            wanted=offset + length,
            limit=limit,
            caller=caller,
            chunks=chunks,
        )
        # (4): stored.
        return uploads.append_chunk(
            state, upload_id=upload_id, offset=offset, length=length, chunks=chunks, caller=caller
        )
    stream = iter(chunks)
    for piece in _pieces(stream, PIECE_BYTES, _headroom(state, row)):
        _charge(
            state,
            row=row,
            repo_name=repo_name,
            offset=offset,
            wanted=offset + len(piece),
            limit=limit,
            caller=caller,
            chunks=stream,
        )
        offset = uploads.append_chunk(
            state,
            upload_id=upload_id,
            offset=offset,
            length=len(piece),
            chunks=[piece],
            caller=caller,
        )
        row.offset = offset
    return offset


def finish(
    state: AppState, *, upload_id: str, digest: str, caller: Caller, repo_name: str
) -> tuple[str, int]:
    """Name the session's digest and size (its bytes were charged to ``repo_name`` as they
    arrived; naming the digest can only lower the charge, when the repository holds the blob
    already), then commit it through the upload service."""
    row = session_of(state, upload_id=upload_id, repo_name=repo_name, caller=caller)
    upload_limit(state, repo_name, caller)  # the caller may still push here
    with state.db.write() as session:
        result = session.execute(
            update(UploadSession)
            .where(
                UploadSession.id == upload_id,
                UploadSession.offset == row.offset,
                UploadSession.digest == UNKNOWN_DIGEST,
            )
            .values(digest=digest, size=row.offset)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise OciError(
                400, "BLOB_UPLOAD_INVALID", f"upload {upload_id} changed while it was being closed"
            )
    return uploads.commit(state, upload_id=upload_id, caller=caller)
