"""A worker's side of a rollout: which digest ``ORG/NAME@ALIAS`` names for *this* worker
(docs/rollouts.md#what-a-worker-checks).

Called from ``loader.tuf_resolve.resolve_alias`` once the alias itself resolved through
TUF, with the same refreshed updater, so the plan and the step are verified from the same
pinned root, snapshot and delegations as the alias:

1. the plan: the target ``ORG/NAME/rollouts/ALIAS`` in the role that decides the alias
   (its reviewers, publishers or online key signed it as they sign a move); none: no
   rollout, the alias's digest. Its signed ``custom.plan`` must hash to the target's sha256
   and length and be a canonical plan of this alias (``RolloutRefused`` otherwise); a plan
   whose stable digest is not the alias's signed digest is not in force (the alias moved
   since: the alias's digest, with a warning);
2. the step: the target ``ORG/NAME/rollout-steps/ALIAS`` in ``ORG:NAME@=rollout`` (the
   registry's online key); none, or one of another rollout: the plan is not started, the
   stable digest;
3. the step against the plan and against what this worker saw last of the rollout
   (``attest.rollout.verify_step``: plan sha256, index, weight, no replay, nothing after an
   abort); a later step of the same plan is followed however many the worker missed
   between two polls (TUF's versioning of ``ORG:NAME@=rollout`` keeps an older step from
   coming back); refused: ``RolloutRefused`` naming the check;
4. what it saw is kept (``<cache>/rollouts/``), and the digest is the worker's own cohort
   computation from its worker key id (``attest.rollout.resolve_digest``): its place in
   the signed plan's fleet at the step's weight, or its hash bucket for a plan without a
   fleet; outside the fleet or without a key, the stable digest until the candidate has
   100%.

python-tuf's ``RepositoryError`` (a forged, replayed or expired role) propagates to the
caller, which refuses the alias as for any other TUF failure.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from tuf.api.metadata import Metadata, Snapshot, TargetFile
from tuf.ngclient import Updater

from modelward.attest.rollout import (
    PlanInvalid,
    RolloutPlan,
    RolloutStep,
    SeenStep,
    StepRefused,
    parse_plan,
    parse_step,
    resolve_digest,
    verify_step,
)
from modelward.attest.rollout.paths import rollout_path, rollout_role, signed_custom, step_path
from modelward.loader.errors import RefusedError

__all__ = ["RolloutRefused", "RolloutResolution", "resolve_rollout"]

log = logging.getLogger("modelward.loader")


class RolloutRefused(RefusedError):  # noqa: N818 - a refusal, named as one
    """A signed rollout plan or step this worker does not accept (names the check)."""


@dataclass(frozen=True)
class RolloutResolution:
    """The digest this worker runs, and the verified rollout that decided it."""

    digest: str
    rollout_id: str
    plan_sha256: str
    index: int | None  # None: the plan is signed but not started
    weight: int
    state: str  # planned, running, paused, aborted, completed
    candidate: bool  # whether this worker is in the candidate cohort
    stable: str = ""  # the plan's stable digest (the known-good bundle a worker keeps warm)


def _custom(target: TargetFile, key: str, what: str) -> bytes:
    """``custom[key]`` of a verified target, as the bytes the target's hash names."""
    data = signed_custom(target, key)
    if not data:
        raise RolloutRefused(
            f"{what}: the signed target's custom.{key} is not the bytes its sha256 names"
        )
    return data


def _memory(cache_dir: Path, repo: str, alias: str) -> Path:
    name = hashlib.sha256(f"{repo}@{alias}".encode()).hexdigest()[:16]
    return cache_dir / "rollouts" / f"{name}.json"


def _seen(path: Path) -> SeenStep | None:
    try:
        doc = json.loads(path.read_text())
        return SeenStep(str(doc["rollout_id"]), int(doc["index"]), str(doc["state"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise RolloutRefused(
            f"{path}: this worker's memory of the rollout is unreadable ({exc}); remove it "
            "only if you know no later step was seen"
        ) from exc


def _remember(path: Path, step: RolloutStep) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    seen = {"rollout_id": step.rollout_id, "index": step.index, "state": step.state}
    tmp.write_text(json.dumps(seen))
    tmp.replace(path)


def _listed(cache_dir: Path, role: str) -> bool:
    snapshot = Metadata[Snapshot].from_bytes((cache_dir / "snapshot.json").read_bytes())
    return f"{role}.json" in snapshot.signed.meta


def _plan(updater: Updater, repo: str, alias: str, what: str) -> RolloutPlan | None:
    # (1): the plan, in the role that decides the alias
    target = updater.get_targetinfo(rollout_path(repo, alias))
    if target is None:
        return None
    try:
        plan = parse_plan(_custom(target, "plan", what))
    except PlanInvalid as exc:
        raise RolloutRefused(f"{what}: the signed rollout plan is refused: {exc}") from exc
    if (plan.repository, plan.alias) != (repo, alias):
        raise RolloutRefused(
            f"{what}: the signed rollout plan is for {plan.repository}@{plan.alias}"
        )
    return plan


def _step(updater: Updater, cache_dir: Path, plan: RolloutPlan, what: str) -> RolloutStep | None:
    # (2): the step, in the online key's rollout role (no metadata yet: no step)
    if not _listed(cache_dir, rollout_role(plan.repository)):
        return None
    target = updater.get_targetinfo(step_path(plan.repository, plan.alias))
    if target is None:
        return None
    try:
        step = parse_step(_custom(target, "step", what))
    except PlanInvalid as exc:
        raise RolloutRefused(f"{what}: the signed rollout step is refused: {exc}") from exc
    return step if step.rollout_id == plan.rollout_id else None


def resolve_rollout(
    updater: Updater,
    cache_dir: Path,
    *,
    repo: str,
    alias: str,
    alias_digest: str,
    worker_keyid: str | None,
) -> RolloutResolution | None:
    """The rollout's word on ``repo@alias`` for this worker, or None when no plan is in
    force (the alias's own digest stands). ``updater`` is refreshed; ``cache_dir`` is the
    updater's metadata directory. Raises RolloutRefused, or python-tuf's RepositoryError."""
    what = f"{repo}@{alias}"
    plan = _plan(updater, repo, alias, what)
    if plan is None:
        return None
    if plan.stable != alias_digest:
        log.warning(
            "%s: the signed rollout plan %s starts from %s, but the alias is signed at %s: "
            "the plan is not in force",
            what,
            plan.rollout_id,
            plan.stable,
            alias_digest,
        )
        return None
    step = _step(updater, cache_dir, plan, what)
    memory = _memory(cache_dir, repo, alias)
    # (3): the step against the plan and this worker's memory
    if step is not None:
        try:
            verify_step(plan, step, _seen(memory))
        except StepRefused as exc:
            raise RolloutRefused(f"{what}: {exc}") from exc
        # (4): remember it
        _remember(memory, step)
    digest = resolve_digest(plan, step, worker_keyid)
    return RolloutResolution(
        digest=digest,
        rollout_id=plan.rollout_id,
        plan_sha256=plan.sha256,
        index=step.index if step is not None else None,
        weight=step.weight if step is not None else 0,
        state=step.state if step is not None else "planned",
        candidate=digest == plan.candidate,
        stable=plan.stable,
    )
