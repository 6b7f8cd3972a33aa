"""Blobs and upload sessions of ``/v2`` over the registry's one blob store and its upload
sessions (registry.domains.uploads.service): the same verified writes, quotas and expiry
as ``/v1`` (docs/oci.md#blobs).

An OCI upload does not name its digest or size until its last request, so a session starts
as ``uploads.service.start`` with digest ``UNKNOWN_DIGEST`` and the largest size the caller
may upload (``max_blob_bytes``; ``max_attestation_bytes`` for a principal that may only
attach attestations). ``PATCH`` chunks append in order (``Content-Range`` must start at the
session's offset: 416 RANGE_INVALID otherwise); a body without ``Content-Length`` (chunked
transfer) is stored in pieces of ``PIECE_BYTES``. The closing ``PUT ?digest=`` names the
digest and the size received so far, in one conditional UPDATE on the session, and
``uploads.service.commit`` assembles, verifies and records the blob.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sqlalchemy import exists, select, update

from modelward.registry.domains._state import AppState
from modelward.registry.domains.attestations.rules import require_may_attach_some
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs import service as blobs
from modelward.registry.domains.oci.errors import OciError
from modelward.registry.domains.repos.service import get_repo, may_publish
from modelward.registry.domains.uploads import service as uploads
from modelward.registry.errors import BundleQuarantined, Forbidden, NotFound
from modelward.registry.models import Bundle, BundleBlob, UploadSession

__all__ = [
    "PIECE_BYTES",
    "UNKNOWN_DIGEST",
    "append",
    "finish",
    "mount",
    "start",
    "upload_limit",
]

UNKNOWN_DIGEST = "sha256:" + "0" * 64  # an OCI session's digest until its closing PUT
PIECE_BYTES = 16 << 20  # a chunk of unknown length is stored in pieces this large


def upload_limit(state: AppState, repo_name: str, caller: Caller) -> int:
    """The most an upload by ``caller`` to ``repo_name`` may hold; DENIED when nothing."""
    with state.db.read() as session:
        repo = get_repo(session, repo_name)
        if may_publish(session, repo, caller):
            return state.settings.max_blob_bytes
        try:
            require_may_attach_some(session, repo, caller)
        except Forbidden as exc:
            raise OciError(
                403, "DENIED", f"{caller.name} ({caller.role}) may not push to {repo_name}"
            ) from exc
    return min(state.settings.max_attestation_bytes, state.settings.max_blob_bytes)


def start(state: AppState, *, repo_name: str, caller: Caller) -> UploadSession:
    limit = upload_limit(state, repo_name, caller)
    return uploads.start(state, digest=UNKNOWN_DIGEST, size=limit, caller=caller)


def mount(
    state: AppState, *, repo_name: str, digest: str, source: str, caller: Caller
) -> int | None:
    """The size of ``digest`` when a bundle of ``source`` holds it and ``caller`` may read
    it (and push here); None when the client must upload it instead."""
    upload_limit(state, repo_name, caller)
    with state.db.read() as session:
        try:
            repo = get_repo(session, source)
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
            return blobs.readable_blob_size(session, digest, caller)
        except (NotFound, BundleQuarantined):  # unreadable: upload instead
            return None


def _pieces(chunks: Iterable[bytes], piece: int) -> Iterator[bytes]:
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= piece:
            yield bytes(buffer[:piece])
            del buffer[:piece]
    if buffer:
        yield bytes(buffer)


def append(
    state: AppState,
    *,
    upload_id: str,
    start_at: int | None,
    length: int | None,
    chunks: Iterable[bytes],
    caller: Caller,
) -> int:
    """Append one PATCH (or the closing PUT's) body; returns the new offset."""
    row = uploads.get_session(state, upload_id, caller)
    if start_at is not None and start_at != row.offset:
        blobs.drain(chunks)
        raise OciError(
            416,
            "RANGE_INVALID",
            f"Content-Range starts at {start_at}, the upload is at {row.offset}",
            detail={"offset": row.offset},
        )
    offset = row.offset
    if length is not None:
        if length == 0:
            blobs.drain(chunks)
            return offset
        return uploads.append_chunk(
            state, upload_id=upload_id, offset=offset, length=length, chunks=chunks, caller=caller
        )
    for piece in _pieces(chunks, PIECE_BYTES):
        offset = uploads.append_chunk(
            state,
            upload_id=upload_id,
            offset=offset,
            length=len(piece),
            chunks=[piece],
            caller=caller,
        )
    return offset


def finish(
    state: AppState, *, upload_id: str, digest: str, caller: Caller, repo_name: str
) -> tuple[str, int]:
    """Name the session's digest and size, charge the blob to ``repo_name``'s quota (413
    ``repository_quota_exceeded``: only now is its size known), then commit it through the
    upload service."""
    row = uploads.get_session(state, upload_id, caller)
    with state.db.write() as session:
        repo = blobs.charge_repository(
            session, state, repository=repo_name, digest=digest, size=row.offset, caller=caller
        )
        result = session.execute(
            update(UploadSession)
            .where(
                UploadSession.id == upload_id,
                UploadSession.offset == row.offset,
                UploadSession.digest == UNKNOWN_DIGEST,
            )
            .values(digest=digest, size=row.offset, repo_id=repo.id if repo else None)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise OciError(
                400, "BLOB_UPLOAD_INVALID", f"upload {upload_id} changed while it was being closed"
            )
    return uploads.commit(state, upload_id=upload_id, caller=caller)
