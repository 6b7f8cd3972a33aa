"""``/v1/repos/{org}/{name}/bundles/{digest}``."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any

from fastapi import Query, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import Admin, AnyCaller, Publisher
from modelward.registry.domains.blobs.streaming import check_digest
from modelward.registry.domains.bundles import service
from modelward.registry.domains.quarantine.service import require_readable
from modelward.registry.domains.repos.listing import DEFAULT_PAGE, MAX_CURSOR_CHARS, MAX_PAGE
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.errors import BadRequest, PayloadTooLarge

router = domain_router(prefix="/v1/repos/{org}/{name}/bundles", tags=["bundles"])
MAX_REASON_CHARS = 2000


class ReasonIn(BaseModel):
    reason: str = Field(max_length=MAX_REASON_CHARS)


def _b64(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise BadRequest(f"{what} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"{what} is not valid base64") from exc


@router.put("/{digest}", status_code=201)
async def put_bundle(
    *,
    org: str,
    name: str,
    digest: str,
    request: Request,
    caller: Publisher,
    state: State,
    response: Response,
) -> dict[str, Any]:
    """Body: ``{"manifest": <base64>, "attestations": [<base64>, ...]}``."""
    check_digest(digest)
    limit = state.settings.max_request_json_bytes
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"request body larger than {limit} bytes")
    try:
        doc = json.loads(bytes(body))
    except ValueError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise BadRequest("body is not JSON: nested too deeply") from exc
    if not isinstance(doc, dict) or "manifest" not in doc:
        raise BadRequest('body must be {"manifest": <base64>, "attestations": [...]}')
    manifest = _b64(doc["manifest"], "manifest")
    raw_atts = doc.get("attestations") or []
    if not isinstance(raw_atts, list):
        raise BadRequest("attestations must be a list")
    attestations = [_b64(a, f"attestations[{i}]") for i, a in enumerate(raw_atts)]
    service.check_sizes(state, manifest, attestations)
    decision, created, ignored = await run_in_threadpool(
        service.push,
        state,
        repo_name=f"{org}/{name}",
        digest=digest,
        manifest_bytes=manifest,
        attestations=attestations,
        caller=caller,
    )
    if not created:
        response.status_code = 200
    return {
        "digest": digest,
        "decision": decision,
        "created": created,
        "ignored_attestations": ignored,
    }


@router.get("")
def list_bundles(
    *,
    org: str,
    name: str,
    caller: AnyCaller,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> dict[str, Any]:
    """The repository's bundles, newest first, each with its state (live, quarantined,
    tombstoned) and the aliases pointing at it; ``next``: the ``cursor`` of the next page."""
    repo_name = f"{org}/{name}"
    with state.db.read() as session:
        page = service.list_bundles(session, caller, repo_name, limit=limit, cursor=cursor)
    return {"repository": repo_name, "bundles": page.items, "next": page.next}


@router.get("/{digest}")
def get_bundle(org: str, name: str, digest: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """The bundle record; ``manifest`` is null for publishers and readers when the digest is
    quarantined (in any repository), ``quarantined`` and the reason are always shown."""
    with state.db.read() as session:
        row = service.find_bundle(session, get_repo(session, f"{org}/{name}", caller), digest)
        return service.bundle_json(session, row, caller)


@router.get(
    "/{digest}/manifest",
    response_class=Response,
    responses={
        200: {
            "content": {"application/vnd.oci.image.manifest.v1+json": {}},
            "description": "the exact manifest bytes the digest names",
        }
    },
)
def get_manifest(org: str, name: str, digest: str, caller: AnyCaller, state: State) -> Response:
    """The exact manifest bytes. A quarantined digest (in any repository): only admins and
    reviewers may fetch it (409 ``bundle_quarantined`` otherwise)."""
    with state.db.read() as session:
        row = service.live_bundle(session, get_repo(session, f"{org}/{name}", caller), digest)
        require_readable(session, digest, caller)
        data = row.manifest
    return Response(
        content=data,
        media_type="application/vnd.oci.image.manifest.v1+json",
        headers={"etag": f'"{digest}"'},
    )


@router.delete("/{digest}", status_code=204)
def tombstone(
    *, org: str, name: str, digest: str, body: ReasonIn, caller: Admin, state: State
) -> Response:
    with state.db.write() as session:
        service.tombstone(
            session, repo_name=f"{org}/{name}", digest=digest, reason=body.reason, caller=caller
        )
    return Response(status_code=204)
