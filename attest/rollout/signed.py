"""The rollout plan a signed target carries (docs/rollouts.md#signed-state). Pure.

``plan_in`` is the one reader of a plan out of signed targets: the registry's view of the
signed state, the console and a signer's own check of a proposal use it, so they cannot
disagree on which plan a target signs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelward.attest.rollout._errors import PlanInvalid
from modelward.attest.rollout._plan import RolloutPlan, parse_plan
from modelward.attest.rollout.paths import signed_custom

if TYPE_CHECKING:
    from tuf.api.metadata import TargetFile

__all__ = ["plan_in"]


def plan_in(
    target: TargetFile | None, *, repo: str | None = None, alias: str | None = None
) -> RolloutPlan:
    """The plan ``target`` signs. Raises PlanInvalid when:

    (1) its signed ``custom.plan`` is missing or not the bytes its sha256 names;
    (2) those bytes are not a valid plan (``parse_plan``);
    (3) ``repo``/``alias`` are given and the plan is for another alias.
    """
    # (1) the bytes the signature covers
    raw = signed_custom(target, "plan")
    if raw is None:
        raise PlanInvalid("custom.plan", "not the bytes its sha256 names")
    # (2) a valid plan (parse_plan's PlanInvalid names the field)
    plan = parse_plan(raw)
    # (3) for the alias asked about
    if repo is not None and (plan.repository, plan.alias) != (repo, alias):
        raise PlanInvalid("repository", f"the plan is for {plan.repository}@{plan.alias}")
    return plan
