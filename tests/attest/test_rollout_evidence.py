"""The evidence rules of a step's analysis (docs/rollouts.md#evidence), pure: a report of a
digest its key was not assigned counts in no cohort, each worker's weight in a figure is
bounded, and a plan can ask for a minimum of candidate workers. No registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from modelward.attest.rollout import (
    WORKER_CAP,
    PlanInvalid,
    RolloutPlan,
    WindowReport,
    judge_step,
    make_plan,
    parse_analysis,
    parse_plan,
)

STABLE, CANDIDATE = "sha256:" + "a" * 64, "sha256:" + "b" * 64
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HUGE = 10**9
CANARIES = [f"c{i}" * 32 for i in range(2)]
STABLES = [f"s{i}" * 32 for i in range(8)]
HOSTILE = "h" * 64

pytestmark = pytest.mark.sqlite_only


def plan(analysis: str = "thresholds:\n  error_rate: {max: 0.05}\n") -> RolloutPlan:
    return make_plan(
        rollout_id="0" * 32,
        repository="acme/m",
        alias="prod",
        stable=STABLE,
        candidate=CANDIDATE,
        steps=(5, 20, 50, 100),
        window_seconds=60,
        min_samples=100,
        analysis=parse_analysis(analysis.encode()),
        analysis_sha256="f" * 64,
    )


def rep(worker: str, digest: str, assigned: str | None = None, **figures: Any) -> WindowReport:
    return WindowReport(
        worker_keyid=worker,
        digest=digest,
        received_at=NOW - timedelta(seconds=5),
        assigned=digest if assigned is None else assigned,
        **figures,
    )


def honest(candidate_errors: int = 30) -> tuple[list[WindowReport], list[WindowReport]]:
    """Two canaries at ``candidate_errors`` in 100 each (60 in 200), eight stable workers
    at 1 in 100 each."""
    return (
        [rep(w, CANDIDATE, requests=100, errors=candidate_errors) for w in CANARIES],
        [rep(w, STABLE, requests=100, errors=1) for w in STABLES],
    )


def judge(p: RolloutPlan, cand: list[WindowReport], stable: list[WindowReport]) -> Any:
    return judge_step(
        p,
        cand,
        stable,
        expected_candidate_keyids=CANARIES,
        window_seconds=60,
        now=NOW,
        step_started_at=NOW - timedelta(seconds=600),
    )


def test_report_of_a_digest_its_key_was_not_assigned_is_a_fault_not_evidence() -> None:
    cand, stable = honest()
    forged = rep(HOSTILE, CANDIDATE, assigned=STABLE, requests=HUGE, errors=0)
    judged = judge(plan(), [*cand, forged], stable)
    assert judged.verdict == "fail"
    assert judged.metrics["thresholds"]["error_rate"]["candidate"] == [60, 200]
    assert judged.metrics["candidate"]["worker_count"] == 2
    assert judged.metrics["unassigned"] == {
        "reports": 1, "workers": [HOSTILE], "digests": [CANDIDATE],
    }  # fmt: skip


def test_one_candidate_key_with_1e9_clean_requests_cannot_flip_a_failing_candidate_to_pass() -> (
    None
):
    cand, stable = honest()
    judged = judge(plan(), [*cand, rep(HOSTILE, CANDIDATE, requests=HUGE, errors=0)], stable)
    assert judged.verdict == "fail", judged.reasons
    assert judged.metrics["thresholds"]["error_rate"]["candidate"] == [60, 200 + WORKER_CAP * 100]
    assert judged.metrics["candidate"]["capped"] == [HOSTILE]
    assert judged.metrics["worker_caps"]["error_rate"] == WORKER_CAP * 100


def test_one_stable_key_with_1e9_requests_at_40_percent_cannot_turn_an_abort_into_a_hold() -> None:
    cand, stable = honest()
    noisy = rep(HOSTILE, STABLE, requests=HUGE, errors=4 * HUGE // 10)
    judged = judge(plan(), cand, [*stable, noisy])
    assert judged.verdict == "fail", judged.reasons
    assert judged.metrics["thresholds"]["error_rate"]["stable"] == [8 + 80, 1000]


def test_one_key_cannot_hide_a_slow_candidate_behind_1e9_fast_requests() -> None:
    p = plan("thresholds:\n  ttft_p95_ms: {max: 800}\n")
    slow = [f"c{i}" * 32 for i in range(4)]
    cand = [rep(w, CANDIDATE, requests=100, ttft_p95_ms=1500.0) for w in slow]
    stable = [rep(w, STABLE, requests=100, ttft_p95_ms=300.0) for w in STABLES]
    fast = rep(HOSTILE, CANDIDATE, requests=HUGE, ttft_p95_ms=10.0)
    judged = judge(p, [*cand, fast], stable)
    assert judged.verdict == "fail", judged.reasons
    # the fast key weighs as two median workers: (4 x 100 x 1500 + 200 x 10) / 600
    observed = judged.metrics["thresholds"]["ttft_p95_ms"]["observed"]
    assert observed == pytest.approx((400 * 1500 + 200 * 10) / 600)


def test_a_trigger_counts_each_worker_within_its_bound() -> None:
    p = plan("triggers:\n  - {name: errors, metric: error_rate, above: 0.1}\n")
    cand, stable = honest()
    judged = judge(p, [*cand, rep(HOSTILE, CANDIDATE, requests=HUGE, errors=0)], stable)
    assert judged.fired_trigger == "errors"


def test_honest_workers_within_twice_the_median_count_in_full() -> None:
    cand = [rep(CANARIES[0], CANDIDATE, requests=150, errors=0)]
    stable = [rep(w, STABLE, requests=100, errors=0) for w in STABLES]
    judged = judge(plan(), cand, stable)
    assert judged.metrics["candidate"]["counted_requests"] == 150
    assert judged.metrics["candidate"]["capped"] == []


def test_the_plan_needs_its_minimum_of_candidate_workers_not_only_of_requests() -> None:
    p = plan("thresholds:\n  error_rate: {max: 0.05}\nmin_workers: 3\n")
    cand, stable = honest(candidate_errors=0)
    judged = judge(p, cand, stable)
    assert judged.verdict == "inconclusive"
    assert any("2 candidate worker(s)" in r and "fewer than the 3" in r for r in judged.reasons)
    assert judge(plan(), cand, stable).verdict == "pass"  # the default: one worker


def test_the_analysis_says_how_many_workers_it_judged_in_each_cohort() -> None:
    judged = judge(plan(), *honest(candidate_errors=0))
    assert judged.metrics["candidate"]["worker_count"] == 2
    assert judged.metrics["stable"]["worker_count"] == 8
    assert "(2 candidate, 8 stable worker(s))" in judged.reasons[0]


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2", 10_001])
def test_a_bad_min_workers_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(PlanInvalid) as caught:
        parse_analysis(f"thresholds: {{}}\nmin_workers: {value!r}\n".encode())
    assert caught.value.field == "min_workers"


def test_min_workers_changes_the_plan_bytes_only_for_plans_that_set_it() -> None:
    without = plan()
    assert b"min_workers" not in without.raw
    assert parse_plan(without.raw).analysis == without.analysis
    withit = plan("thresholds:\n  error_rate: {max: 0.05}\nmin_workers: 4\n")
    assert b'"min_workers":4' in withit.raw
    assert parse_plan(withit.raw).analysis["min_workers"] == 4
    forged = withit.raw.replace(b'"min_workers":4', b'"min_workers":0')
    with pytest.raises(PlanInvalid) as caught:
        parse_plan(forged)
    assert caught.value.field == "analysis.min_workers"
