"""Retention (docs/operations.md#retention): fleet reports and finished webhook messages past
``retention_seconds`` are deleted by each ``serve`` process's periodic job; a rollout under
way keeps its reports and a message not yet delivered stays, however old."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from modelward.registry.models import RolloutReport, WebhookMessage
from tests.registry.conftest import Registry, free_port, start_registry
from tests.rollouts.fleet_reports import canary_at

RETENTION = 2.0
ENV = {
    "MODELWARD_RETENTION_SECONDS": str(RETENTION),
    "MODELWARD_RETENTION_INTERVAL_SECONDS": "0.3",
    "MODELWARD_WEBHOOK_POLL_SECONDS": "0.1",
    "MODELWARD_WEBHOOK_RETRY_SCHEDULE": "1h",  # a failed first attempt waits: pending
}


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    reg = start_registry("sqlite", tmp_path, None, extra_env=ENV)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


def _rows(registry: Registry) -> tuple[int, int]:
    engine = create_engine(registry.database_url)
    try:
        with engine.connect() as db:
            reports = db.scalar(select(func.count()).select_from(RolloutReport)) or 0
            messages = db.scalar(select(func.count()).select_from(WebhookMessage)) or 0
    finally:
        engine.dispose()
    return reports, messages


def _eventually(probe: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_old_reports_and_finished_messages_go_a_running_rollout_and_a_pending_message_stay(
    registry: Registry, tmp_path: Path
) -> None:
    # an endpoint nobody answers: its first attempt fails, the next one is an hour away
    dead = registry.admin.add_webhook(f"http://127.0.0.1:{free_port()}/hook")
    canary = canary_at(registry, tmp_path)
    worker = canary.worker()
    worker.report(canary.stable)
    worker.report(canary.stable)
    reports, messages = _rows(registry)
    assert reports == 2
    assert messages >= 1
    time.sleep(RETENTION + 1.5)  # past retention, several pruning runs later
    assert _rows(registry) == (reports, messages)  # under way / pending: kept

    canary.publisher.actor.client.abort_rollout(canary.repo, "prod", "retention test")
    registry.admin.remove_webhook(int(dead["id"]))  # its deliveries are cancelled: finished
    _eventually(lambda: _rows(registry) == (0, 0), "the reports and messages to be pruned")
