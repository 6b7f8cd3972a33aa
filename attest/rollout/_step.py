"""A rollout step and the worker's check of it against the signed plan
(docs/rollouts.md#what-a-worker-checks). Pure: bytes in, a verified step or StepRefused out.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from modelward.attest._json import DuplicateKeyError, reject_duplicates
from modelward.attest.rollout._cohort import candidate_workers, in_candidate_cohort
from modelward.attest.rollout._errors import PlanInvalid, StepRefused
from modelward.attest.rollout._plan import RolloutPlan, canonical_json

__all__ = [
    "STATES",
    "STEP_FORMAT",
    "RolloutStep",
    "SeenStep",
    "make_step",
    "parse_step",
    "resolve_digest",
    "verify_next_step",
    "verify_step",
]

STEP_FORMAT = "modelward.rollout-step/v1"
STATES = ("running", "paused", "aborted", "completed")
MAX_STEP_BYTES = 8 * 1024
MAX_REASON = 2000
_SHA_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class RolloutStep:
    """A parsed step and its canonical bytes. ``weight`` is the candidate's percent now
    (0 once aborted); ``index`` the plan's step it stands at."""

    rollout_id: str
    plan_sha256: str
    index: int
    weight: int
    state: str
    reason: str
    raw: bytes = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


@dataclass(frozen=True)
class SeenStep:
    """What a worker remembers of the last step it verified (its cache)."""

    rollout_id: str
    index: int
    state: str


def make_step(plan: RolloutPlan, *, index: int, state: str, reason: str = "") -> RolloutStep:
    """The step at ``index`` of ``plan`` in ``state`` (weight from the plan; 0 aborted)."""
    weight = 0 if state == "aborted" else plan.steps[index]
    doc = {
        "format": STEP_FORMAT,
        "rollout_id": plan.rollout_id,
        "plan_sha256": plan.sha256,
        "index": index,
        "weight": weight,
        "state": state,
        "reason": reason[:MAX_REASON],
    }
    return parse_step(canonical_json(doc))


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise PlanInvalid(f"step.{key}", f"{value!r} is not 0..100")
    return value


def parse_step(raw: bytes) -> RolloutStep:
    """The step in ``raw`` (canonical JSON of STEP_FORMAT; PlanInvalid otherwise)."""
    if len(raw) > MAX_STEP_BYTES:
        raise PlanInvalid("step", f"{len(raw)} bytes, more than {MAX_STEP_BYTES}")
    try:
        doc = json.loads(raw, object_pairs_hook=reject_duplicates)
    except (ValueError, DuplicateKeyError) as exc:
        raise PlanInvalid("step", f"not JSON: {exc}") from exc
    keys = {"format", "rollout_id", "plan_sha256", "index", "weight", "state", "reason"}
    if not isinstance(doc, dict) or doc.get("format") != STEP_FORMAT or set(doc) != keys:
        raise PlanInvalid("step", f"not a {STEP_FORMAT} document with fields {sorted(keys)}")
    if doc["state"] not in STATES:
        raise PlanInvalid("step.state", f"{doc['state']!r} is not one of {list(STATES)}")
    if not isinstance(doc["plan_sha256"], str) or not _SHA_RE.fullmatch(doc["plan_sha256"]):
        raise PlanInvalid("step.plan_sha256", "not a sha256")
    if not isinstance(doc["rollout_id"], str) or not isinstance(doc["reason"], str):
        raise PlanInvalid("step", "rollout_id and reason must be strings")
    step = RolloutStep(
        rollout_id=doc["rollout_id"],
        plan_sha256=doc["plan_sha256"],
        index=_int(doc, "index"),
        weight=_int(doc, "weight"),
        state=doc["state"],
        reason=doc["reason"],
        raw=bytes(raw),
    )
    if canonical_json(doc) != raw:
        raise PlanInvalid("step", "not in canonical form (sorted keys, no spaces, ASCII)")
    return step


