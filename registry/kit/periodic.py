"""One runner for the registry's periodic jobs (the TUF upkeep, the rollout controller, the
webhook delivery loop): a job every ``interval`` seconds until ``stop`` is set. A failed run
is logged (``kit.logs.log_failure``, the job's event) and the next one runs: a background
job never stops the server. Threads are daemons; setting ``stop`` ends each one within a
run, so a server started and stopped many times (the tests) leaves none behind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from modelward.registry.kit.logs import MAX_MESSAGE, log_failure

__all__ = ["run_every", "start_periodic"]


def run_every(
    interval: float,
    job: Callable[[], object],
    *,
    stop: threading.Event,
    log: logging.Logger,
    failed: str,
    at_start: bool = False,
    message: int = MAX_MESSAGE,
) -> None:
    """Run ``job`` every ``interval`` seconds (and once at once when ``at_start``) in this
    thread until ``stop`` is set; each failure is logged as the event ``failed``."""
    if at_start:
        _once(job, log, failed, message)
    while not stop.wait(interval):
        _once(job, log, failed, message)


def start_periodic(
    name: str,
    interval: float,
    job: Callable[[], object],
    *,
    stop: threading.Event,
    log: logging.Logger,
    failed: str,
    at_start: bool = False,
) -> threading.Thread | None:
    """``run_every`` on a daemon thread named ``name``; None (nothing started) when
    ``interval`` is 0 or less (the job is off in this process)."""
    if interval <= 0:
        return None
    thread = threading.Thread(
        target=run_every,
        args=(interval, job),
        kwargs={"stop": stop, "log": log, "failed": failed, "at_start": at_start},
        name=name,
        daemon=True,
    )
    thread.start()
    return thread


def _once(job: Callable[[], object], log: logging.Logger, failed: str, message: int) -> None:
    try:
        job()
    except Exception as exc:  # noqa: BLE001 - logged by type; the next run goes on
        log_failure(log, failed, exc, message=message)
