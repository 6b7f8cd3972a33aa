"""``/v1/repos/{org}/{name}/bundles/{digest}/attestations``: attach, list, retract.

Who may attach or retract what is decided in ``auth.authz``, called by the service.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.attestations import service
from modelward.registry.domains.auth.deps import AnyCaller
from modelward.registry.errors import PayloadTooLarge

router = domain_router(
    prefix="/v1/repos/{org}/{name}/bundles/{digest}/attestations", tags=["attestations"]
)
MAX_REASON_CHARS = 2000
MAX_ID = 2**31 - 1  # attestations.id is a 32-bit INTEGER on PostgreSQL


class RetractIn(BaseModel):
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)


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
    """Raw body: a DSSE envelope, Sigstore bundle or OMS signature (verified, then stored).

    Who may attach it depends on the verified statement's predicate type (403 otherwise)."""
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
    *,
    org: str,
    name: str,
    digest: str,
    caller: AnyCaller,
    state: State,
    include_retracted: Annotated[
        bool, Query(description="Also list retracted attestations (admins and reviewers)")
    ] = False,
) -> list[dict[str, Any]]:
    """The bundle's attestations, oldest first; retracted ones only on request."""
    return service.list_for_bundle(
        state,
        repo_name=f"{org}/{name}",
        digest=digest,
        caller=caller,
        include_retracted=include_retracted,
    )


@router.delete("/{attestation_id}")
def retract(
    *,
    org: str,
    name: str,
    digest: str,
    attestation_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    body: RetractIn,
    caller: AnyCaller,
    state: State,
) -> dict[str, Any]:
    """Retract an attestation (its attacher or an admin): kept, audited, no longer counted."""
    return service.retract(
        state,
        repo_name=f"{org}/{name}",
        digest=digest,
        attestation_id=attestation_id,
        reason=body.reason,
        caller=caller,
    )
