"""``/v1/blobs/{digest}``: HEAD, GET (Range, optional presigned redirect), PUT (streamed).

HEAD says whether a blob exists (publishers skip uploads with it); GET also honours the
quarantine and tombstones of the bundles holding the blob (service.readable_blob_size)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import AnyCaller, Publisher
from modelward.registry.domains.blobs import service
from modelward.registry.domains.blobs.streaming import (
    body_chunks,
    check_digest,
    declared_length,
    parse_range,
)

router = APIRouter(prefix="/v1/blobs", tags=["blobs"])


def _size(state: State, digest: str) -> int:
    with state.db.read() as session:
        return service.blob_size(session, check_digest(digest))


@router.head("/{digest}")
def head_blob(digest: str, caller: AnyCaller, state: State) -> Response:
    size = _size(state, digest)
    return Response(
        status_code=200,
        headers={"content-length": str(size), "accept-ranges": "bytes", "etag": f'"{digest}"'},
    )


@router.get("/{digest}", response_model=None)
def get_blob(
    digest: str, request: Request, caller: AnyCaller, state: State
) -> StreamingResponse | RedirectResponse:
    """The blob's bytes (Range honoured). 409 ``bundle_quarantined`` when every bundle that
    holds it is quarantined or tombstoned, unless the caller is an admin or a reviewer."""
    with state.db.read() as session:
        size = service.readable_blob_size(session, check_digest(digest), caller)
    if state.settings.s3_presign:
        url = state.store.presign(digest, state.settings.s3_presign_expires)
        if url is not None:
            return RedirectResponse(url, status_code=307)
    rng = parse_range(request.headers.get("range"), size)
    headers = {"accept-ranges": "bytes", "etag": f'"{digest}"'}
    if rng is None:
        headers["content-length"] = str(size)
        return StreamingResponse(
            state.store.read(digest), media_type="application/octet-stream", headers=headers
        )
    start, end = rng
    headers["content-length"] = str(end - start)
    headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
    return StreamingResponse(
        state.store.read(digest, start, end),
        status_code=206,
        media_type="application/octet-stream",
        headers=headers,
    )


@router.put(
    "/{digest}",
    status_code=201,
    responses={
        413: {
            "description": "too_large, or repository_quota_exceeded: the blob does "
            "not fit the quota of the repository named"
        }
    },
)
async def put_blob(
    digest: str,
    request: Request,
    *,
    caller: Publisher,
    state: State,
    response: Response,
    repository: Annotated[str | None, Query(max_length=201)] = None,
) -> dict[str, Any]:
    """Store a blob; naming ``repository`` charges it to that repository's quota first."""
    check_digest(digest)
    size = declared_length(request, state.settings.max_blob_bytes)
    created = await run_in_threadpool(
        service.put_blob,
        state,
        digest=digest,
        size=size,
        chunks=body_chunks(request),
        caller=caller,
        repository=repository,
    )
    if not created:
        response.status_code = 200
    return {"digest": digest, "size": size, "created": created}
