"""The verdicts a rollout's signed steps acted on (attest/release/_verdicts.py), read from
the steps' signed reasons as the rollout controller writes them
(registry/domains/rollouts/analysis.py). Pure: plans and steps as bytes, no registry."""

from __future__ import annotations

import pytest

from modelward.attest.release._model import ReleaseRecordInvalid
from modelward.attest.release._verdicts import check_verdicts, signed_verdicts
from modelward.attest.rollout import RolloutStep, make_plan, make_step

pytestmark = pytest.mark.sqlite_only

PLAN = make_plan(
    rollout_id="b" * 32,
    repository="acme/m",
    alias="prod",
    stable="sha256:" + "1" * 64,
    candidate="sha256:" + "2" * 64,
    steps=(5, 20, 50, 100),
    window_seconds=600,
    min_samples=500,
)


def _chain() -> list[tuple[RolloutStep, int]]:
    return [
        (make_step(PLAN, index=0, state="running", reason="first step"), 1),
        (make_step(PLAN, index=1, state="running", reason="analysis passed: advanced to 20%"), 2),
        (
            make_step(
                PLAN,
                index=1,
                state="aborted",
                reason="analysis failed at step 1 (20%): error_rate 60/400 = 0.15 outside",
            ),
            3,
        ),
    ]


def test_a_pass_and_a_fail_the_signed_steps_acted_on_are_read() -> None:
    verdicts = signed_verdicts(_chain())
    assert [(v["step"], v["index"], v["tuf_version"], v["verdict"]) for v in verdicts] == [
        (0, 0, 1, "pass"),
        (1, 1, 2, "fail"),
    ]


def test_a_persons_steps_carry_no_verdict() -> None:
    chain = [
        (make_step(PLAN, index=0, state="running", reason="canary"), 1),
        (make_step(PLAN, index=0, state="aborted", reason="TTFT over 800 ms"), 2),
    ]
    assert signed_verdicts(chain) == []


def test_a_fail_claimed_as_a_pass_on_the_registrys_row_is_refused() -> None:
    chain = _chain()
    entry = {"verdicts": signed_verdicts(chain)}
    rows = [{"tuf_version": 1, "verdict": "pass"}, {"tuf_version": 2, "verdict": "pass"}]
    with pytest.raises(ReleaseRecordInvalid) as refused:
        check_verdicts(entry, "rollouts[0]", chain, {"history": rows})
    assert refused.value.field == "rollouts[0].registry.history[1].verdict"


def test_a_verdict_left_out_is_refused() -> None:
    chain = _chain()
    entry = {"verdicts": signed_verdicts(chain)[:1]}
    with pytest.raises(ReleaseRecordInvalid) as refused:
        check_verdicts(entry, "rollouts[0]", chain, {"history": []})
    assert refused.value.field == "rollouts[0].verdicts[1]"
