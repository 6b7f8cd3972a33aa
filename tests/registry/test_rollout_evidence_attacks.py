"""One worker key against a fleet of honest ones (docs/rollouts.md#evidence): a registered
worker key sends REAL signed reports to a real registry, beside honest workers, and
``rollout analyze`` judges the step. A report of a digest the signed step did not assign
the key is kept as a fault and counted in no cohort; a key's weight in any figure is at
most twice the median worker's, so 10^9 requests bend nothing.

The first step (5%) is a person's; a failing step aborts at once (no window to wait for).
The shared registry's controller ticks too: each plan names ``min_workers`` and the honest
canaries report last, so no tick judges the step before every report is in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.registry.conftest import Registry, new_publisher, push_new
from tests.rollouts.fleet_reports import POLICY, Canary

pytestmark = pytest.mark.sqlite_only

ERRORS = "thresholds:\n  error_rate: {max: 0.05}\n"
TWO, THREE = ERRORS + "min_workers: 2\n", ERRORS + "min_workers: 3\n"
HUGE = 10**9


def fleet_canary(reg: Registry, tmp: Path, analysis: str) -> Canary:
    """``prod`` (online) at ``stable``, a signed plan with ``analysis`` to ``candidate``, its
    first step (5%) signed by a person."""
    publisher = new_publisher(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    stable = push_new(publisher, repo, tmp)
    publisher.actor.client.set_alias(repo, "prod", stable)
    candidate = push_new(publisher, repo, tmp)
    started = publisher.actor.client.start_rollout(
        repo,
        "prod",
        candidate,
        window_seconds=60,
        min_samples=100,
        analysis=analysis,
        allow_no_fleet=True,  # the workers report after the start
    )
    assert started["plan_signed"], started
    publisher.actor.client.advance_rollout(repo, "prod", "first step")
    return Canary(reg, repo, publisher, stable, candidate, str(started["rollout_id"]))


def honest_stables(c: Canary) -> None:
    """Four stable workers, 100 requests and 1 error each."""
    for w in [c.worker(candidate=False) for _ in range(4)]:
        w.report(c.stable, requests=100, errors=1)


def honest_canaries(c: Canary, *, errors: int = 30) -> None:
    """Two candidate workers, 100 requests and ``errors`` errors each (60 in 200)."""
    for w in [c.worker(candidate=True) for _ in range(2)]:
        w.report(c.candidate, requests=100, errors=errors)


def judged(c: Canary) -> dict[str, Any]:
    """Judge now; the rollout's state and the latest recorded analysis of step 0."""
    c.publisher.actor.client.analyze_rollout(c.repo, c.alias)
    status = c.status()
    step0 = [h for h in status["history"] if h["index"] == 0 and h.get("analysis")]
    return {"state": status["state"], "analysis": step0[-1]["analysis"] if step0 else None}


def test_report_of_the_digest_the_step_did_not_assign_is_kept_as_a_fault_not_evidence(
    registry: Registry, tmp_path: Path
) -> None:
    c = fleet_canary(registry, tmp_path, ERRORS)
    hostile = c.worker(candidate=False)  # the signed step assigns it the stable digest
    answer = hostile.report(c.candidate, requests=HUGE, errors=0)
    assert answer["assigned"] == c.stable
    assert answer["counted"] is False
    assert answer["cohort"] is None
    assert hostile.keyid in answer["why"]
    assert "no cohort" in answer["why"]
    honest = c.worker(candidate=True).report(c.candidate, requests=100, errors=0)
    assert (honest["cohort"], honest["counted"]) == ("candidate", True)


def test_one_stable_key_reporting_the_candidate_digest_cannot_pass_a_failing_candidate(
    registry: Registry, tmp_path: Path
) -> None:
    c = fleet_canary(registry, tmp_path, TWO)
    honest_stables(c)
    hostile = c.worker(candidate=False)
    assert hostile.report(c.candidate, requests=HUGE, errors=0)["counted"] is False
    honest_canaries(c)  # the candidate: 60 errors in 200
    result = judged(c)
    assert result["state"] == "aborted", result
    metrics = result["analysis"]["metrics"]
    assert metrics["candidate"]["worker_count"] == 2
    assert hostile.keyid not in metrics["candidate"]["workers"]
    assert hostile.keyid in metrics["unassigned"]["workers"]
    assert metrics["thresholds"]["error_rate"]["candidate"] == [60, 200]
    # the text of `rollout status` says what the verdict judged, and what it set aside
    text = registry.cli(
        "rollout", "status", f"{c.repo}@{c.alias}", token=c.publisher.actor.token, check=True
    ).stdout
    assert "verdict fail" in text
    assert "candidate: 2 worker(s), 60/200 errors counted of 60/200 reported" in text
    assert "not counted: 1 report(s) from 1 worker(s) of a digest not assigned to them" in text


def test_one_candidate_key_with_1e9_clean_requests_cannot_pass_a_failing_candidate(
    registry: Registry, tmp_path: Path
) -> None:
    c = fleet_canary(registry, tmp_path, THREE)
    honest_stables(c)
    hostile = c.worker(candidate=True)  # in the cohort: its reports are evidence, bounded
    assert hostile.report(c.candidate, requests=HUGE, errors=0)["counted"] is True
    honest_canaries(c)
    result = judged(c)
    assert result["state"] == "aborted", result
    metrics = result["analysis"]["metrics"]
    assert metrics["candidate"]["worker_count"] == 3
    assert metrics["candidate"]["capped"] == [hostile.keyid]
    # it counts as two median workers (2 x 100 requests), not 10^9
    assert metrics["thresholds"]["error_rate"]["candidate"] == [60, 400]


def test_one_stable_key_with_1e9_requests_at_40_percent_errors_cannot_turn_an_abort_into_a_hold(
    registry: Registry, tmp_path: Path
) -> None:
    c = fleet_canary(registry, tmp_path, TWO)
    honest_stables(c)
    hostile = c.worker(candidate=False)
    assert hostile.report(c.stable, requests=HUGE, errors=4 * HUGE // 10)["counted"] is True
    honest_canaries(c)
    result = judged(c)
    assert result["state"] == "aborted", result
    error_rate = result["analysis"]["metrics"]["thresholds"]["error_rate"]
    assert error_rate["stable"] == [4 + 80, 600]  # the hostile key: 80 errors in 200
    assert error_rate["verdict"] == "fail"


def test_a_plan_needing_more_candidate_workers_than_reported_holds(
    registry: Registry, tmp_path: Path
) -> None:
    c = fleet_canary(registry, tmp_path, THREE)
    honest_stables(c)
    honest_canaries(c, errors=0)
    result = judged(c)
    assert result["state"] == "running", result
    assert result["analysis"]["verdict"] == "inconclusive"
    assert any("fewer than the 3" in r for r in result["analysis"]["reasons"])