def verify_step(plan: RolloutPlan, step: RolloutStep, seen: SeenStep | None = None) -> RolloutStep:
    """``step`` if a worker may follow it (``plan`` and ``step`` already verified as signed
    by their roles), else StepRefused naming the check. ``seen``: the last step this worker
    verified, if any.

    1. the step names this plan: its rollout id and the plan's sha256;
    2. its index is one of the plan's steps;
    3. its weight is the plan's ``steps[index]`` (0 when aborted; 100 when completed, which
       only the last step may be);
    4. against what the worker saw last of this rollout: no step back (a replay: a lower
       index, or the completed last step left), and nothing after an abort but the abort (a
       restart needs a new plan, with a new rollout id and new signatures); an abort is
       taken at any index. A later index of the same plan is followed, however many steps
       the worker missed between two polls (it catches up): the rule against skipping a
       step binds what the registry signs (``verify_next_step``), not how often a worker
       polls.
    """
    # (1): this plan
    if step.rollout_id != plan.rollout_id:
        raise StepRefused("rollout_id", plan.rollout_id, step.rollout_id)
    if step.plan_sha256 != plan.sha256:
        raise StepRefused("plan_sha256", plan.sha256, step.plan_sha256)
    # (2): a step of the plan
    if not 0 <= step.index < len(plan.steps):
        raise StepRefused("index", f"0..{len(plan.steps) - 1}", step.index)
    # (3): the plan's weight
    want = 0 if step.state == "aborted" else plan.steps[step.index]
    if step.weight != want:
        raise StepRefused("weight", want, step.weight)
    if step.state == "completed" and step.index != len(plan.steps) - 1:
        raise StepRefused("completed", f"index {len(plan.steps) - 1}", step.index)
    # (4): against the worker's memory of this rollout; an abort is the safe direction and
    # is taken at any index
    if seen is not None and seen.rollout_id == step.rollout_id and step.state != "aborted":
        if seen.state == "aborted":
            raise StepRefused("aborted", "aborted (for good)", f"{step.state} at {step.index}")
        if step.index < seen.index:
            raise StepRefused("replay", f"index >= {seen.index}", step.index)
        if seen.state == "completed" and step.state != "completed":
            raise StepRefused("replay", "completed (for good)", f"{step.state} at {step.index}")
    return step


def verify_next_step(plan: RolloutPlan, step: RolloutStep, seen: SeenStep | None) -> RolloutStep:
    """``step`` if the online key may sign it after ``seen`` (the step signed before it of
    the same plan; None: none yet), else StepRefused: ``verify_step``, and no step skipped
    (a ``jump``: the first at index 0, then one index at a time; an abort at any index).
    The registry checks this before it signs a step and ``release verify`` along the chain
    of signed steps; workers follow any later step (``verify_step``)."""
    verify_step(plan, step, seen)
    last = -1 if seen is None or seen.rollout_id != step.rollout_id else seen.index
    if step.state != "aborted" and step.index > last + 1:
        raise StepRefused("jump", f"index <= {last + 1}", step.index)
    return step


def resolve_digest(plan: RolloutPlan, step: RolloutStep | None, worker_keyid: str | None) -> str:
    """The digest this worker runs (``step`` must have passed ``verify_step``):

    1. the stable one before the first step and after an abort;
    2. the candidate at 100%, for every worker (one without a key, or outside the plan's
       fleet, included);
    3. below 100%, with a fleet in the plan: the candidate iff the worker is one of the
       fleet's first ``cohort_size(weight, len(fleet))`` in this rollout's order
       (``candidate_workers``); a worker outside the fleet, or without a key, runs stable;
    4. below 100%, without a fleet: the candidate iff the worker's bucket is inside the
       weight (``in_candidate_cohort``); a worker without a key runs stable.
    """
    # (1): not started, or aborted
    if step is None or step.state == "aborted":
        return plan.stable
    # (2): all of the fleet
    if step.weight == 100:
        return plan.candidate
    if worker_keyid is None:
        return plan.stable
    # (3): the plan's fleet
    if plan.fleet is not None:
        listed = worker_keyid in candidate_workers(plan.rollout_id, plan.fleet, step.weight)
        return plan.candidate if listed else plan.stable
    # (4): hash buckets
    in_cohort = in_candidate_cohort(plan.rollout_id, worker_keyid, step.weight)
    return plan.candidate if in_cohort else plan.stable
