"""The rollout controller: a background thread in every ``serve`` process that judges the
rollouts under way every ``rollout_analysis_seconds`` (0: off) and acts on them
(``analysis.tick``; docs/rollouts.md#analysis).

Safe with several processes and several registries on one database: it acts only through
``service.advance``/``service.abort`` with the step it judged, so a duplicate tick finds
the step already signed and does nothing. It never stops the server: a failed tick is
logged and the next one runs; with no rollout under way a tick is one small query.
"""

from __future__ import annotations

import json
import logging
import threading

from modelward.registry.domains._state import AppState
from modelward.registry.domains.rollouts.analysis import tick

__all__ = ["start_controller"]

log = logging.getLogger("modelward.registry.rollouts")


def _run(state: AppState, stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        try:
            tick(state)
        except Exception as exc:  # noqa: BLE001 - logged by type; the next tick runs
            log.error(  # noqa: TRY400 - the type and message say it
                json.dumps(
                    {
                        "event": "rollout_controller_failed",
                        "exception": type(exc).__name__,
                        "message": str(exc)[:500],
                    }
                )
            )


def start_controller(state: AppState, stop: threading.Event) -> threading.Thread | None:
    """Start the controller thread (a daemon, ended by ``stop``); None when
    ``rollout_analysis_seconds`` is 0."""
    interval = float(state.settings.rollout_analysis_seconds)
    if interval <= 0:
        return None
    thread = threading.Thread(
        target=_run, args=(state, stop, interval), name="rollout-controller", daemon=True
    )
    thread.start()
    return thread
