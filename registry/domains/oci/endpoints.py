"""``/v2``: the OCI Distribution Spec v1.1 routes (docs/oci.md). Thin: authentication and
scopes (oci.auth), then the services (oci.manifests, oci.blobs, blobs, uploads)."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from modelward.attest import oci_media as mt
from modelward.registry.domains._numbers import header_decimal
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.blobs import service as blob_service
from modelward.registry.domains.blobs.streaming import (
    body_chunks,
    check_digest,
    declared_length,
    parse_range,
)
from modelward.registry.domains.oci import auth, blobs, manifests
from modelward.registry.domains.oci.errors import API_VERSION_HEADER, OCI_RESPONSES, OciError
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.uploads import service as upload_service
from modelward.registry.errors import NotFound

router = domain_router(prefix="/v2", tags=["oci"], responses=OCI_RESPONSES)
Documented = dict[int | str, dict[str, Any]]
_MANIFEST_BODY: Documented = {
    200: {
        "content": {mt.IMAGE_MANIFEST: {}},
        "description": "the exact manifest bytes; Docker-Content-Digest",
    },
}
_BLOB_BODY: Documented = {
    200: {"content": {"application/octet-stream": {}}, "description": "the bytes"},
    206: {"content": {"application/octet-stream": {}}, "description": "a Range"},
    307: {"description": "a presigned URL (s3_presign)"},
}
_CREATED: Documented = {201: {"description": "created: Location, Docker-Content-Digest"}}
REPO = "/{org}/{name}"
_CONTENT_RANGE = re.compile(r"^(?:bytes )?([0-9]{1,19})-([0-9]{1,19})$")
PageN = Annotated[int | None, Query(ge=0, le=10_000)]
PageLast = Annotated[str | None, Query(max_length=300)]


def _headers(**extra: str) -> dict[str, str]:
    return {**API_VERSION_HEADER, **extra}


def _caller(request: Request, state: State, repo: str, action: str) -> Caller:
    who = auth.oci_caller(request, state)
    return who.require(f"repository:{repo}", action)


def _repo_exists(state: State, repo: str, caller: Caller) -> None:
    """NotFound unless ``repo`` exists and ``caller`` may read it (the same 404 both ways)."""
    with state.db.read() as session:
        get_repo(session, repo, caller)


# -- base and token ---------------------------------------------------------------------------
@router.get("/", response_class=JSONResponse)
def base(request: Request, state: State) -> JSONResponse:
    """200 for an authenticated caller; 401 with the Bearer challenge otherwise."""
    auth.oci_caller(request, state)
    return JSONResponse({}, headers=_headers())


@router.get("/token")
def token(
    request: Request,
    state: State,
    scope: Annotated[list[str] | None, Query(max_length=300)] = None,
    service: Annotated[str | None, Query(max_length=100)] = None,
) -> JSONResponse:
    """Docker/OCI token endpoint: HTTP basic auth (principal name + API token) -> a bearer
    for the granted scopes, valid ``expires_in`` seconds (docs/oci.md#auth)."""
    scopes = [s for item in (scope or []) for s in item.split(" ") if s]
    return JSONResponse(auth.issue(state, request, scopes, service), headers=_headers())


@router.get("/_catalog")
def catalog(request: Request, state: State, n: PageN = None, last: PageLast = None) -> JSONResponse:
    caller = auth.oci_caller(request, state).require(auth.CATALOG, "*")
    names, more = manifests.catalog(state, n=n, last=last, caller=caller)
    headers = _headers()
    if more and names:
        headers["Link"] = f'</v2/_catalog?n={len(names)}&last={quote(names[-1])}>; rel="next"'
    return JSONResponse({"repositories": names}, headers=headers)


# -- manifests --------------------------------------------------------------------------------
def _manifest_response(out: manifests.ManifestOut, head: bool) -> Response:
    headers = _headers(**{"Docker-Content-Digest": out.digest, "ETag": f'"{out.digest}"'})
    if head:
        headers["Content-Length"] = str(len(out.data))
        return Response(status_code=200, headers=headers, media_type=out.media_type)
    return Response(content=out.data, headers=headers, media_type=out.media_type)


@router.get(
    REPO + "/manifests/{reference}",
    response_class=Response,
    operation_id="oci_get_manifest",
    responses=_MANIFEST_BODY,
)
@router.head(
    REPO + "/manifests/{reference}",
    response_class=Response,
    operation_id="oci_head_manifest",
    responses=_MANIFEST_BODY,
)
def get_manifest(org: str, name: str, reference: str, request: Request, state: State) -> Response:
    repo = f"{org}/{name}"
    caller = _caller(request, state, repo, "pull")
    out = manifests.get(state, repo_name=repo, reference=reference, caller=caller)
    return _manifest_response(out, request.method == "HEAD")


@router.put(
    REPO + "/manifests/{reference}", status_code=201, response_class=Response, responses=_CREATED
)
async def put_manifest(
    org: str, name: str, reference: str, request: Request, state: State
) -> Response:
    """Store a manifest: a ModelPack bundle (or ``pending``) or an attestation referrer;
    by tag, the tag (an alias) moves under the alias rules."""
    repo = f"{org}/{name}"
    caller = await run_in_threadpool(_caller, request, state, repo, "push")
    limit = state.settings.max_manifest_bytes
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise OciError(413, "SIZE_INVALID", f"manifest larger than {limit} bytes")
    out = await run_in_threadpool(
        manifests.put, state, repo_name=repo, reference=reference, body=bytes(body), caller=caller
    )
    headers = _headers(
        **{"Docker-Content-Digest": out.digest, "Location": f"/v2/{repo}/manifests/{out.digest}"}
    )
    if out.subject:
        headers["OCI-Subject"] = out.subject
    headers["Modelward-State"] = out.state
    if not reference.startswith("sha256:") and not out.subject:
        warning = await run_in_threadpool(_unsigned_tag, state, repo, reference, out.digest, caller)
        if warning is not None:
            headers["Warning"] = f'299 - "{warning}"'
    return Response(status_code=201, headers=headers)


def _unsigned_tag(state: AppState, repo: str, tag: str, digest: str, caller: Caller) -> str | None:
    """After a push by tag: when the tag (an alias) now names ``digest`` but no TUF role signs
    it, the words of an RFC 7234 ``Warning`` (skopeo and oras print it; they show no body)
    and an ``alias.unsigned`` audit event; None when signed or not moved (docs/oci.md)."""
    from modelward.registry.domains.aliases.service import get_alias
    from modelward.registry.domains.audit.service import append

    with state.db.write() as session:
        alias = get_alias(session, repo, tag, caller, view=state.signed)
        if alias.get("digest") != digest or alias.get("signed"):
            return None
        append(
            session,
            actor=caller.name,
            action="alias.unsigned",
            subject=f"{repo}@{tag}",
            details={"digest": digest, "via": "oci"},
        )
    return (
        f"modelward: {repo}@{tag} now names {digest} UNSIGNED (the registry's word only); "
        "workers resolving through TUF do not see it; sign the move: modelward trust sign "
        "ID --key KEY (IDs: modelward alias pending)"
    )


@router.delete(REPO + "/manifests/{reference}", response_class=Response)
def delete_manifest(
    org: str, name: str, reference: str, request: Request, state: State
) -> Response:
    """Refused: bundles are immutable; an admin tombstones one with a reason
    (DELETE /v1/repos/ORG/NAME/bundles/DIGEST)."""
    _caller(request, state, f"{org}/{name}", "pull")
    raise OciError(
        405,
        "UNSUPPORTED",
        "manifests are immutable here: an admin deletes (tombstones) a bundle with "
        f"a reason through DELETE /v1/repos/{org}/{name}/bundles/<digest>",
    )


# -- tags and referrers -----------------------------------------------------------------------
@router.get(REPO + "/tags/list")
def list_tags(
    *, org: str, name: str, request: Request, state: State, n: PageN = None, last: PageLast = None
) -> JSONResponse:
    repo = f"{org}/{name}"
    caller = _caller(request, state, repo, "pull")
    names, more = manifests.tags(state, repo_name=repo, n=n, last=last, caller=caller)
    headers = _headers()
    if more and names:
        headers["Link"] = (
            f'</v2/{repo}/tags/list?n={len(names)}&last={quote(names[-1])}>; rel="next"'
        )
    return JSONResponse({"name": repo, "tags": names}, headers=headers)


@router.get(
    REPO + "/referrers/{digest}",
    responses={
        200: {"content": {mt.IMAGE_INDEX: {}}, "description": "an image index of the referrers"}
    },
)
def list_referrers(
    *,
    org: str,
    name: str,
    digest: str,
    request: Request,
    state: State,
    artifact_type: Annotated[str | None, Query(alias="artifactType", max_length=200)] = None,
) -> JSONResponse:
    repo = f"{org}/{name}"
    caller = _caller(request, state, repo, "pull")
    check_digest(digest)
    found = manifests.referrers(
        state, repo_name=repo, digest=digest, artifact_type=artifact_type, caller=caller
    )
    headers = _headers()
    if artifact_type is not None:
        headers["OCI-Filters-Applied"] = "artifactType"
    body = {"schemaVersion": 2, "mediaType": mt.IMAGE_INDEX, "manifests": found}
    return JSONResponse(body, media_type=mt.IMAGE_INDEX, headers=headers)


# -- blobs ------------------------------------------------------------------------------------
@router.get(
    REPO + "/blobs/{digest}",
    response_model=None,
    operation_id="oci_get_blob",
    response_class=Response,
    responses=_BLOB_BODY,
)
@router.head(
    REPO + "/blobs/{digest}",
    response_model=None,
    operation_id="oci_head_blob",
    response_class=Response,
    responses=_BLOB_BODY,
)
def get_blob(
    org: str, name: str, digest: str, request: Request, state: State
) -> Response | StreamingResponse | RedirectResponse:
    repo = f"{org}/{name}"
    caller = _caller(request, state, repo, "pull")
    check_digest(digest)
    _repo_exists(state, repo, caller)
    base = _headers(
        **{"Docker-Content-Digest": digest, "Accept-Ranges": "bytes", "ETag": f'"{digest}"'}
    )
    try:
        size = blobs.readable_size(state, digest=digest, caller=caller)
    except NotFound as exc:
        small = manifests.attestation_blob(state, repo_name=repo, digest=digest, caller=caller)
        if small is None:
            raise OciError(404, "BLOB_UNKNOWN", f"blob {digest} not found") from exc
        return _small_blob(small, request, base)
    if request.method == "HEAD":
        return Response(
            status_code=200,
            headers={**base, "Content-Length": str(size)},
            media_type="application/octet-stream",
        )
    if state.settings.s3_presign:
        url = state.store.presign(digest, state.settings.s3_presign_expires)
        if url is not None:
            return RedirectResponse(url, status_code=307, headers=base)
    rng = parse_range(request.headers.get("range"), size)
    if rng is None:
        return StreamingResponse(
            state.store.read(digest),
            media_type="application/octet-stream",
            headers={**base, "Content-Length": str(size)},
        )
    start, end = rng
    return StreamingResponse(
        state.store.read(digest, start, end),
        status_code=206,
        media_type="application/octet-stream",
        headers={
            **base,
            "Content-Length": str(end - start),
            "Content-Range": f"bytes {start}-{end - 1}/{size}",
        },
    )


def _small_blob(data: bytes, request: Request, headers: dict[str, str]) -> Response:
    if request.method == "HEAD":
        return Response(
            status_code=200,
            media_type="application/octet-stream",
            headers={**headers, "Content-Length": str(len(data))},
        )
    rng = parse_range(request.headers.get("range"), len(data))
    if rng is None:
        return Response(content=data, media_type="application/octet-stream", headers=headers)
    start, end = rng
    return Response(
        content=data[start:end],
        status_code=206,
        media_type="application/octet-stream",
        headers={**headers, "Content-Range": f"bytes {start}-{end - 1}/{len(data)}"},
    )


@router.delete(REPO + "/blobs/{digest}", response_class=Response)
def delete_blob(org: str, name: str, digest: str, request: Request, state: State) -> Response:
    _caller(request, state, f"{org}/{name}", "pull")
    raise OciError(
        405,
        "UNSUPPORTED",
        "blobs are not deleted through /v2: unreferenced blobs "
        "are garbage-collected by the registry",
    )


# -- uploads ----------------------------------------------------------------------------------
def _upload_headers(repo: str, upload_id: str, offset: int) -> dict[str, str]:
    return _headers(
        **{
            "Location": f"/v2/{repo}/blobs/uploads/{upload_id}",
            "Docker-Upload-UUID": upload_id,
            "Range": f"0-{max(offset - 1, 0)}",
            "OCI-Chunk-Min-Length": "0",
        }
    )


def _blob_created(repo: str, digest: str) -> Response:
    return Response(
        status_code=201,
        headers=_headers(
            **{"Location": f"/v2/{repo}/blobs/{digest}", "Docker-Content-Digest": digest}
        ),
    )


def _length(request: Request, limit: int) -> int | None:
    """The Content-Length, or None for a chunked body (no header)."""
    if request.headers.get("content-length") is None:
        return None
    return declared_length(request, limit)


@router.post(REPO + "/blobs/uploads/", response_class=Response, status_code=202, responses=_CREATED)
@router.post(
    REPO + "/blobs/uploads", response_class=Response, status_code=202, include_in_schema=False
)
async def start_upload(
    *,
    org: str,
    name: str,
    request: Request,
    state: State,
    digest: Annotated[str | None, Query(max_length=100)] = None,
    mount: Annotated[str | None, Query(max_length=100)] = None,
    from_: Annotated[str | None, Query(alias="from", max_length=300)] = None,
) -> Response:
    """Start an upload (202 + Location); with ``?digest=`` and a body, a monolithic upload
    (201); with ``?mount=&from=``, a cross-repository mount when the caller may read the
    source (201), else a new upload (202)."""
    repo = f"{org}/{name}"
    who = await run_in_threadpool(auth.oci_caller, request, state)
    caller = who.require(f"repository:{repo}", "push")
    if mount is not None and from_ is not None:
        check_digest(mount)
        readable = who.scopes is None or (f"repository:{from_}", "pull") in who.scopes
        size = (
            await run_in_threadpool(
                blobs.mount, state, repo_name=repo, digest=mount, source=from_, caller=caller
            )
            if readable
            else None
        )
        if size is not None:
            return _blob_created(repo, mount)
    limit = state.settings.max_blob_bytes
    length = _length(request, limit)
    if digest is not None:
        check_digest(digest)
        if length is not None:
            allowed = await run_in_threadpool(blobs.upload_limit, state, repo, caller)
            if length > allowed:
                raise OciError(
                    413,
                    "SIZE_INVALID",
                    f"blob of {length} bytes exceeds the {allowed} bytes "
                    f"{caller.name} may upload to {repo}",
                )
            await run_in_threadpool(
                blob_service.put_blob,
                state,
                digest=digest,
                size=length,
                chunks=body_chunks(request),
                caller=caller,
                repository=repo,
            )
            return _blob_created(repo, digest)
    row = await run_in_threadpool(blobs.start, state, repo_name=repo, caller=caller)
    if digest is not None:  # a monolithic POST with a chunked body
        await run_in_threadpool(
            blobs.append,
            state,
            upload_id=row.id,
            repo_name=repo,
            start_at=None,
            length=None,
            chunks=body_chunks(request),
            caller=caller,
        )
        await run_in_threadpool(
            blobs.finish, state, upload_id=row.id, digest=digest, caller=caller, repo_name=repo
        )
        return _blob_created(repo, digest)
    return Response(status_code=202, headers=_upload_headers(repo, row.id, 0))


@router.get(REPO + "/blobs/uploads/{upload_id}", response_class=Response, status_code=204)
def upload_status(org: str, name: str, upload_id: str, request: Request, state: State) -> Response:
    repo = f"{org}/{name}"
    caller = _caller(request, state, repo, "push")
    row = blobs.session_of(state, upload_id=upload_id, repo_name=repo, caller=caller)
    return Response(status_code=204, headers=_upload_headers(repo, upload_id, row.offset))


def _content_range(request: Request) -> int | None:
    raw = request.headers.get("content-range")
    if raw is None:
        return None
    match = _CONTENT_RANGE.fullmatch(raw.strip())
    if match is None:
        raise OciError(416, "RANGE_INVALID", f"Content-Range {raw[:60]!r}: expected <start>-<end>")
    return header_decimal("Content-Range", match.group(1))


@router.patch(REPO + "/blobs/uploads/{upload_id}", response_class=Response, status_code=202)
async def patch_upload(
    org: str, name: str, upload_id: str, request: Request, state: State
) -> Response:
    """Append a chunk (``Content-Range`` optional; it must start at the current offset),
    charged to the repository's quota before it is stored (413 DENIED
    ``repository_quota_exceeded``: the upload is ended and its bytes deleted)."""
    repo = f"{org}/{name}"
    caller = await run_in_threadpool(_caller, request, state, repo, "push")
    start_at = _content_range(request)
    length = _length(request, state.settings.max_blob_bytes)
    offset = await run_in_threadpool(
        blobs.append,
        state,
        upload_id=upload_id,
        repo_name=repo,
        start_at=start_at,
        length=length,
        chunks=body_chunks(request),
        caller=caller,
    )
    return Response(status_code=202, headers=_upload_headers(repo, upload_id, offset))


@router.put(REPO + "/blobs/uploads/{upload_id}", response_class=Response, status_code=201)
async def close_upload(
    *,
    org: str,
    name: str,
    upload_id: str,
    request: Request,
    state: State,
    digest: Annotated[str, Query(max_length=100)],
) -> Response:
    """Close the upload: an optional last chunk, then the blob is verified against
    ``?digest=`` and recorded."""
    repo = f"{org}/{name}"
    caller = await run_in_threadpool(_caller, request, state, repo, "push")
    check_digest(digest)
    start_at = _content_range(request)
    length = _length(request, state.settings.max_blob_bytes)
    if length != 0:
        await run_in_threadpool(
            blobs.append,
            state,
            upload_id=upload_id,
            repo_name=repo,
            start_at=start_at,
            length=length,
            chunks=body_chunks(request),
            caller=caller,
        )
    await run_in_threadpool(
        blobs.finish, state, upload_id=upload_id, digest=digest, caller=caller, repo_name=repo
    )
    return _blob_created(repo, digest)


@router.delete(REPO + "/blobs/uploads/{upload_id}", response_class=Response, status_code=204)
def cancel_upload(org: str, name: str, upload_id: str, request: Request, state: State) -> Response:
    repo = f"{org}/{name}"
    caller = _caller(request, state, repo, "push")
    blobs.session_of(state, upload_id=upload_id, repo_name=repo, caller=caller)
    upload_service.cancel(state, upload_id=upload_id, caller=caller)
    return Response(status_code=204, headers=_headers())
