"""Reading a rollout's signed state from the registry's TUF repository (docs/rollouts.md).

The registry decides from what is signed, never from its own ``rollouts`` rows: the plan
is the target ``ORG/NAME/rollouts/ALIAS`` in the role that decides the alias, at that
role's newest version that verifies; the step the target ``ORG/NAME/rollout-steps/ALIAS``
in ``ORG:NAME@=rollout``. A row a database writer edited (a weight, an index, a digest)
therefore moves nothing.
"""

from __future__ import annotations

from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import TargetFile

from modelward.attest.rollout import (
    PlanInvalid,
    RolloutPlan,
    RolloutStep,
    parse_step,
)
from modelward.attest.rollout.paths import rollout_path, rollout_role, signed_custom, step_path
from modelward.attest.rollout.signed import plan_in
from modelward.registry.domains.signing.tuf.proposals import delegated_role_for
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.errors import NotFound

__all__ = ["signed_plan", "signed_step"]


def _target(repo: MetadataRepository, role: str, path: str) -> TargetFile | None:
    try:
        md = repo.verified(role)
    except UnsignedMetadataError:
        return None
    if md is None:
        return None
    target: TargetFile | None = md.signed.targets.get(path)
    return target


def signed_plan(repo: MetadataRepository, repo_name: str, alias: str) -> RolloutPlan | None:
    """The plan the alias's role signs now, or None (none signed, or not a plan)."""
    path = rollout_path(repo_name, alias)
    try:
        role = delegated_role_for(repo, path)
    except NotFound:
        return None
    try:
        return plan_in(_target(repo, role.name, path), repo=repo_name, alias=alias)
    except PlanInvalid:
        return None


def signed_step(
    repo: MetadataRepository, repo_name: str, alias: str
) -> tuple[RolloutStep, int] | None:
    """The step ``ORG:NAME@=rollout`` signs now for the alias, with that role's version."""
    role, path = rollout_role(repo_name), step_path(repo_name, alias)
    try:
        md = repo.verified(role)
    except UnsignedMetadataError:
        return None
    if md is None or path not in md.signed.targets:
        return None
    data = signed_custom(md.signed.targets[path], "step")
    if data is None:
        return None
    try:
        return parse_step(data), md.signed.version
    except PlanInvalid:
        return None
