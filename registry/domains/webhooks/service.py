"""The admins' webhook endpoints: register, list, disable and enable, remove, rotate the
secret, the delivery log, redeliver, a test event (docs/webhooks.md). Each change is
audited (``webhook.*``); no answer or audit event holds a secret except the one that made
it (``create``, ``rotate``), which shows it once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from modelward.registry.domains._state import iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.webhooks.outbox import enqueue_to
from modelward.registry.domains.webhooks.sealing import Sealer, new_secret
from modelward.registry.domains.webhooks.targets import check_events, check_url
from modelward.registry.errors import Conflict, NotFound
from modelward.registry.models import (
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookMessage,
    utcnow,
)

__all__ = [
    "create",
    "deliveries",
    "endpoint_json",
    "get_endpoint",
    "list_endpoints",
    "redeliver",
    "remove",
    "rotate",
    "set_enabled",
    "test",
]

MAX_LOG = 500


def endpoint_json(row: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": row.id,
        "url": row.url,
        "events": json.loads(row.events),
        "description": row.description,
        "state": row.state,
        "created_at": iso(row.created_at),
        "secret_rotated_at": iso(row.secret_rotated_at),
        "failing_since": iso(row.failing_since),
    }


def get_endpoint(session: Session, endpoint_id: int) -> WebhookEndpoint:
    """The endpoint ``endpoint_id``; a removed one is missing (404 naming it)."""
    row = session.get(WebhookEndpoint, endpoint_id)
    if row is None or row.state == "removed":
        raise NotFound(f"no webhook endpoint {endpoint_id}", detail={"endpoint": endpoint_id})
    return row


def _audit(
    session: Session, caller: Caller, action: str, row: WebhookEndpoint, **more: Any
) -> None:
    append(
        session,
        actor=caller.name,
        action=action,
        subject=f"webhook {row.id}",
        details={"endpoint": row.id, "url": row.url, **more},
    )


def create(
    session: Session,
    sealer: Sealer,
    *,
    url: str,
    events: Sequence[str],
    description: str | None,
    caller: Caller,
) -> dict[str, Any]:
    """Register ``url`` for ``events``; the answer holds the secret (``whsec_...``), once.
    Raises BadRequest (400 ``invalid_webhook``) naming ``url`` or ``events``."""
    url, wanted = check_url(url), check_events(events)
    row = WebhookEndpoint(
        url=url,
        events=json.dumps(list(wanted)),
        description=description,
        secret_sealed=b"",
        state="enabled",
        created_by=caller.id,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    raw, shown = new_secret()
    row.secret_sealed = sealer.seal(row.id, raw)
    _audit(session, caller, "webhook.create", row, events=list(wanted))
    return {**endpoint_json(row), "secret": shown}


def list_endpoints(session: Session, *, removed: bool = False) -> list[dict[str, Any]]:
    query = select(WebhookEndpoint).order_by(WebhookEndpoint.id)
    if not removed:
        query = query.where(WebhookEndpoint.state != "removed")
    return [endpoint_json(row) for row in session.scalars(query)]


def set_enabled(
    session: Session, endpoint_id: int, *, enabled: bool, caller: Caller
) -> dict[str, Any]:
    """Disable (no new events, nothing sent) or enable an endpoint again."""
    row = get_endpoint(session, endpoint_id)
    row.state = "enabled" if enabled else "disabled"
    row.failing_since = None
    _audit(session, caller, "webhook.enable" if enabled else "webhook.disable", row)
    return endpoint_json(row)


def remove(session: Session, endpoint_id: int, *, caller: Caller) -> None:
    """Remove an endpoint: its sealed secret erased, its waiting deliveries cancelled; its
    delivery log stays (audited ``webhook.remove``)."""
    row = get_endpoint(session, endpoint_id)
    row.state, row.secret_sealed = "removed", b""
    cancelled = session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.endpoint_id == row.id,
            WebhookDelivery.state.in_(("pending", "delivering")),
        )
        .values(state="cancelled", finished_at=utcnow(), claim=None, claimed_until=None)
        .execution_options(synchronize_session=False)
    )
    _audit(session, caller, "webhook.remove", row, cancelled=cancelled.rowcount)  # type: ignore[attr-defined]


def rotate(session: Session, sealer: Sealer, endpoint_id: int, *, caller: Caller) -> dict[str, Any]:
    """A new secret for the endpoint, shown once; every attempt from now on is signed
    with it (the old one no longer verifies)."""
    row = get_endpoint(session, endpoint_id)
    raw, shown = new_secret()
    row.secret_sealed = sealer.seal(row.id, raw)
    row.secret_rotated_at = utcnow()
    _audit(session, caller, "webhook.rotate", row)
    return {**endpoint_json(row), "secret": shown}


def _delivery_json(
    session: Session, delivery: WebhookDelivery, message: WebhookMessage
) -> dict[str, Any]:
    attempts = session.scalars(
        select(WebhookAttempt)
        .where(WebhookAttempt.delivery_id == delivery.id)
        .order_by(WebhookAttempt.id)
    )
    return {
        "id": delivery.id,
        "message_id": message.id,
        "event_type": message.event_type,
        "state": delivery.state,
        "attempts_queued": delivery.attempts,
        "next_attempt_at": iso(delivery.next_attempt_at) if delivery.state == "pending" else None,
        "created_at": iso(delivery.created_at),
        "finished_at": iso(delivery.finished_at),
        "attempts": [
            {
                "at": iso(a.started_at),
                "status": a.status_code,
                "error": a.error,
                "duration_ms": a.duration_ms,
            }
            for a in attempts
        ],
    }


def deliveries(
    session: Session, endpoint_id: int, *, limit: int, event_type: str | None = None
) -> dict[str, Any]:
    """The endpoint's delivery log, newest first: each delivery and every attempt (when,
    the HTTP status or the error, how long); never the payload or the secret."""
    row = get_endpoint(session, endpoint_id)
    query = (
        select(WebhookDelivery, WebhookMessage)
        .join(WebhookMessage, WebhookMessage.id == WebhookDelivery.message_id)
        .where(WebhookDelivery.endpoint_id == row.id)
        .order_by(WebhookDelivery.id.desc())
        .limit(min(limit, MAX_LOG))
    )
    if event_type is not None:
        query = query.where(WebhookMessage.event_type == event_type)
    return {
        "endpoint": endpoint_json(row),
        "deliveries": [_delivery_json(session, d, m) for d, m in session.execute(query).all()],
    }


def redeliver(
    session: Session, endpoint_id: int, delivery_id: int, *, caller: Caller
) -> dict[str, Any]:
    """Queue a delivery of the endpoint again, now, with every attempt again (the same
    ``webhook-id``: receivers deduplicate on it). 409 while it is being sent."""
    row = get_endpoint(session, endpoint_id)
    delivery = session.get(WebhookDelivery, delivery_id)
    if delivery is None or delivery.endpoint_id != row.id:
        raise NotFound(
            f"webhook endpoint {endpoint_id} has no delivery {delivery_id}",
            detail={"endpoint": endpoint_id, "delivery": delivery_id},
        )
    if delivery.state in ("pending", "delivering"):
        raise Conflict(
            f"delivery {delivery_id} is {delivery.state}: it is queued already",
            code="delivery_queued",
            detail={"delivery": delivery_id, "state": delivery.state},
        )
    before = delivery.state
    delivery.state, delivery.attempts, delivery.finished_at = "pending", 0, None
    delivery.next_attempt_at = utcnow()
    _audit(session, caller, "webhook.redeliver", row, delivery=delivery_id, was=before)
    message = session.get(WebhookMessage, delivery.message_id)
    assert message is not None  # noqa: S101 - a foreign key
    return _delivery_json(session, delivery, message)


def test(session: Session, endpoint_id: int, *, caller: Caller) -> dict[str, Any]:
    """Queue a ``webhook.test`` event for the endpoint (409 for a disabled one)."""
    row = get_endpoint(session, endpoint_id)
    if row.state == "disabled":
        raise Conflict(
            f"webhook endpoint {endpoint_id} is disabled: enable it first",
            code="webhook_disabled",
            detail={"endpoint": endpoint_id},
        )
    delivery = enqueue_to(session, row, {"endpoint": row.id, "requested_by": caller.name})
    _audit(session, caller, "webhook.test", row, delivery=delivery.id)
    message = session.get(WebhookMessage, delivery.message_id)
    assert message is not None  # noqa: S101 - just written
    return _delivery_json(session, delivery, message)
