"""The rollout controller: a background thread in every ``serve`` process that judges the
rollouts under way every ``rollout_analysis_seconds`` (0: off) and acts on them
(``analysis.tick``; docs/rollouts.md#analysis).

Safe with several processes and several registries on one database: it acts only through
``service.advance``/``service.abort`` with the step it judged, so a duplicate tick finds
the step already signed and does nothing. It never stops the server: a failed tick is
logged and the next one runs; with no rollout under way a tick is one small query.
"""

from __future__ import annotations

import functools
import logging
import threading

from modelward.registry.domains._state import AppState
from modelward.registry.domains.rollouts.analysis import tick
from modelward.registry.kit.periodic import Periodic

__all__ = ["start_controller"]

log = logging.getLogger("modelward.registry.rollouts")


def start_controller(state: AppState, stop: threading.Event) -> threading.Thread | None:
    """Start the controller thread (a daemon, ended by ``stop``); None when
    ``rollout_analysis_seconds`` is 0."""
    interval = float(state.settings.rollout_analysis_seconds)
    job = Periodic(interval, functools.partial(tick, state), log, "rollout_controller_failed")
    return job.start("rollout-controller", stop)
