"""``/v1/admin/webhooks``: signed webhooks for rollout events, admins only
(docs/webhooks.md). Refusals: 400 ``invalid_webhook`` naming ``url`` or ``events``, 403 for
anyone but an admin (audited ``denied``), 404 for an endpoint that does not exist or was
removed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import Admin
from modelward.registry.domains.webhooks import service
from modelward.registry.domains.webhooks.sealing import Sealer
from modelward.registry.domains.webhooks.targets import MAX_URL

router = domain_router(prefix="/v1/admin/webhooks", tags=["webhooks"])

MAX_ID = 2**31 - 1  # ids are INTEGER columns
EndpointId = Annotated[int, Path(ge=1, le=MAX_ID)]
DeliveryId = Annotated[int, Path(ge=1, le=MAX_ID)]


class EndpointIn(BaseModel):
    url: str = Field(max_length=MAX_URL)
    events: list[str] = Field(default=["rollout.*"], max_length=20)
    description: str | None = Field(default=None, max_length=2000)


@router.post("", status_code=201)
def create(body: EndpointIn, caller: Admin, state: State) -> JSONResponse:
    """Register an endpoint for ``events`` (``rollout.*`` or names); the answer holds its
    signing secret ``whsec_...``, shown this once (audited ``webhook.create``)."""
    with state.db.write() as session:
        answer = service.create(
            session,
            Sealer.of(state.settings),
            url=body.url,
            events=body.events,
            description=body.description,
            caller=caller,
        )
    return JSONResponse(answer, status_code=201)


@router.get("")
def list_endpoints(
    caller: Admin, state: State, removed: Annotated[bool, Query()] = False
) -> list[dict[str, Any]]:
    """Every endpoint (with ``removed``: removed ones too); never a secret."""
    with state.db.read() as session:
        return service.list_endpoints(session, removed=removed)


@router.post("/{endpoint_id}/disable")
def disable(endpoint_id: EndpointId, caller: Admin, state: State) -> dict[str, Any]:
    """Stop sending to the endpoint and queueing events for it (audited)."""
    with state.db.write() as session:
        return service.set_enabled(session, endpoint_id, enabled=False, caller=caller)


@router.post("/{endpoint_id}/enable")
def enable(endpoint_id: EndpointId, caller: Admin, state: State) -> dict[str, Any]:
    """Send to the endpoint again; clears ``failing`` (audited)."""
    with state.db.write() as session:
        return service.set_enabled(session, endpoint_id, enabled=True, caller=caller)


@router.delete("/{endpoint_id}", status_code=204)
def remove(endpoint_id: EndpointId, caller: Admin, state: State) -> Response:
    """Remove the endpoint: its secret erased, waiting deliveries cancelled (audited)."""
    with state.db.write() as session:
        service.remove(session, endpoint_id, caller=caller)
    return Response(status_code=204)


@router.post("/{endpoint_id}/rotate")
def rotate(endpoint_id: EndpointId, caller: Admin, state: State) -> dict[str, Any]:
    """A new signing secret, shown this once (audited ``webhook.rotate``)."""
    with state.db.write() as session:
        return service.rotate(session, Sealer.of(state.settings), endpoint_id, caller=caller)


@router.get("/{endpoint_id}/deliveries")
def deliveries(
    endpoint_id: EndpointId,
    caller: Admin,
    state: State,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LOG)] = 50,
    event_type: Annotated[str | None, Query(max_length=100)] = None,
) -> dict[str, Any]:
    """The delivery log, newest first: each delivery's state and every attempt (time, HTTP
    status or error, duration)."""
    with state.db.read() as session:
        return service.deliveries(session, endpoint_id, limit=limit, event_type=event_type)


@router.post("/{endpoint_id}/deliveries/{delivery_id}/redeliver")
def redeliver(
    endpoint_id: EndpointId, delivery_id: DeliveryId, caller: Admin, state: State
) -> dict[str, Any]:
    """Queue a finished delivery again, now (the same ``webhook-id``; audited)."""
    with state.db.write() as session:
        return service.redeliver(session, endpoint_id, delivery_id, caller=caller)


@router.post("/{endpoint_id}/test", status_code=202)
def test(endpoint_id: EndpointId, caller: Admin, state: State) -> JSONResponse:
    """Queue a signed ``webhook.test`` event for the endpoint; the answer is its delivery."""
    with state.db.write() as session:
        answer = service.test(session, endpoint_id, caller=caller)
    return JSONResponse(answer, status_code=202)
