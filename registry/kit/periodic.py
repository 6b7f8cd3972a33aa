"""One runner for the registry's periodic jobs (the TUF upkeep, the rollout controller, the
webhook delivery loop): a job every ``interval`` seconds until a stop event is set. A failed
run is logged (``kit.logs.log_failure``, the job's event) and the next one runs: a background
job never stops the server. Threads are daemons; setting the stop event ends each one within
a run, so a server started and stopped many times (the tests) leaves none behind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from modelward.registry.kit.logs import MAX_MESSAGE, log_failure

__all__ = ["Periodic"]


@dataclass(frozen=True)
class Periodic:
    """``job`` every ``interval`` seconds (and once at once when ``at_start``); a failed run
    is logged as the event ``failed``, its message cut to ``message`` characters."""

    interval: float
    job: Callable[[], object]
    log: logging.Logger
    failed: str
    at_start: bool = False
    message: int = MAX_MESSAGE

    def run(self, stop: threading.Event) -> None:
        """Run in this thread until ``stop`` is set."""
        if self.at_start:
            self._once()
        while not stop.wait(self.interval):
            self._once()

    def start(self, name: str, stop: threading.Event) -> threading.Thread | None:
        """``run`` on a daemon thread named ``name``; None (nothing started) when
        ``interval`` is 0 or less (the job is off in this process)."""
        if self.interval <= 0:
            return None
        thread = threading.Thread(target=self.run, args=(stop,), name=name, daemon=True)
        thread.start()
        return thread

    def _once(self) -> None:
        try:
            self.job()
        except Exception as exc:  # noqa: BLE001 - logged by type; the next run goes on
            log_failure(self.log, self.failed, exc, message=self.message)
