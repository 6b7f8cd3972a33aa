"""Cohorts that work at any fleet size (docs/rollouts.md#cohorts, issue 37 item 2).

A plan lists the fleet the registry knows (the workers that report for the alias); every
worker computes from the signed plan and the signed step's weight alone whether it is one
of the fleet's first ``cohort_size(weight, len(fleet))`` workers in the rollout's order.
With 3 workers, the 5% step holds one of them, and the analysis can judge it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from modelward.attest.keys import generate_private_key
from modelward.attest.rollout import (
    MAX_FLEET,
    PlanInvalid,
    RolloutPlan,
    SeenStep,
    StepRefused,
    candidate_workers,
    canonical_json,
    cohort_size,
    in_candidate_cohort,
    make_plan,
    make_step,
    parse_plan,
    parse_step,
    resolve_digest,
    verify_step,
)
from tests.registry.conftest import Registry, new_publisher, push_new
from tests.rollouts.fleet_reports import POLICY, Canary, Worker, refused

STABLE, CANDIDATE = "sha256:" + "a" * 64, "sha256:" + "b" * 64
STEPS = (5, 20, 50, 100)
ERRORS = "thresholds:\n  error_rate: {max: 0.05}\n"
WINDOW = 2


def _keyid(i: int) -> str:
    return f"{i:064x}"


def _plan(fleet: tuple[str, ...] | None, rollout_id: str = "1" * 32) -> RolloutPlan:
    return make_plan(
        rollout_id=rollout_id, repository="o/m", alias="prod", stable=STABLE,
        candidate=CANDIDATE, steps=STEPS, fleet=fleet,
    )  # fmt: skip


def _three_without_a_5_percent_bucket() -> tuple[str, tuple[str, ...]]:
    """A rollout id and 3 workers none of whose buckets falls in 5% or 20% (the issue's
    fleet: buckets 6530, 2302 and 2618)."""
    fleet = (_keyid(1), _keyid(2), _keyid(3))
    for n in range(10_000):
        rid = f"{n:032x}"
        if all(not in_candidate_cohort(rid, k, 20) for k in fleet):
            return rid, fleet
    raise AssertionError("no such rollout id")


def test_3_workers_and_a_5_percent_first_step_have_one_candidate_each_worker_verifies() -> None:
    rid, fleet = _three_without_a_5_percent_bucket()
    plan = make_plan(
        rollout_id=rid, repository="o/m", alias="prod", stable=STABLE, candidate=CANDIDATE,
        steps=STEPS, fleet=fleet,
    )  # fmt: skip
    assert parse_plan(plan.raw).fleet == fleet  # the fleet is in the signed bytes
    on_candidate = []
    for index in range(len(STEPS)):
        state = "completed" if STEPS[index] == 100 else "running"
        step = verify_step(plan, parse_step(make_step(plan, index=index, state=state).raw))
        # each worker decides for itself, from the plan and the step's weight
        on_candidate.append({k for k in fleet if resolve_digest(plan, step, k) == CANDIDATE})
    assert [len(c) for c in on_candidate] == [1, 1, 2, 3]
    assert on_candidate[0] <= on_candidate[1] <= on_candidate[2] <= on_candidate[3]
    # the same fleet by hash buckets alone had nobody at 5% or 20%
    assert not any(in_candidate_cohort(rid, k, 20) for k in fleet)


@pytest.mark.parametrize("size", range(1, 61))
def test_the_candidate_share_follows_each_step_at_every_fleet_size(size: int) -> None:
    fleet = tuple(_keyid(i) for i in range(size))
    before: frozenset[str] = frozenset()
    for weight in range(1, 101):
        chosen = candidate_workers("2" * 32, fleet, weight)
        assert len(chosen) == cohort_size(weight, size) >= 1  # a step never holds none
        assert chosen >= before  # no step has fewer candidate workers than the one before
        # as close to the weight as the fleet allows (one worker more only to reach one)
        assert abs(len(chosen) - weight * size / 100) <= 0.5 or len(chosen) == 1
        before = chosen
    assert before == frozenset(fleet)


def test_a_worker_not_in_the_plans_fleet_refuses_to_switch_until_100() -> None:
    fleet = tuple(_keyid(i) for i in range(3))
    plan = _plan(fleet)
    outsider = _keyid(99)
    for index, weight in enumerate(STEPS[:-1]):
        step = make_step(plan, index=index, state="running")
        assert resolve_digest(plan, step, outsider) == STABLE, weight
        assert resolve_digest(plan, step, None) == STABLE
    done = make_step(plan, index=3, state="completed")
    assert resolve_digest(plan, done, outsider) == CANDIDATE


def test_a_fleet_that_names_a_worker_twice_or_unsorted_or_oversized_is_refused() -> None:
    """A worker listed twice would hold two places of the cohort (more candidate workers
    than the weight); the plan's fleet is refused by every worker that parses it."""
    plan = _plan((_keyid(1), _keyid(2)))
    doc = json.loads(plan.raw)
    for fleet, why in (
        ([_keyid(1), _keyid(1)], "each once"),
        ([_keyid(2), _keyid(1)], "sorted"),
        ([], "1 to"),
        ([_keyid(i) for i in range(MAX_FLEET + 1)], "1 to"),
        (["not-a-keyid"], "64 lowercase hex"),
    ):
        with pytest.raises(PlanInvalid, match=why) as info:
            parse_plan(canonical_json({**doc, "fleet": fleet}))
        assert info.value.field == "fleet"


