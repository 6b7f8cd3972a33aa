"""The registry's kit (registry/kit/): the periodic runner every background job uses and the
one failure log line."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from modelward.registry.kit.logs import log_failure
from modelward.registry.kit.periodic import Periodic


def test_a_failed_run_is_logged_and_the_next_runs_until_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop, runs = threading.Event(), []

    def job() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise ValueError("boom " + "x" * 600)
        if len(runs) == 3:
            stop.set()

    log = logging.getLogger("modelward.test.kit")
    with caplog.at_level(logging.ERROR, logger=log.name):
        thread = Periodic(0.01, job, log, "job_failed", at_start=True).start("kit-test", stop)
        assert thread is not None
        thread.join(timeout=60)
    assert not thread.is_alive()  # stop ends the thread
    assert runs == [0, 1, 2]  # the failure of the first run did not stop the others
    (record,) = caplog.records
    assert json.loads(record.getMessage()) == {
        "event": "job_failed",
        "exception": "ValueError",
        "message": ("boom " + "x" * 600)[:500],
    }


def test_an_interval_of_zero_starts_nothing() -> None:
    def job() -> None:
        raise AssertionError("never run")

    stop = threading.Event()
    log = logging.getLogger("modelward.test.kit")
    assert Periodic(0, job, log, "x", at_start=True).start("off", stop) is None


def test_the_failure_line_can_leave_the_message_out(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("modelward.test.kit")
    with caplog.at_level(logging.WARNING, logger=log.name):
        log_failure(log, "sent", OSError("payload"), level=logging.WARNING, message=None, id=7)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert json.loads(record.getMessage()) == {"event": "sent", "id": 7, "exception": "OSError"}
