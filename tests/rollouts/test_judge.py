"""The pure analysis of a rollout step (attest.rollout.judge_step, capacity_check): matched
cohorts, intervals, thresholds, triggers, minimum samples, the silence rule
(docs/rollouts.md#analysis). Table-driven; no registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from modelward.attest.evaluation import wilson_interval
from modelward.attest.rollout import (
    PlanInvalid,
    RolloutPlan,
    WindowReport,
    capacity_check,
    judge_step,
    make_plan,
    newcombe_difference,
    parse_analysis,
)

STABLE, CANDIDATE = "sha256:" + "a" * 64, "sha256:" + "b" * 64
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
C1, C2, S1, S2 = "c1" * 16, "c2" * 16, "s1" * 16, "s2" * 16

pytestmark = pytest.mark.sqlite_only


def plan(
    analysis: str, *, min_samples: int = 100, steps: tuple[int, ...] = (5, 20, 50, 100)
) -> RolloutPlan:
    return make_plan(
        rollout_id="0" * 32,
        repository="acme/m",
        alias="prod",
        stable=STABLE,
        candidate=CANDIDATE,
        steps=steps,
        window_seconds=60,
        min_samples=min_samples,
        analysis=parse_analysis(analysis.encode()),
        analysis_sha256="f" * 64,
    )


def rep(worker: str, digest: str, ago: float = 5, **figures: Any) -> WindowReport:
    return WindowReport(
        worker_keyid=worker,
        digest=digest,
        received_at=NOW - timedelta(seconds=ago),
        interval_seconds=10,
        **figures,
    )


def cand(worker: str = C1, ago: float = 5, **figures: Any) -> WindowReport:
    return rep(worker, CANDIDATE, ago, **figures)


def stab(worker: str = S1, ago: float = 5, **figures: Any) -> WindowReport:
    return rep(worker, STABLE, ago, **figures)


ERRORS = "thresholds:\n  error_rate: {max: 0.01}\n"
TTFT = "thresholds:\n  ttft_p95_ms: {max: 800}\n"
FINE_STABLE = [stab(S1, requests=2000, errors=4, ttft_p95_ms=300)]

CASES = [
    # id, analysis, candidate reports, stable reports, expected candidates, verdict, reason part
    ("a-fine-candidate-passes", ERRORS, [cand(requests=1000, errors=1)], FINE_STABLE, [C1],
     "pass", "inside"),
    ("a-worse-candidate-fails", ERRORS, [cand(requests=1000, errors=80)], FINE_STABLE, [C1],
     "fail", "error_rate 80/1000"),
    ("an-interval-across-the-bound-holds", ERRORS, [cand(requests=1000, errors=9)],
     FINE_STABLE, [C1], "inconclusive", "crosses"),
    ("fewer-than-min-samples-holds", ERRORS, [cand(requests=50, errors=0)], FINE_STABLE, [C1],
     "inconclusive", "fewer than the 100"),
    ("a-silent-candidate-worker-holds", ERRORS,
     [cand(C1, requests=1000, errors=0)], FINE_STABLE, [C1, C2], "inconclusive", "no candidate"),
    ("a-report-older-than-the-window-is-silence", ERRORS,
     [cand(C1, ago=120, requests=1000, errors=0)], FINE_STABLE, [C1], "inconclusive",
     "no candidate"),
    ("no-candidate-report-at-all-holds", ERRORS, [], FINE_STABLE, [], "inconclusive",
     "0 candidate request"),
    ("a-stable-cohort-as-bad-holds-instead-of-failing", ERRORS,
     [cand(requests=1000, errors=80)], [stab(requests=1000, errors=85)], [C1],
     "inconclusive", "stable cohort is as far out"),
    ("no-stable-evidence-still-fails-a-bad-candidate", ERRORS,
     [cand(requests=1000, errors=80)], [], [C1], "fail", "outside"),
    ("a-slow-candidate-fails", TTFT, [cand(requests=500, ttft_p95_ms=1500)], FINE_STABLE,
     [C1], "fail", "ttft_p95_ms 1500"),
    ("a-fast-candidate-passes", TTFT, [cand(requests=500, ttft_p95_ms=400)], FINE_STABLE,
     [C1], "pass", "inside"),
    ("latency-is-request-weighted", TTFT,
     [cand(C1, requests=900, ttft_p95_ms=500), cand(C2, requests=100, ttft_p95_ms=2000)],
     FINE_STABLE, [C1, C2], "pass", "ttft_p95_ms 650"),
    ("no-finished-request-is-inconclusive", TTFT, [cand(requests=500)], FINE_STABLE, [C1],
     "inconclusive", "no candidate request finished"),
    ("failed-task-checks-fail", "thresholds:\n  task_check_failure_rate: {max: 0.0}\n",
     [cand(requests=500, task_checks_passed=90, task_checks_failed=10)], FINE_STABLE, [C1],
     "fail", "task_check_failure_rate 10/100"),
    ("device-faults-fail", "thresholds:\n  device_fault_rate: {max: 0.001}\n",
     [cand(requests=500, device_faults=20)], FINE_STABLE, [C1], "fail", "device_fault_rate"),
    ("triggers-only-pass-with-samples",
     "triggers:\n  - {name: errs, metric: error_rate, above: 0.5}\n",
     [cand(requests=200, errors=1)], FINE_STABLE, [C1], "pass", "no threshold crossed"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("analysis", "candidate", "stable", "expected", "verdict", "why"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_judge_step(
    analysis: str,
    candidate: list[WindowReport],
    stable: list[WindowReport],
    expected: list[str],
    verdict: str,
    why: str,
) -> None:
    judged = judge_step(
        plan(analysis),
        candidate,
        stable,
        expected_candidate_keyids=expected,
        window_seconds=60,
        now=NOW,
    )
    assert judged.verdict == verdict, judged.reasons
    assert any(why in r for r in judged.reasons), judged.reasons
    assert (judged.detected_at is not None) == (verdict == "fail")
    assert judged.to_json()["verdict"] == verdict


def test_silence_is_never_a_pass_even_when_the_figures_are_perfect() -> None:
    analysis = plan(ERRORS + TTFT.removeprefix("thresholds:\n"), min_samples=0)
    judged = judge_step(
        analysis,
        [cand(C1, requests=10_000, errors=0, ttft_p95_ms=10)],
        FINE_STABLE,
        expected_candidate_keyids=[C1, C2],
        window_seconds=60,
        now=NOW,
    )
    assert judged.verdict == "inconclusive"
    assert judged.metrics["silent"] == [C2]
    assert judged.metrics["thresholds"]["error_rate"]["verdict"] == "pass"  # still recorded


TRIGGER = "triggers:\n  - {name: sustained-errors, metric: error_rate, above: 0.05, for: 30s}\n"


@pytest.mark.parametrize(
    ("reports", "fired"),
    [
        pytest.param(  # over the bound over the 30s the reports cover (25s + a 10s interval)
            [cand(ago=25, requests=100, errors=10), cand(ago=5, requests=100, errors=10)],
            True,
            id="sustained-fires",
        ),
        pytest.param(  # over the bound, but only for the last 10s: not sustained yet
            [cand(ago=5, requests=100, errors=10)], False, id="too-short-does-not-fire"
        ),
        pytest.param(
            [cand(ago=35, requests=100, errors=1), cand(ago=5, requests=100, errors=1)],
            False,
            id="under-the-bound-does-not-fire",
        ),
    ],
)
def test_a_trigger_fires_at_once_without_the_sample_minimum(
    reports: list[WindowReport], fired: bool
) -> None:
    judged = judge_step(
        plan(TRIGGER, min_samples=10_000),
        reports,
        [],
        expected_candidate_keyids=[C1],
        window_seconds=60,
        now=NOW,
    )
    assert (judged.fired_trigger == "sustained-errors") == fired
    assert judged.verdict == ("fail" if fired else "inconclusive")
    if fired:
        assert judged.detected_at == NOW - timedelta(seconds=25)  # the first report over it
        assert "trigger 'sustained-errors' fired" in judged.reasons[0]


def test_detection_time_is_the_first_failing_report() -> None:
    judged = judge_step(
        plan(ERRORS),
        [
            cand(C1, ago=50, requests=500, errors=0),
            cand(C1, ago=30, requests=500, errors=60),
            cand(C1, ago=10, requests=500, errors=60),
        ],
        FINE_STABLE,
        expected_candidate_keyids=[C1],
        window_seconds=60,
        now=NOW,
    )
    assert judged.verdict == "fail"
    assert judged.detected_at == NOW - timedelta(seconds=30)


def test_the_intervals_are_wilson_and_newcombe() -> None:
    low, high = wilson_interval(10, 100)
    assert low < 0.1 < high
    d_low, d_high = newcombe_difference(10, 100, 10, 100)
    assert d_low < 0 < d_high
    assert abs(d_low + d_high) < 1e-9  # symmetric at equal rates
    d_low, _ = newcombe_difference(30, 100, 5, 100)
    assert d_low > 0  # clearly worse
    with pytest.raises(ValueError, match="n > 0"):
        newcombe_difference(0, 0, 1, 10)


@pytest.mark.parametrize(
    ("reports", "ok", "known_good"),
    [
        pytest.param(
            [stab(S1, capacity=64, inflight_peak=20), cand(C1, capacity=64, inflight_peak=20,
             stable_warm=True)], True, 128, id="warm-candidate-counts",
        ),
        pytest.param(
            [stab(S1, capacity=16, inflight_peak=20), cand(C1, capacity=64, inflight_peak=20)],
            False, 16, id="cold-candidate-does-not-count",
        ),
        pytest.param([], False, 0, id="no-report-is-no-proof"),
    ],
)  # fmt: skip
def test_capacity_check(reports: list[WindowReport], ok: bool, known_good: int) -> None:
    checked = capacity_check(plan(ERRORS), reports)
    assert (checked.ok, checked.known_good) == (ok, known_good)
    assert bool(checked.reason) != ok


def test_the_manual_key_names_later_steps_of_the_plan() -> None:
    assert parse_analysis(b"manual: [50, 20]\n")["manual"] == [20, 50]
    assert "manual" not in parse_analysis(ERRORS.encode())  # old plans keep their bytes
    assert plan("manual: [50]\n").analysis["manual"] == [50]
    with pytest.raises(PlanInvalid) as caught:
        plan("manual: [30]\n")
    assert caught.value.field == "analysis.manual"
    for bad, field in ((b"manual: []\n", "manual"), (b"manual: [true]\n", "manual[0]")):
        with pytest.raises(PlanInvalid) as caught:
            parse_analysis(bad)
        assert caught.value.field == field


def test_a_step_younger_than_its_window_does_not_pass_but_can_fail() -> None:
    def judged(errors: int) -> str:
        return judge_step(
            plan(ERRORS),
            [cand(requests=1000, errors=errors)],
            FINE_STABLE,
            expected_candidate_keyids=[C1],
            window_seconds=60,
            now=NOW,
            step_started_at=NOW - timedelta(seconds=20),
        ).verdict

    assert judged(0) == "inconclusive"
    assert judged(80) == "fail"