def test_a_step_that_shrinks_or_exceeds_the_cohort_is_refused_by_workers() -> None:
    """The online key signs only the step's weight, which must be the plan's: a step that
    would shrink the cohort (a lower index after a higher one) or exceed it (a weight above
    the plan's) is refused; a worker that missed steps computes the later step's cohort,
    a superset of the one it left."""
    fleet = tuple(_keyid(i) for i in range(7))
    plan = _plan(fleet)
    at_50 = make_step(plan, index=2, state="running")
    seen = SeenStep(plan.rollout_id, 2, "running")
    back_to_5 = make_step(plan, index=0, state="running")
    with pytest.raises(StepRefused, match="replay"):
        verify_step(plan, back_to_5, seen)
    doc = json.loads(back_to_5.raw)
    for weight in (20, 100):
        with pytest.raises(StepRefused, match="weight"):
            verify_step(plan, parse_step(canonical_json({**doc, "weight": weight})))
    at_5 = {k for k in fleet if resolve_digest(plan, back_to_5, k) == CANDIDATE}
    caught_up = verify_step(plan, at_50, SeenStep(plan.rollout_id, 0, "running"))
    assert at_5 < {k for k in fleet if resolve_digest(plan, caught_up, k) == CANDIDATE}


def _reporting_fleet(reg: Registry, tmp: Path, size: int) -> Canary:
    """``prod`` (online) at a stable bundle, a candidate pushed, and ``size`` workers that
    reported the stable digest (the fleet the registry knows)."""
    publisher = new_publisher(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    stable = push_new(publisher, repo, tmp)
    publisher.actor.client.set_alias(repo, "prod", stable)
    candidate = push_new(publisher, repo, tmp)
    c = Canary(reg, repo, publisher, stable, candidate, rollout_id="")
    for _ in range(size):
        c.worker(key=generate_private_key()).report(stable, rollout_id=None)
    return c


@pytest.mark.sqlite_only
def test_3_workers_and_a_5_percent_first_step_the_analysis_judges_it(
    registry: Registry, tmp_path: Path
) -> None:
    c = _reporting_fleet(registry, tmp_path, 3)
    started = c.publisher.actor.client.start_rollout(
        c.repo, "prod", c.candidate, window_seconds=WINDOW, min_samples=100, analysis=ERRORS
    )
    assert started["plan"]["fleet"] == sorted(w.keyid for w in c.workers)
    assert started["cohorts"] == {
        "rule": "fleet",
        "fleet": 3,
        "steps": [
            {"weight": 5, "workers": 1},
            {"weight": 20, "workers": 1},
            {"weight": 50, "workers": 2},
            {"weight": 100, "workers": 3},
        ],
    }
    c.rollout_id = str(started["rollout_id"])
    c.publisher.actor.client.advance_rollout(c.repo, "prod", "first step")
    plan = parse_plan(canonical_json(started["plan"]))
    step = make_step(plan, index=0, state="running")
    mine: dict[str, Worker] = {w.keyid: w for w in c.workers}
    assigned = {k: resolve_digest(plan, step, k) for k in mine}
    assert sorted(assigned.values()).count(c.candidate) == 1
    time.sleep(WINDOW + 0.5)  # the step's first window is over
    for k, w in mine.items():
        assert w.report(assigned[k], requests=500, errors=0)["counted"] is not False
    # the registry assigns each key what the worker computes for itself
    fleet = {w["keyid"]: w["assigned"] for w in c.status()["fleet"]["workers"]}
    assert fleet == assigned
    answer = c.publisher.actor.client.analyze_rollout(c.repo, "prod")
    assert answer["verdict"] == "pass", answer  # not "0 candidate request(s)"
    signed = c.status()["signed_step"]
    assert (signed["index"], signed["weight"]) == (1, 20)


@pytest.mark.sqlite_only
def test_rollout_start_refuses_a_plan_whose_first_step_could_never_be_judged(
    registry: Registry, tmp_path: Path
) -> None:
    c = _reporting_fleet(registry, tmp_path, 3)
    analysis = tmp_path / "analysis.yaml"
    analysis.write_text(ERRORS + "min_workers: 2\n")
    token = c.publisher.actor.token
    ref = f"{c.repo}@prod"
    no = registry.cli("rollout", "start", ref, "--to", c.candidate, "--analysis", str(analysis),
                      token=token)  # fmt: skip
    assert no.returncode != 0, no.stdout
    assert "the first step (5%) holds 1 of the 3 worker(s)" in no.stderr, no.stderr
    assert "min_workers" in no.stderr
    refused(
        lambda: c.publisher.actor.client.start_rollout(
            c.repo, "prod", c.candidate, steps=[20, 100], analysis=ERRORS + "min_workers: 2\n"
        ),
        409,
        "rollout_refused",
    )
    # a first step that holds two workers can be judged: started, and said what it means
    ok = registry.cli("rollout", "start", ref, "--to", c.candidate, "--analysis", str(analysis),
                      "--steps", "50,100", token=token, check=True)  # fmt: skip
    assert "cohorts   50%: 2 of 3, 100%: 3 of 3 workers (the plan's fleet)" in ok.stdout


@pytest.mark.sqlite_only
def test_no_worker_known_a_judged_plan_is_refused_unless_started_anyway_audited(
    registry: Registry, tmp_path: Path
) -> None:
    """A plan with an analysis, and no worker has reported for the alias: no step could
    ever be judged (it only warned before, and the rollout held at 5%). Refused, naming the
    alias and what to do; ``--no-fleet-yet`` starts it anyway, audited."""
    c = _reporting_fleet(registry, tmp_path, 0)
    analysis = tmp_path / "analysis.yaml"
    analysis.write_text(ERRORS)
    token = c.publisher.actor.token
    ref = f"{c.repo}@prod"
    error = refused(
        lambda: c.publisher.actor.client.start_rollout(
            c.repo, "prod", c.candidate, analysis=ERRORS
        ),
        409,
        "rollout_refused",
    )
    assert f"no worker has reported for {ref}" in str(error)
    no = registry.cli("rollout", "start", ref, "--to", c.candidate, "--analysis", str(analysis),
                      token=token)  # fmt: skip
    assert no.returncode != 0, no.stdout
    assert f"no worker has reported for {ref}" in no.stderr, no.stderr
    assert "--no-fleet-yet" in no.stderr
    assert c.publisher.actor.client.rollout_history(c.repo, "prod")["rollouts"] == []
    ok = registry.cli("rollout", "start", ref, "--to", c.candidate, "--analysis", str(analysis),
                      "--no-fleet-yet", "--json", token=token, check=True)  # fmt: skip
    rollout_id = json.loads(ok.stdout)["rollout_id"]
    overrides = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "rollout.start.no_fleet" and e["subject"] == ref
    ]
    assert [(e["actor"], e["subject"], e["details"]["rollout_id"]) for e in overrides] == [
        (c.publisher.actor.name, ref, rollout_id)
    ]
