"""The delivery loop every ``serve`` process runs (docs/webhooks.md#delivery).

Each round, in order:

1. claim due deliveries, at most one per endpoint and no endpoint this process is already
   sending to: each with a conditional UPDATE (``pending`` and due, or ``delivering`` with
   an expired claim) that names this round's claim token, so two processes on one database
   never send one delivery at once; a process that dies mid-attempt leaves a claim that
   expires after the timeout;
2. for each, on a pool of ``webhook_concurrency`` threads: open the endpoint's sealed
   secret, sign ``id.timestamp.payload`` (Standard Webhooks, the ``standardwebhooks``
   package) with the time of this attempt, POST the stored payload bytes with
   ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``; any 2xx is delivered;
   no redirect is followed, the answer's body is not read; the whole attempt (connect,
   TLS, send, the status line and headers) is cancelled at ``webhook_timeout_seconds``
   (``asyncio.timeout``: a receiver that drips its answer is cut off there, not only one
   that stops), on a connection of its own;
3. record the attempt (when, the HTTP status or the error, how long) and the next one: the
   next wait of ``webhook_retry_schedule``, or, after ``webhook_max_attempts`` (or the
   schedule's end), ``failed`` and the endpoint marked ``failing`` (audited
   ``webhook.failing``; a later delivery to it that succeeds clears it).

A slow or failing endpoint holds one thread for at most the timeout; the others are sent
on the other threads, never after it (one delivery per endpoint at a time). Nothing logged
names the secret or the payload.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import ssl
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session
from standardwebhooks import Webhook

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.webhooks.outbox import ACTIVE
from modelward.registry.domains.webhooks.sealing import Sealer
from modelward.registry.kit.logs import log_failure
from modelward.registry.kit.periodic import Periodic
from modelward.registry.models import (
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookMessage,
    utcnow,
)

__all__ = ["Claimed", "DeliveryLoop", "Outcome", "claim", "record", "send", "start_delivery"]

log = logging.getLogger("modelward.registry")
CLAIM_MARGIN_SECONDS = 30.0
MAX_ERROR = 300
USER_AGENT = "modelward-webhooks/1"


@dataclass(frozen=True)
class Claimed:
    """One delivery this process holds, with what sending it needs."""

    delivery_id: int
    endpoint_id: int
    token: str
    message_id: str
    payload: bytes
    url: str
    sealed: bytes


@dataclass(frozen=True)
class Outcome:
    started_at: datetime
    duration_ms: int
    status_code: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _due(now: datetime) -> ColumnElement[bool]:
    return or_(
        and_(WebhookDelivery.state == "pending", WebhookDelivery.next_attempt_at <= now),
        and_(WebhookDelivery.state == "delivering", WebhookDelivery.claimed_until < now),
    )


def claim(
    session: Session, *, now: datetime, lease_seconds: float, limit: int, busy: frozenset[int]
) -> list[Claimed]:
    """Step (1): claim up to ``limit`` due deliveries, one per endpoint (its oldest due),
    none to ``busy``: a backlog at one endpoint never hides another's."""
    query = (
        select(WebhookDelivery.endpoint_id, func.min(WebhookDelivery.id))
        .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
        .where(WebhookEndpoint.state.in_(ACTIVE), _due(now))
        .group_by(WebhookDelivery.endpoint_id)
        .order_by(func.min(WebhookDelivery.next_attempt_at))
        .limit(limit)
    )
    if busy:
        query = query.where(WebhookDelivery.endpoint_id.not_in(sorted(busy)))
    picked = {
        int(endpoint_id): int(delivery_id) for endpoint_id, delivery_id in session.execute(query)
    }
    token = uuid.uuid4().hex
    until = now + timedelta(seconds=lease_seconds)
    claimed: list[Claimed] = []
    for endpoint_id, delivery_id in picked.items():
        won = session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, _due(now))
            .values(state="delivering", claim=token, claimed_until=until)
            .execution_options(synchronize_session=False)
        )
        if won.rowcount != 1:  # type: ignore[attr-defined]
            continue  # another process claimed it first
        message_id, payload, url, sealed = session.execute(
            select(
                WebhookMessage.id,
                WebhookMessage.payload,
                WebhookEndpoint.url,
                WebhookEndpoint.secret_sealed,
            )
            .join(WebhookDelivery, WebhookDelivery.message_id == WebhookMessage.id)
            .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
            .where(WebhookDelivery.id == delivery_id)
        ).one()
        claimed.append(Claimed(delivery_id, endpoint_id, token, message_id, payload, url, sealed))
    return claimed


def send(item: Claimed, *, sealer: Sealer, timeout: float, tls: ssl.SSLContext) -> Outcome:
    """Step (2): sign and POST one delivery within ``timeout`` seconds for the whole attempt;
    the outcome, never an exception."""
    started_at, clock = utcnow(), time.monotonic()
    status_code, error = None, None
    try:
        secret = sealer.open(item.endpoint_id, item.sealed)
        signature = Webhook(secret).sign(item.message_id, started_at, item.payload)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": item.message_id,
            "webhook-timestamp": str(int(started_at.timestamp())),
            "webhook-signature": signature,
        }
        status_code = asyncio.run(_post(item.url, item.payload, headers, timeout, tls))
        if not 200 <= status_code < 300:
            error = f"HTTP {status_code}"
    except TimeoutError:
        error = f"timed out: no answer within {timeout:g} s for the whole attempt"
    except Exception as exc:  # noqa: BLE001 - every failure is an attempt's outcome, logged by type
        error = f"{type(exc).__name__}: {str(exc)[:MAX_ERROR]}"
    duration_ms = int((time.monotonic() - clock) * 1000)
    return Outcome(started_at, duration_ms, status_code, error)


