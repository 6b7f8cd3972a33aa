"""The pure side of rollouts (attest.rollout): the plan's bytes, the analysis document, the
cohorts each worker computes, and the step checked against its plan (docs/rollouts.md)."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

import pytest

from modelward.attest.rollout import (
    BUCKETS,
    PlanInvalid,
    RolloutPlan,
    RolloutStep,
    SeenStep,
    StepRefused,
    bucket,
    canonical_json,
    in_candidate_cohort,
    make_plan,
    make_step,
    parse_analysis,
    parse_duration,
    parse_plan,
    parse_step,
    parse_steps,
    resolve_digest,
    verify_next_step,
    verify_step,
)

STABLE = "sha256:" + "1" * 64
CANDIDATE = "sha256:" + "2" * 64
OTHER = "sha256:" + "3" * 64
WORKERS = [hashlib.sha256(f"worker-{i}".encode()).hexdigest() for i in range(20)]


def plan(rollout_id: str = "a" * 32, **kw: Any) -> RolloutPlan:
    return make_plan(
        rollout_id=rollout_id,
        repository="acme/tiny",
        alias="prod",
        stable=STABLE,
        candidate=CANDIDATE,
        **kw,
    )


def test_the_plan_is_its_canonical_bytes_and_their_sha256_names_it() -> None:
    p = make_plan(
        rollout_id="a" * 32,
        repository="acme/tiny",
        alias="prod",
        stable=STABLE,
        candidate=CANDIDATE,
    )
    assert p.raw == canonical_json(json.loads(p.raw))
    assert p.sha256 == hashlib.sha256(p.raw).hexdigest()
    assert parse_plan(p.raw) == p
    assert p.steps == (5, 20, 50, 100)


def test_a_plan_in_another_encoding_is_refused() -> None:
    p = make_plan(
        rollout_id="a" * 32,
        repository="acme/tiny",
        alias="prod",
        stable=STABLE,
        candidate=CANDIDATE,
    )
    with pytest.raises(PlanInvalid, match="canonical"):
        parse_plan(json.dumps(json.loads(p.raw), indent=1).encode())


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("5,20,50", "last step must be 100"),
        ("20,5,100", "must increase"),
        ("0,100", "percent from 1 to 100"),
        ("5,x,100", "comma-separated"),
        ("5,5,100", "must increase"),
    ],
)
def test_bad_steps_are_refused_naming_steps(text: str, why: str) -> None:
    with pytest.raises(PlanInvalid, match=why) as caught:
        parse_steps(text)
    assert caught.value.field == "steps"


def test_a_candidate_equal_to_the_stable_digest_is_refused() -> None:
    with pytest.raises(PlanInvalid) as caught:
        make_plan(
            rollout_id="a" * 32, repository="a/b", alias="prod", stable=STABLE, candidate=STABLE
        )
    assert caught.value.field == "candidate"


def test_the_analysis_document_is_validated_with_named_errors() -> None:
    good = (
        b"thresholds:\n  error_rate: {max: 0.01}\n"
        b"triggers:\n  - {name: errs, metric: error_rate, above: 0.05, for: 2m}\n"
    )
    parsed = parse_analysis(good)
    assert parsed["thresholds"] == {"error_rate": {"max": 0.01}}
    assert parsed["triggers"][0]["for_seconds"] == 120
    assert parse_analysis(json.dumps({"thresholds": {"ttft_p95_ms": {"max": 800}}}).encode())
    for doc, field in [
        (b"thresholds:\n  made_up: {max: 1}\n", "thresholds.made_up"),
        (b"thresholds:\n  error_rate: {max: .nan}\n", "thresholds.error_rate.max"),
        (b"triggers:\n  - {name: a, metric: error_rate}\n", "triggers[0]"),
        (b"triggers:\n  - {name: a, metric: error_rate, above: 1, for: soon}\n", "triggers[0].for"),
        (b"extra: 1\n", "analysis"),
        (b"a: &x 1\nb: *x\n", "analysis"),
        (b"{}", "analysis"),
    ]:
        with pytest.raises(PlanInvalid) as caught:
            parse_analysis(doc)
        assert caught.value.field == field, doc


def test_durations() -> None:
    assert parse_duration("90", "w") == 90
    assert parse_duration("1h30m", "w") == 5400
    with pytest.raises(PlanInvalid):
        parse_duration("1d", "w")


def test_buckets_are_stable_and_in_range() -> None:
    assert bucket("r1", "k") == bucket("r1", "k")
    assert all(0 <= bucket("r1", w) < BUCKETS for w in WORKERS)
    assert [bucket("r1", w) for w in WORKERS] != [bucket("r2", w) for w in WORKERS]


def test_each_step_only_adds_workers_to_the_candidate_cohort() -> None:
    p = plan()
    cohorts = []
    for index in range(len(p.steps)):
        step = make_step(p, index=index, state="running")
        cohorts.append({w for w in WORKERS if resolve_digest(p, step, w) == CANDIDATE})
    for smaller, larger in itertools.pairwise(cohorts):
        assert smaller <= larger
    assert cohorts[-1] == set(WORKERS)
    for w in WORKERS:  # each worker's resolution is its own cohort computation
        assert (w in cohorts[0]) == in_candidate_cohort(p.rollout_id, w, 5)


def test_abort_sends_every_worker_back_to_stable() -> None:
    p = plan()
    aborted = make_step(p, index=2, state="aborted", reason="errors")
    assert aborted.weight == 0
    assert {resolve_digest(p, aborted, w) for w in WORKERS} == {STABLE}


def test_a_worker_without_a_key_runs_the_candidate_only_at_100() -> None:
    p = plan()
    assert resolve_digest(p, make_step(p, index=2, state="running"), None) == STABLE
    assert resolve_digest(p, make_step(p, index=3, state="completed"), None) == CANDIDATE


def _forged_step(p: RolloutPlan, **fields: object) -> RolloutStep:
    doc = json.loads(make_step(p, index=0, state="running").raw)
    doc.update(fields)
    return parse_step(canonical_json(doc))


@pytest.mark.parametrize(
    ("fields", "check"),
    [
        ({"weight": 100}, "weight"),  # a jump to 100% at step 0
        ({"index": 7, "weight": 100}, "index"),  # a step the plan does not have
        ({"plan_sha256": "f" * 64}, "plan_sha256"),  # a forged plan's step
        ({"rollout_id": "b" * 32}, "rollout_id"),
        ({"index": 1, "weight": 20, "state": "completed"}, "completed"),
    ],
)
def test_a_step_the_plan_does_not_name_is_refused(fields: dict[str, object], check: str) -> None:
    p = plan()
    with pytest.raises(StepRefused) as caught:
        verify_step(p, _forged_step(p, **fields))
    assert caught.value.check == check


def test_a_replay_and_a_restart_after_abort_are_refused_by_a_worker_that_saw_them() -> None:
    p = plan()
    rid = p.rollout_id
    at1 = SeenStep(rid, 1, "running")
    with pytest.raises(StepRefused, match="jump"):  # the registry signs one step at a time
        verify_next_step(p, make_step(p, index=3, state="completed"), at1)
    with pytest.raises(StepRefused, match="replay"):
        verify_step(p, make_step(p, index=0, state="running"), at1)
    with pytest.raises(StepRefused, match="aborted"):
        verify_step(p, make_step(p, index=1, state="running"), SeenStep(rid, 1, "aborted"))
    assert verify_step(p, make_step(p, index=2, state="running"), at1).weight == 50


def test_an_abort_is_taken_at_any_index() -> None:
    p = plan()
    seen = SeenStep(p.rollout_id, 0, "running")
    assert verify_step(p, make_step(p, index=2, state="aborted"), seen).weight == 0
    assert verify_step(
        p, make_step(p, index=0, state="aborted"), SeenStep(p.rollout_id, 2, "running")
    )
