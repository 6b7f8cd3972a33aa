"""``/v1/uploads``: resumable, chunked blob uploads (start, status, chunk, commit, cancel).

A session names the repository it uploads for in its body (``"repository": "ORG/NAME"``):
its bytes are charged to that repository's quota, and a start that names none is refused
(400 ``repository_required``, ``named_repository``) before a session exists."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Header, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import Publisher
from modelward.registry.domains.blobs.endpoints import repository_required
from modelward.registry.domains.blobs.streaming import body_chunks, check_digest, declared_length
from modelward.registry.domains.uploads import service

router = domain_router(prefix="/v1/uploads", tags=["uploads"])


MAX_SIZE = 2**62  # bytes of an upload and its offsets; the store's sizes are 64-bit


class UploadIn(BaseModel):
    digest: str = Field(max_length=100)
    size: int = Field(ge=0, le=MAX_SIZE)
    # the repository the blob is for: charged to its quota from now on
    repository: str = Field(min_length=1, max_length=201)


async def named_repository(request: Request, caller: Publisher) -> None:
    """A dependency of ``POST /v1/uploads``: 400 ``repository_required`` when the body names
    no repository (absent, null or empty). It runs once the caller is known (401/403 first)
    and before the body is validated or a session opened; a body that is not a JSON object
    is left to the validation (422). FastAPI parsed a JSON body already (``request.json`` is
    cached); another one is parsed here at most once, bounded by the body limit."""
    try:
        body = await request.json()
    except (ValueError, RecursionError):  # not JSON: the validation refuses it
        return
    if isinstance(body, dict) and not body.get("repository"):
        raise repository_required("POST /v1/uploads", '"repository": "ORG/NAME" in its body')


@router.post(
    "",
    status_code=201,
    dependencies=[Depends(named_repository)],
    responses={
        413: {
            "description": "too_large, or repository_quota_exceeded: the blob does not fit "
            "the repository's quota"
        },
        429: {"description": "quota_exceeded: too many open sessions for the caller"},
    },
)
def start_upload(body: UploadIn, caller: Publisher, state: State) -> dict[str, Any]:
    """Open a session for a blob of ``repository``, charged to its quota from now on."""
    row = service.start(
        state,
        digest=check_digest(body.digest),
        size=body.size,
        caller=caller,
        repository=body.repository,
    )
    return {"id": row.id, "offset": row.offset, "digest": row.digest, "size": row.size}


@router.get("/{upload_id}")
def get_upload(upload_id: str, caller: Publisher, state: State) -> dict[str, Any]:
    row = service.get_session(state, upload_id, caller)
    return {"id": row.id, "offset": row.offset, "digest": row.digest, "size": row.size}


@router.patch("/{upload_id}")
async def patch_upload(
    upload_id: str,
    request: Request,
    caller: Publisher,
    state: State,
    upload_offset: Annotated[int, Header(alias="Upload-Offset", ge=0, le=MAX_SIZE)],
) -> dict[str, Any]:
    length = declared_length(request, state.settings.max_blob_bytes)
    offset = await run_in_threadpool(
        service.append_chunk,
        state,
        upload_id=upload_id,
        offset=upload_offset,
        length=length,
        chunks=body_chunks(request),
        caller=caller,
    )
    return {"id": upload_id, "offset": offset}


@router.post("/{upload_id}/commit", status_code=201)
def commit_upload(upload_id: str, caller: Publisher, state: State) -> dict[str, Any]:
    digest, size = service.commit(state, upload_id=upload_id, caller=caller)
    return {"digest": digest, "size": size}


@router.delete("/{upload_id}", status_code=204)
def cancel_upload(upload_id: str, caller: Publisher, state: State) -> Response:
    """End an unfinished session now; its stored chunks are deleted."""
    service.cancel(state, upload_id=upload_id, caller=caller)
    return Response(status_code=204)
