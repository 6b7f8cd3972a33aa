"""A worker that missed steps catches up (docs/rollouts.md#what-a-worker-checks): the rule
against skipping a step binds what the registry's online key signs
(``attest.rollout.verify_next_step``), not how often a worker polls
(``attest.rollout.verify_step``). Pure: plans and steps as bytes, no registry."""

from __future__ import annotations

import pytest

from modelward.attest.rollout import (
    RolloutPlan,
    SeenStep,
    StepRefused,
    make_plan,
    make_step,
    resolve_digest,
    verify_next_step,
    verify_step,
)

STABLE, CANDIDATE = "sha256:" + "1" * 64, "sha256:" + "2" * 64

pytestmark = pytest.mark.sqlite_only


def plan(rollout_id: str = "a" * 32) -> RolloutPlan:
    return make_plan(
        rollout_id=rollout_id,
        repository="acme/m",
        alias="prod",
        stable=STABLE,
        candidate=CANDIDATE,
        steps=(5, 20, 50, 100),
        window_seconds=600,
        min_samples=500,
    )


def test_worker_that_missed_two_steps_follows_the_current_step() -> None:
    p = plan()
    at0 = SeenStep(p.rollout_id, 0, "running")
    step = verify_step(p, make_step(p, index=2, state="running"), at0)
    assert (step.index, step.weight) == (2, 50)
    # a worker whose bucket is under 50% and over 5% runs the candidate now
    assert resolve_digest(p, step, "k" * 64) in (STABLE, CANDIDATE)


def test_worker_that_missed_every_step_to_completion_resolves_the_candidate() -> None:
    p = plan()
    done = verify_step(
        p, make_step(p, index=3, state="completed"), SeenStep(p.rollout_id, 0, "running")
    )
    assert resolve_digest(p, done, "any-worker") == CANDIDATE
    assert resolve_digest(p, done, None) == CANDIDATE  # a worker without a key at 100%


def test_worker_that_missed_steps_to_an_abort_follows_the_abort() -> None:
    p = plan()
    aborted = verify_step(
        p, make_step(p, index=2, state="aborted"), SeenStep(p.rollout_id, 0, "running")
    )
    assert resolve_digest(p, aborted, "any-worker") == STABLE


def test_worker_that_was_paused_follows_a_later_step() -> None:
    p = plan()
    paused = SeenStep(p.rollout_id, 1, "paused")
    assert verify_step(p, make_step(p, index=3, state="completed"), paused).weight == 100


def test_replayed_older_step_is_refused_after_catching_up() -> None:
    p = plan()
    at2 = SeenStep(p.rollout_id, 2, "running")
    with pytest.raises(StepRefused) as caught:
        verify_step(p, make_step(p, index=1, state="running"), at2)
    assert caught.value.check == "replay"


def test_replayed_running_step_after_completion_is_refused() -> None:
    p = plan()
    done = SeenStep(p.rollout_id, 3, "completed")
    with pytest.raises(StepRefused) as caught:
        verify_step(p, make_step(p, index=2, state="running"), done)
    assert caught.value.check == "replay"
    assert verify_step(p, make_step(p, index=3, state="completed"), done).weight == 100


@pytest.mark.parametrize("index", [0, 2, 3])
def test_restarted_aborted_plan_is_refused_at_any_later_index(index: int) -> None:
    p = plan()
    aborted = SeenStep(p.rollout_id, 0, "aborted")
    state = "completed" if index == 3 else "running"
    with pytest.raises(StepRefused) as caught:
        verify_step(p, make_step(p, index=index, state=state), aborted)
    assert caught.value.check == "aborted"


def test_catching_up_still_needs_the_weight_the_plan_names_at_the_index() -> None:
    p = plan()
    forged = make_step(p, index=2, state="running")
    forged_doc = forged.raw.replace(b'"weight":50', b'"weight":100')
    from modelward.attest.rollout import parse_step

    with pytest.raises(StepRefused) as caught:
        verify_step(p, parse_step(forged_doc), SeenStep(p.rollout_id, 0, "running"))
    assert caught.value.check == "weight"


def test_a_step_of_another_plan_is_refused_however_far_ahead() -> None:
    p, other = plan(), plan("b" * 32)
    with pytest.raises(StepRefused) as caught:
        verify_step(
            p, make_step(other, index=2, state="running"), SeenStep(p.rollout_id, 0, "running")
        )
    assert caught.value.check == "rollout_id"


def test_the_registry_may_not_sign_a_skipped_step() -> None:
    p = plan()
    at0 = SeenStep(p.rollout_id, 0, "running")
    with pytest.raises(StepRefused) as caught:
        verify_next_step(p, make_step(p, index=2, state="running"), at0)
    assert caught.value.check == "jump"
    with pytest.raises(StepRefused, match="jump"):  # the first step is index 0
        verify_next_step(p, make_step(p, index=1, state="running"), None)
    assert verify_next_step(p, make_step(p, index=1, state="running"), at0).weight == 20
    assert verify_next_step(p, make_step(p, index=3, state="aborted"), at0).weight == 0