async def _post(
    url: str, payload: bytes, headers: dict[str, str], timeout: float, tls: ssl.SSLContext
) -> int:
    """POST ``payload``; the answer's status. Raises ``TimeoutError`` at ``timeout`` seconds
    for all of it (connect, TLS, send, status line and headers), whatever each read took."""
    client = httpx.AsyncClient(
        timeout=timeout,
        verify=tls,
        follow_redirects=False,
        trust_env=False,  # no proxy or .netrc credentials of the server's environment
    )
    async with (
        asyncio.timeout(timeout),
        client,
        client.stream("POST", url, content=payload, headers=headers) as answer,
    ):
        return answer.status_code


def record(
    session: Session,
    item: Claimed,
    outcome: Outcome,
    *,
    schedule: tuple[float, ...],
    max_attempts: int,
) -> None:
    """Step (3): the attempt in the delivery log, and what comes next."""
    session.add(
        WebhookAttempt(
            delivery_id=item.delivery_id,
            started_at=outcome.started_at,
            duration_ms=outcome.duration_ms,
            status_code=outcome.status_code,
            error=outcome.error,
        )
    )
    delivery = session.get(WebhookDelivery, item.delivery_id)
    endpoint = session.get(WebhookEndpoint, item.endpoint_id)
    if delivery is None or endpoint is None or delivery.claim != item.token:
        return  # the claim expired and another process holds it: it decides
    now = utcnow()
    delivery.attempts += 1
    delivery.claim, delivery.claimed_until = None, None
    if outcome.delivered:
        delivery.state, delivery.finished_at = "delivered", now
        if endpoint.state == "failing":
            endpoint.state, endpoint.failing_since = "enabled", None
        return
    allowed = min(max_attempts, len(schedule) + 1)
    if delivery.attempts < allowed:
        delivery.state = "pending"
        delivery.next_attempt_at = now + timedelta(seconds=schedule[delivery.attempts - 1])
        return
    delivery.state, delivery.finished_at = "failed", now
    if endpoint.state == "enabled":
        endpoint.state, endpoint.failing_since = "failing", now
        append(
            session,
            actor="webhook-delivery",
            action="webhook.failing",
            subject=f"webhook {endpoint.id}",
            details={
                "endpoint": endpoint.id,
                "delivery": delivery.id,
                "message": item.message_id,
                "attempts": delivery.attempts,
                "last_error": outcome.error,
            },
        )


class DeliveryLoop:
    """Steps (1) to (3) every ``webhook_poll_seconds`` until ``stop`` is set."""

    def __init__(self, state: AppState, stop: threading.Event) -> None:
        settings = state.settings
        self.state = state
        self.stop = stop
        self.poll = settings.webhook_poll_seconds
        self.schedule = settings.resolved_webhook_retry_schedule()
        self.max_attempts = settings.webhook_max_attempts
        self.concurrency = settings.webhook_concurrency
        self.lease = settings.webhook_timeout_seconds + CLAIM_MARGIN_SECONDS
        self.sealer = Sealer.of(settings)
        self.timeout = settings.webhook_timeout_seconds
        self.tls = httpx.create_ssl_context()  # made once; each attempt connects anew
        self.busy: set[int] = set()
        self.lock = threading.Lock()

    def run(self) -> None:
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="webhook") as pool:
            job = functools.partial(self.round, pool)
            Periodic(self.poll, job, log, "webhook_loop_failed", message=MAX_ERROR).run(self.stop)

    def round(self, pool: ThreadPoolExecutor) -> None:
        with self.lock:
            free, busy = self.concurrency - len(self.busy), frozenset(self.busy)
        if free <= 0:
            return
        with self.state.db.write() as session:
            items = claim(session, now=utcnow(), lease_seconds=self.lease, limit=free, busy=busy)
        for item in items:
            with self.lock:
                self.busy.add(item.endpoint_id)
            future: Future[None] = pool.submit(self.deliver, item)
            future.add_done_callback(functools.partial(self._done, item.endpoint_id))

    def _done(self, endpoint_id: int, _future: Future[None]) -> None:
        with self.lock:
            self.busy.discard(endpoint_id)

    def deliver(self, item: Claimed) -> None:
        outcome = send(item, sealer=self.sealer, timeout=self.timeout, tls=self.tls)
        log.info(
            json.dumps(
                {
                    "event": "webhook_attempt",
                    "endpoint": item.endpoint_id,
                    "delivery": item.delivery_id,
                    "message": item.message_id,
                    "status": outcome.status_code,
                    "error": outcome.error,
                    "duration_ms": outcome.duration_ms,
                }
            )
        )
        try:
            with self.state.db.write() as session:
                record(
                    session,
                    item,
                    outcome,
                    schedule=self.schedule,
                    max_attempts=self.max_attempts,
                )
        except Exception as exc:  # noqa: BLE001 - the claim expires; the next process retries
            log_failure(log, "webhook_record_failed", exc, message=None, delivery=item.delivery_id)


def start_delivery(state: AppState, stop: threading.Event) -> threading.Thread | None:
    """The delivery loop on a daemon thread (``None`` when ``webhook_poll_seconds`` is 0)."""
    if state.settings.webhook_poll_seconds <= 0:
        return None
    loop = DeliveryLoop(state, stop)
    thread = threading.Thread(target=loop.run, name="webhook-delivery", daemon=True)
    thread.start()
    return thread
