"""The outbox: an event is a ``webhook_messages`` row written in the transaction of the
decision it reports, so it exists iff that decision committed; the delivery loop
(``delivery``) sends it afterwards (docs/webhooks.md#events).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._state import iso
from modelward.registry.domains.webhooks.targets import EVENT_TYPES, TEST_EVENT, subscribed
from modelward.registry.models import WebhookDelivery, WebhookEndpoint, WebhookMessage, utcnow

__all__ = ["ACTIVE", "EVENT_TYPES", "enqueue", "enqueue_to"]

ACTIVE = ("enabled", "failing")  # the states of endpoints that get new events


def _message(session: Session, event_type: str, data: Mapping[str, Any]) -> WebhookMessage:
    now = utcnow()
    payload = {"type": event_type, "timestamp": iso(now), "data": dict(data)}
    message = WebhookMessage(
        id=f"msg_{uuid.uuid4().hex}",
        event_type=event_type,
        payload=json.dumps(payload, sort_keys=True, separators=(",", ":")).encode(),
        created_at=now,
    )
    session.add(message)
    session.flush()  # before its deliveries: no relationship() orders the inserts
    return message


def _deliver(session: Session, message: WebhookMessage, endpoint_id: int) -> WebhookDelivery:
    delivery = WebhookDelivery(
        message_id=message.id,
        endpoint_id=endpoint_id,
        state="pending",
        attempts=0,
        next_attempt_at=message.created_at,
        created_at=message.created_at,
    )
    session.add(delivery)
    return delivery


def enqueue(session: Session, event_type: str, data: Mapping[str, Any]) -> None:
    """Queue ``event_type`` with ``data`` (JSON values) for every enabled or failing
    endpoint that takes it, in ``session``'s (write) transaction. Nothing is written when
    no endpoint takes it. Raises ValueError for an event type not in ``EVENT_TYPES``."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {event_type!r}")
    takers = [
        endpoint.id
        for endpoint in session.scalars(
            select(WebhookEndpoint).where(WebhookEndpoint.state.in_(ACTIVE))
        )
        if subscribed(json.loads(endpoint.events), event_type)
    ]
    if not takers:
        return
    message = _message(session, event_type, data)
    for endpoint_id in takers:
        _deliver(session, message, endpoint_id)


def enqueue_to(
    session: Session, endpoint: WebhookEndpoint, data: Mapping[str, Any]
) -> WebhookDelivery:
    """A ``webhook.test`` event for ``endpoint`` only; the delivery (flushed: its id set)."""
    delivery = _deliver(session, _message(session, TEST_EVENT, data), endpoint.id)
    session.flush()
    return delivery
