"""``/v1/blobs/{digest}``: HEAD, GET (Range, optional presigned redirect), PUT (streamed).

HEAD says whether a blob exists (publishers skip uploads with it); GET also honours the
quarantine and tombstones of the bundles holding the blob (service.readable_blob_size). A PUT
names the repository it stores for (``?repository=ORG/NAME``): every stored byte is charged to
the quota of a repository the caller may publish to, and a PUT that names none is refused
(400 ``repository_required``, ``named_repository``) before its body is read."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from modelward.registry.domains._names import RepositoryName
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import AnyCaller, Publisher
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs import service
from modelward.registry.domains.blobs.streaming import (
    body_chunks,
    check_digest,
    declared_length,
    parse_range,
)
from modelward.registry.errors import BadRequest

__all__ = ["repository_required", "router"]

router = domain_router(prefix="/v1/blobs", tags=["blobs"])


def repository_required(door: str, form: str) -> BadRequest:
    """400 ``repository_required``: ``door`` stores bytes only for a named repository, whose
    quota they are charged to (docs/http-api.md#blobs); ``form`` shows how to name it."""
    return BadRequest(
        f"{door} needs the repository the blob is for: name it with {form} (a repository "
        "you may publish to; the blob is charged to its quota)",
        detail={"parameter": "repository", "form": form},
        code="repository_required",
    )


def named_repository(request: Request, caller: Publisher) -> None:
    """A dependency of ``PUT /v1/blobs``: 400 ``repository_required`` when the query names no
    repository. It runs once the caller is known (401/403 first) and before the endpoint's
    own parameters are validated or a byte of the body is read."""
    if not request.query_params.get("repository"):
        raise repository_required("PUT /v1/blobs/{digest}", "?repository=ORG/NAME")


def _size(state: State, digest: str, caller: Caller) -> int:
    with state.db.read() as session:
        return service.visible_blob_size(session, check_digest(digest), caller)


@router.head("/{digest}")
def head_blob(digest: str, caller: AnyCaller, state: State) -> Response:
    """200 with its size when the blob is stored and reachable for the caller (a repository
    he may read holds it, or no private one does: docs/registry.md#private-repositories);
    404 otherwise, as for a blob never stored: the client uploads it."""
    size = _size(state, digest, caller)
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
    dependencies=[Depends(named_repository)],
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
    repository: RepositoryName,
) -> dict[str, Any]:
    """Store a blob for ``repository`` (one the caller may publish to), charged to its quota
    before a byte is read (413 ``repository_quota_exceeded``)."""
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
