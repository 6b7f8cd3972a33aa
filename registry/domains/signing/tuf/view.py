"""The registry's one view of its signed state (docs/tuf.md, docs/rollouts.md#signed-state).

Every domain reads what is signed through here, never from its own rows: the aliases a
repository's roles sign (``SignedView.aliases``), a rollout's plan (``signed_plan``: the
target ``ORG/NAME/rollouts/ALIAS`` in the role that decides the alias, at that role's
newest version that verifies) and its step (``signed_step``: the target
``ORG/NAME/rollout-steps/ALIAS`` in ``ORG:NAME@=rollout``). A row a database writer edited
(a weight, an index, a digest, a role version that does not verify) therefore moves nothing.

``SignedView`` is versioned by the exact bytes it verified, and its one cache is the app
state's (``AppState.signed``); nothing here is kept per module.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from sqlalchemy.orm import Session
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import Root, TargetFile

from modelward.attest.rollout import PlanInvalid, RolloutPlan, RolloutStep, parse_step
from modelward.attest.rollout.paths import rollout_path, rollout_role, signed_custom, step_path
from modelward.attest.rollout.signed import plan_in
from modelward.attest.tuf import protected_role
from modelward.registry.domains.signing.tuf.proposals import delegated_role_for
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.store import SessionStore
from modelward.registry.errors import NotFound

__all__ = ["SignedView", "signed_plan", "signed_step"]

# the bytes a repository's aliases were verified from: its name and the digest of every
# newest role row involved (top-level targets and the repository's roles)
_Version = tuple[str, bytes]


class SignedView:
    """The signed state as the TUF roles sign it, each answer kept by the exact bytes it
    was verified from (so a new signed version is a new key, and a forged row verifies to
    nothing). One per app state; thread-safe; at most ``capacity`` answers kept."""

    def __init__(self, capacity: int = 1024) -> None:
        self._aliases: OrderedDict[_Version, dict[str, str]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def aliases(self, session: Session, repo_name: str) -> dict[str, str]:
        """alias -> digest as the repository's TUF roles sign them: each role at its newest
        version that verifies against its delegation (a forged row signs nothing). Kept by
        the exact bytes involved, so ``alias get`` (a hot path) costs one query until
        something changes."""
        prefix = protected_role(repo_name, "")
        store = SessionStore(session)
        rows = store.latest_rows(prefix)
        seal = hashlib.sha256()
        for role, (version, data) in sorted(rows.items()):
            seal.update(f"{role}\0{version}\0{len(data)}\0".encode())
            seal.update(data)
        key = (repo_name, seal.digest())
        with self._lock:
            if key in self._aliases:
                self._aliases.move_to_end(key)
                return dict(self._aliases[key])
        roles = sorted(r for r in rows if r.startswith(prefix))
        signed = _signed_aliases(MetadataRepository(store, {}), repo_name, roles)
        with self._lock:
            self._aliases[key] = signed
            while len(self._aliases) > self._capacity:
                self._aliases.popitem(last=False)
        return dict(signed)


def _signed_aliases(repo: MetadataRepository, repo_name: str, roles: list[str]) -> dict[str, str]:
    head = f"{repo_name}/aliases/"
    signed: dict[str, str] = {}
    if Root.type not in repo.store.latest_versions():
        return signed
    delegations = repo.targets().delegations
    if delegations is None:
        return signed
    for role in roles:
        try:
            md = repo.verified(role)
        except UnsignedMetadataError:
            continue
        for path, target in (md.signed.targets if md is not None else {}).items():
            # an alias counts only in the role a worker's lookup reaches first
            deciding = next((name for name, _ in delegations.get_roles_for_target(path)), None)
            if path.startswith(head) and deciding == role:
                signed[path[len(head) :]] = "sha256:" + target.hashes.get("sha256", "")
    return signed


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
