"""``/v1/repos/{org}/{name}/bundles/{digest}/attestations``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from modelward.registry.domains._state import State
from modelward.registry.domains.attestations import service
from modelward.registry.domains.auth.deps import AnyCaller
from modelward.registry.errors import PayloadTooLarge

router = APIRouter(
    prefix="/v1/repos/{org}/{name}/bundles/{digest}/attestations", tags=["attestations"]
)


@router.post("", status_code=201)
async def attach(
    *,
    org: str,
    name: str,
    digest: str,
    request: Request,
    caller: AnyCaller,
    state: State,
    response: Response,
) -> dict[str, Any]:
    """Raw body: a DSSE envelope, Sigstore bundle or OMS signature (verified, then stored)."""
    limit = state.settings.max_attestation_bytes
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise PayloadTooLarge(f"attestation larger than {limit} bytes")
    summary, created = await run_in_threadpool(
        service.attach,
        state,
        repo_name=f"{org}/{name}",
        digest=digest,
        data=bytes(data),
        caller=caller,
    )
    if not created:
        response.status_code = 200
    return summary


@router.get("")
def list_attestations(
    org: str, name: str, digest: str, caller: AnyCaller, state: State
) -> list[dict[str, Any]]:
    return service.list_for_bundle(state, repo_name=f"{org}/{name}", digest=digest)
