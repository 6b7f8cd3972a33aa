"""The fleet a rollout's cohorts are drawn from, and what each step means for it
(docs/rollouts.md#cohorts).

1. ``known_fleet``: the worker keys that reported for the alias in the last
   ``FLEET_SECONDS`` and are still registered (not revoked): the fleet the registry knows;
2. ``plan_fleet``: the key ids a new plan lists (``fleet``): all of them when there are
   1 to MAX_FLEET, none otherwise (hash buckets);
3. ``refuse_unjudgeable``: a plan whose analysis judges its steps, and whose first step
   holds fewer candidate workers of the known fleet than the analysis's ``min_workers``,
   could never pass: ``rollout start`` refuses it, saying why;
4. ``cohorts_json``: what each step of a plan means for its fleet (``rollout start`` and
   ``status`` answer it as ``cohorts``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.rollout import (
    DEFAULT_MIN_WORKERS,
    MAX_FLEET,
    RolloutPlan,
    cohort_size,
)
from modelward.registry.errors import Conflict
from modelward.registry.models import RolloutReport, SigningKey

__all__ = ["FLEET_SECONDS", "cohorts_json", "known_fleet", "plan_fleet", "refuse_unjudgeable"]

FLEET_SECONDS = 24 * 3600  # a worker that reported in the last day is part of the fleet


class PlanUnjudgeable(Conflict):
    """409: the plan's first step could never be judged by its analysis on this fleet."""

    code = "rollout_refused"


def known_fleet(session: Session, repo_id: int, alias: str, now: datetime) -> tuple[str, ...]:
    """(1): the key ids of the workers that reported for ``alias`` lately, sorted."""
    rows = session.scalars(
        select(RolloutReport.worker_keyid)
        .join(SigningKey, SigningKey.keyid == RolloutReport.worker_keyid)
        .where(
            RolloutReport.repo_id == repo_id,
            RolloutReport.alias == alias,
            RolloutReport.received_at >= now - timedelta(seconds=FLEET_SECONDS),
            SigningKey.revoked_at.is_(None),
        )
        .distinct()
    ).all()
    return tuple(sorted(set(rows)))


def plan_fleet(known: tuple[str, ...]) -> tuple[str, ...] | None:
    """(2): the fleet a plan lists, or None (no worker known, or more than MAX_FLEET)."""
    return known if 1 <= len(known) <= MAX_FLEET else None


def _judged(plan: RolloutPlan) -> bool:
    return bool(plan.analysis.get("thresholds") or plan.analysis.get("triggers"))


def refuse_unjudgeable(plan: RolloutPlan, fleet_size: int, *, allow_no_fleet: bool) -> None:
    """(3): PlanUnjudgeable when the analysis could never judge the first step: no worker
    known for the alias (unless ``allow_no_fleet``, which the caller audits), or fewer
    candidate workers at the first step than ``min_workers``."""
    if not _judged(plan):
        return
    if fleet_size == 0:
        if allow_no_fleet:
            return
        raise PlanUnjudgeable(
            f"no worker has reported for {plan.repository}@{plan.alias} in the last 24 hours: "
            "the analysis could judge no step (no candidate worker, no evidence) and the "
            "rollout would hold at its first step; start the fleet (or a rehearsal fleet, "
            "python -m modelward.rehearsal fleet) and let it report first, or start anyway "
            "with --no-fleet-yet (audited as rollout.start.no_fleet)",
            detail={"alias": plan.alias, "fleet": 0, "override": "no_fleet_yet"},
        )
    need = int(plan.analysis.get("min_workers", DEFAULT_MIN_WORKERS))
    first = plan.steps[0]
    holds = cohort_size(first, fleet_size) if plan.fleet is not None else first * fleet_size // 100
    if holds < need:
        raise PlanUnjudgeable(
            f"the first step ({first}%) holds {holds} of the {fleet_size} worker(s) that "
            f"report for {plan.repository}@{plan.alias}, fewer than the {need} candidate "
            "worker(s) the analysis needs (min_workers): its analysis could never pass it "
            "(start at a larger first step, or lower min_workers)",
            detail={
                "first_step": first,
                "fleet": fleet_size,
                "candidate_workers": holds,
                "min_workers": need,
            },
        )


def cohorts_json(plan: RolloutPlan, fleet_size: int | None = None) -> dict[str, Any]:
    """(4): ``rule`` (``fleet``: the plan's list; ``buckets``: hash buckets), ``fleet``
    (the workers counted) and per step its ``weight`` and candidate ``workers`` (with
    buckets, the expected number, rounded down; unknown without a fleet size)."""
    if plan.fleet is not None:
        size = len(plan.fleet)
        steps = [{"weight": w, "workers": cohort_size(w, size)} for w in plan.steps]
        return {"rule": "fleet", "fleet": size, "steps": steps}
    if not fleet_size:
        unknown: list[dict[str, int | None]] = [{"weight": w, "workers": None} for w in plan.steps]
        return {"rule": "buckets", "fleet": 0, "steps": unknown}
    steps = [{"weight": w, "workers": w * fleet_size // 100} for w in plan.steps]
    return {"rule": "buckets", "fleet": fleet_size, "steps": steps}
