"""The analysis of a rollout step on a real registry (docs/rollouts.md#analysis): workers
send REAL signed fleet reports (their registered keys, the reports endpoint), then
``rollout analyze`` judges the step now and acts as the controller would: pass advances
one step, fail aborts with the reason and records the rollback figures, inconclusive
holds, a quarantine of the candidate aborts, a short known-good pool holds; and the
controller itself acts without being asked.

Windows are a few seconds; a step passes only after its first window is over, so the
passing tests wait that long (no timing is asserted). The shared registry's controller
ticks too (every 10 s): the tests assert the signed state, which it reaches the same way.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from modelward.client.api import APIError
from modelward.client.errors import ForbiddenError, NotFoundError
from modelward.registry.domains.rollouts.analysis import CONTROLLER
from tests.registry.conftest import Registry, new_publisher, push_new
from tests.rollouts.fleet_reports import POLICY, Canary, Worker, audit_mark, canary_at

ERRORS = "thresholds:\n  error_rate: {max: 0.05}\n"
WINDOW = 2  # seconds: a step passes once it is older than this


def analysis_canary(
    reg: Registry,
    tmp: Path,
    analysis: str = ERRORS,
    *,
    window: int = WINDOW,
    min_samples: int = 100,
    first_step: bool = True,
) -> Canary:
    """``prod`` (online) at ``stable``, a signed plan with ``analysis`` to ``candidate``, and
    its first step (5%) signed by a person (a first step needs no analysis)."""
    publisher = new_publisher(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    stable = push_new(publisher, repo, tmp)
    publisher.actor.client.set_alias(repo, "prod", stable)
    candidate = push_new(publisher, repo, tmp)
    started = publisher.actor.client.start_rollout(
        repo,
        "prod",
        candidate,
        window_seconds=window,
        min_samples=min_samples,
        analysis=analysis,
        allow_no_fleet=True,  # the workers report after the start
    )
    assert started["plan_signed"], started
    if first_step:
        publisher.actor.client.advance_rollout(repo, "prod", "first step")
    return Canary(reg, repo, publisher, stable, candidate, str(started["rollout_id"]))


def analyze(c: Canary) -> dict[str, Any]:
    return c.publisher.actor.client.analyze_rollout(c.repo, c.alias)


def step(c: Canary) -> dict[str, Any]:
    signed = c.status()["signed_step"]
    assert signed is not None
    return dict(signed)


def good(w: Worker, digest: str, **fields: Any) -> None:
    w.report(digest, **{"requests": 500, "errors": 0, **fields})


@pytest.mark.sqlite_only
def test_a_passing_step_advances_one_step(registry: Registry, tmp_path: Path) -> None:
    c = analysis_canary(registry, tmp_path)
    canary, stable = c.worker(candidate=True), c.worker(candidate=False)
    time.sleep(WINDOW + 0.5)  # the step's first window is over
    good(canary, c.candidate)
    good(stable, c.stable)
    analyze(c)  # (or the controller's tick got there first: the same signed step)
    signed = step(c)
    assert (signed["index"], signed["weight"], signed["state"]) == (1, 20, "running")
    history = c.status()["history"]
    judged = next(h for h in history if h["index"] == 0 and h["verdict"] == "pass")
    assert judged["analysis"]["metrics"]["thresholds"]["error_rate"]["verdict"] == "pass"
    assert history[-1]["actor"] == CONTROLLER


@pytest.mark.sqlite_only
def test_a_failing_step_aborts_with_the_reason_and_the_figures(
    registry: Registry, tmp_path: Path
) -> None:
    c = analysis_canary(registry, tmp_path)
    canary, stable = c.worker(candidate=True), c.worker(candidate=False)
    canary.report(c.candidate, requests=500, errors=100, retries=40)
    good(stable, c.stable)
    analyze(c)
    state = c.status()
    assert state["state"] == "aborted"
    assert step(c)["state"] == "aborted"
    reason = state["history"][-1]["reason"]
    assert "analysis failed at step 0 (5%)" in reason
    assert "error_rate 100/500" in reason
    failed = next(h for h in state["history"] if h["verdict"] == "fail")
    assert failed["analysis"]["verdict"] == "fail"
    rollback = state["rollback"]
    assert rollback["detected_at"] is not None
    assert rollback["decided_at"] is not None
    assert rollback["decision_seconds"] >= 0
    assert rollback["capacity_before"] == {"stable": 64, "candidate": 64}
    assert rollback["converged_at"] is None  # the canary has not come back yet
    # the canary reports the stable digest: the route converged
    good(canary, c.stable)
    good(stable, c.stable)
    analyze(c)
    rollback = c.status()["rollback"]
    assert rollback["converged_at"] is not None
    assert rollback["convergence_seconds"] >= 0
    assert rollback["capacity_after"] == {"stable": 128, "candidate": 0}
    assert rollback["retry_volume"] >= 40
    # a window after the abort in which the stable cohort is inside every threshold
    time.sleep(WINDOW + 0.5)
    analyze(c)
    rollback = c.status()["rollback"]
    assert rollback["recovered_at"] is not None
    assert rollback["recovery_seconds"] > 0


def test_analyses_racing_on_a_failing_step_abort_once_and_none_is_refused(
    registry: Registry, tmp_path: Path
) -> None:
    """Attack (the controller's tick racing an ``analyze``, as CI saw it): several analyses
    judge the same failing step at once. One aborts; the others find it ended while they
    judged and answer ``none``: never a 404 "no rollout under way" for an abort that
    happened (SQLite and PostgreSQL)."""
    from concurrent.futures import ThreadPoolExecutor

    c = analysis_canary(registry, tmp_path)
    canary, stable = c.worker(candidate=True), c.worker(candidate=False)
    canary.report(c.candidate, requests=500, errors=100)
    good(stable, c.stable)
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: analyze(c), range(6)))  # raises on any refusal
    actions = sorted(a["action"] for a in answers)
    assert actions.count("aborted") <= 1, actions  # (or the controller's tick aborted it)
    assert set(actions) <= {"aborted", "none"}, actions
    assert c.status()["state"] == "aborted"
    aborts = [h for h in c.status()["history"] if h.get("state") == "aborted"]
    assert len(aborts) == 1, aborts


@pytest.mark.sqlite_only
def test_an_inconclusive_step_holds(registry: Registry, tmp_path: Path) -> None:
    mark = audit_mark(registry)
    c = analysis_canary(registry, tmp_path, min_samples=10_000)
    canary, stable = c.worker(candidate=True), c.worker(candidate=False)
    time.sleep(WINDOW + 0.5)
    good(canary, c.candidate)
    good(stable, c.stable)
    answer = analyze(c)
    assert answer["verdict"] == "inconclusive"
    assert any("fewer than the 10000" in r for r in answer["reasons"]), answer
    assert (step(c)["index"], step(c)["state"]) == (0, "running")  # nothing signed
    assert c.status()["history"][-1]["verdict"] == "inconclusive"
    held = [
        e
        for e in registry.admin.iter_audit(after=mark)
        if e["action"] == "rollout.hold" and e["subject"] == f"{c.repo}@prod"
    ]
    assert held, "a hold is audited"
    # a person cannot advance past a step whose analysis has not passed
    with pytest.raises(APIError, match="has not passed"):
        c.publisher.actor.client.advance_rollout(c.repo, "prod", "skip it")


def test_canary_cohort_gone_silent_halts_promotion(registry: Registry, tmp_path: Path) -> None:
    """Attack: a candidate worker stops reporting (it crashed, or its reports are
    dropped); the others look perfect. Missing evidence makes the gate unknowable: the
    step holds, naming the silent worker, and never passes (SQLite and PostgreSQL)."""
    c = analysis_canary(registry, tmp_path)
    loud, quiet = c.worker(candidate=True), c.worker(candidate=True)
    stable = c.worker(candidate=False)
    good(quiet, c.candidate)  # known to the rollout, then silent
    time.sleep(WINDOW + 0.5)
    good(loud, c.candidate, requests=5000)
    good(stable, c.stable)
    answer = analyze(c)
    assert answer["verdict"] == "inconclusive"
    assert answer["metrics"]["silent"] == [quiet.keyid]
    assert any(quiet.keyid[:12] in r for r in answer["reasons"])
    assert (step(c)["index"], step(c)["weight"]) == (0, 5)


@pytest.mark.sqlite_only
@pytest.mark.parametrize("first_step", [True, False], ids=["at-5", "before-the-first-step"])
def test_a_quarantined_candidate_aborts_the_rollout(
    registry: Registry, tmp_path: Path, first_step: bool
) -> None:
    c = analysis_canary(registry, tmp_path, first_step=first_step)
    registry.admin.quarantine(c.repo, c.candidate, "artifact mismatch")
    # the controller's tick may get there first: then nothing is under way to analyze
    with contextlib.suppress(NotFoundError):
        analyze(c)
    state = c.status()
    assert state["state"] == "aborted"
    assert "quarantined" in state["history"][-1]["reason"]
    assert state["history"][-1]["actor"] == CONTROLLER


@pytest.mark.sqlite_only
def test_a_short_known_good_pool_holds_the_next_step(registry: Registry, tmp_path: Path) -> None:
    """Capacity: the stable cohort admits 4 requests, the canary does not hold the stable
    bundle warm, and the fleet peaks at 80 in flight: a rollback could not take the
    traffic back without a cold start, so a passing step does not advance."""
    c = analysis_canary(registry, tmp_path)
    canary, stable = c.worker(candidate=True), c.worker(candidate=False)
    time.sleep(WINDOW + 0.5)
    good(canary, c.candidate, stable_warm=False, inflight_peak=40)
    good(stable, c.stable, capacity=4, inflight_peak=40)
    answer = analyze(c)
    assert answer["verdict"] == "inconclusive"
    assert "capacity" in answer["reasons"][0]
    assert answer["capacity"]["known_good"] == 4
    assert step(c)["index"] == 0


@pytest.mark.sqlite_only
def test_a_manual_weight_pauses_for_a_person(registry: Registry, tmp_path: Path) -> None:
    c = analysis_canary(registry, tmp_path, ERRORS + "manual: [20]\n")
    canary, stable = c.worker(candidate=True), c.worker(candidate=False)
    time.sleep(WINDOW + 0.5)
    good(canary, c.candidate)
    good(stable, c.stable)
    analyze(c)
    assert (step(c)["index"], step(c)["state"]) == (0, "paused")
    c.publisher.actor.client.advance_rollout(c.repo, "prod", "looked at it")
    assert (step(c)["index"], step(c)["weight"]) == (1, 20)


@pytest.mark.sqlite_only
def test_a_plan_without_analysis_stays_manual(registry: Registry, tmp_path: Path) -> None:
    c = canary_at(registry, tmp_path)
    answer = analyze(c)
    assert answer["action"] == "none"
    assert "advances by hand" in answer["why"]


@pytest.mark.sqlite_only
def test_the_controller_itself_aborts_a_failing_step(registry: Registry, tmp_path: Path) -> None:
    """Nobody calls analyze: the controller of the serving process (every 10 s) finds the
    failing step and aborts it."""
    c = analysis_canary(registry, tmp_path, window=60)
    canary = c.worker(candidate=True)
    canary.report(c.candidate, requests=500, errors=400)
    for _ in range(60):  # at most ~30 s: three controller ticks
        if c.status()["state"] == "aborted":
            break
        time.sleep(0.5)
    state = c.status()
    assert state["state"] == "aborted"
    assert state["history"][-1]["actor"] == CONTROLLER
    assert state["rollback"]["detected_at"] is not None


@pytest.mark.sqlite_only
def test_rollout_analyze_cli(registry: Registry, tmp_path: Path) -> None:
    c = analysis_canary(registry, tmp_path, min_samples=10_000)
    done = registry.cli(
        "rollout", "analyze", f"{c.repo}@prod", "--json", token=c.publisher.actor.token
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["verdict"], answer["action"]) == ("inconclusive", "held")
    text = registry.cli("rollout", "analyze", f"{c.repo}@prod", token=c.publisher.actor.token)
    assert "inconclusive -> held" in text.stdout


@pytest.mark.sqlite_only
def test_analyze_is_for_who_may_advance(registry: Registry, tmp_path: Path) -> None:
    """``rollout analyze`` makes the registry sign a step: the ``PUBLISH`` row of the
    authorization table (publishers of the repository, admins). A reader, and a publisher
    the repository does not list, get 403 and leave no ``rollout.analyze`` event."""
    c = analysis_canary(registry, tmp_path, min_samples=10_000)
    mark = audit_mark(registry)
    for outsider in (registry.actor("reader"), new_publisher(registry).actor):
        with pytest.raises(ForbiddenError):
            outsider.client.analyze_rollout(c.repo, c.alias)
    events = registry.admin.iter_audit(after=mark)
    assert [e for e in events if e["action"] == "rollout.analyze"] == []
    answer = registry.admin.analyze_rollout(c.repo, c.alias)
    assert (answer["verdict"], answer["action"]) == ("inconclusive", "held")
