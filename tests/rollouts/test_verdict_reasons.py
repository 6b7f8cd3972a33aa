"""A person cannot sign a step whose reason a release record reads as the analysis's
verdict (attest/release/_verdicts.py): ``analysis passed: ...`` and ``analysis failed at
...`` are the rollout controller's alone (issue 37 item 6). Against a real ``serve``."""

from __future__ import annotations

from pathlib import Path

from tests.registry.conftest import Registry
from tests.rollouts.fleet_reports import refused
from tests.rollouts.test_analysis import analysis_canary


def test_a_person_claiming_the_analysis_passed_is_refused(
    registry: Registry, tmp_path: Path
) -> None:
    c = analysis_canary(registry, tmp_path, first_step=False)
    client = c.publisher.actor.client
    error = refused(
        lambda: client.advance_rollout(c.repo, c.alias, "analysis passed: advanced to 5%"),
        400,
        "reason_reserved",
    )
    assert "rollout controller" in str(error)
    refused(
        lambda: client.abort_rollout(c.repo, c.alias, "analysis failed at step 0 (5%): made up"),
        400,
        "reason_reserved",
    )
    assert c.status()["signed_step"] is None  # nothing was signed
    client.advance_rollout(c.repo, c.alias, "first step: the analysis passed the smoke test")
    assert c.status()["signed_step"]["index"] == 0
