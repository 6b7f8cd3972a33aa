"""What the registry keeps only for a while (docs/operations.md#retention): fleet reports
and the webhook outbox. Everything else (bundles, attestations, alias history, the audit
log, signed metadata, rollouts and their steps) is kept for good.

``prune`` deletes, in batches of ``batch`` rows per transaction (short write locks, so the
report ingest and the delivery loop are never held up for long):

1. fleet reports received before the cutoff, except those of a rollout still under way
   (``planned``, ``running``, ``paused``): its analysis and ``rollout status`` read them;
2. webhook messages created before the cutoff whose every delivery is finished
   (``delivered``, ``failed``, ``cancelled``), with their deliveries and attempts; a message
   still pending or being delivered stays, however old.

The cutoff is ``now - retention_seconds``; ``retention_seconds`` 0 keeps everything. The
job runs every ``retention_interval_seconds`` on the registry's periodic runner (0: this
process prunes nothing).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, exists, select

from modelward.registry.domains._state import AppState
from modelward.registry.domains.rollouts.rows import ACTIVE
from modelward.registry.kit.periodic import Periodic
from modelward.registry.models import (
    Rollout,
    RolloutReport,
    WebhookAttempt,
    WebhookDelivery,
    WebhookMessage,
    utcnow,
)

__all__ = ["Pruned", "prune", "start_retention"]

log = logging.getLogger(__name__)

UNFINISHED = ("pending", "delivering")


@dataclass(frozen=True)
class Pruned:
    """How many rows one ``prune`` deleted."""

    reports: int = 0
    webhook_messages: int = 0


def prune(state: AppState, *, now: datetime | None = None, batch: int = 1000) -> Pruned:
    """Delete what is past ``state.settings.retention_seconds`` (module docstring)."""
    seconds = float(state.settings.retention_seconds)
    if seconds <= 0:
        return Pruned()
    cutoff = (now or utcnow()) - timedelta(seconds=seconds)
    return Pruned(_reports(state, cutoff, batch), _webhook_messages(state, cutoff, batch))


def _reports(state: AppState, cutoff: datetime, batch: int) -> int:
    under_way = select(Rollout.id).where(Rollout.state.in_(ACTIVE))
    old = (
        select(RolloutReport.id)
        .where(
            RolloutReport.received_at < cutoff,
            (RolloutReport.rollout_pk.is_(None)) | (RolloutReport.rollout_pk.not_in(under_way)),
        )
        .limit(batch)
    )
    total = 0
    while True:
        with state.db.write() as session:
            ids = list(session.scalars(old))
            if ids:
                session.execute(delete(RolloutReport).where(RolloutReport.id.in_(ids)))
        total += len(ids)
        if len(ids) < batch:
            return total


def _webhook_messages(state: AppState, cutoff: datetime, batch: int) -> int:
    unfinished = exists().where(
        WebhookDelivery.message_id == WebhookMessage.id,
        WebhookDelivery.state.in_(UNFINISHED),
    )
    old = select(WebhookMessage.id).where(WebhookMessage.created_at < cutoff, ~unfinished)
    total = 0
    while True:
        with state.db.write() as session:
            ids = list(session.scalars(old.limit(batch)))
            if ids:
                deliveries = select(WebhookDelivery.id).where(WebhookDelivery.message_id.in_(ids))
                session.execute(
                    delete(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(deliveries))
                )
                session.execute(delete(WebhookDelivery).where(WebhookDelivery.message_id.in_(ids)))
                session.execute(delete(WebhookMessage).where(WebhookMessage.id.in_(ids)))
        total += len(ids)
        if len(ids) < batch:
            return total


def start_retention(state: AppState, stop: threading.Event) -> threading.Thread | None:
    """Run ``prune`` every ``retention_interval_seconds`` until ``stop`` (None: off)."""

    def job() -> None:
        pruned = prune(state)
        if pruned.reports or pruned.webhook_messages:
            log.info(
                "retention: %d fleet reports, %d webhook messages deleted",
                pruned.reports,
                pruned.webhook_messages,
            )

    interval = float(state.settings.retention_interval_seconds)
    return Periodic(interval, job, log, "retention_failed").start("retention", stop)
