"""Which policy judges a repository's bundles, and the org floor it must meet.

``repo_policy`` is the one place the registry gets a repository's policy for a decision (push,
alias move, attach): the repository's own (self-contained) policy, else the operator's
``--policy``, else the packaged default — and only when that policy still meets its org's
floor (``attest.policy.require_meets_floor``). A policy that stopped meeting it (the operator
changed ``--policy``) refuses every decision with 409 ``policy_below_floor`` until an admin
replaces the repository's policy. Writes check the floor first: ``require_floor`` (400).
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from pydantic import ValidationError
from sqlalchemy.orm import Session, object_session

from modelward.attest.errors import PolicyError
from modelward.attest.policy import PolicyBelowFloor, PolicyFloor, load_policy, require_meets_floor
from modelward.attest.policy._rules import require_distinct_role_patterns, require_role_names_fit
from modelward.registry.errors import BadRequest, Conflict
from modelward.registry.models import Org, Repository

if TYPE_CHECKING:
    from modelward.attest.policy import Policy

__all__ = [
    "FloorNotMet",
    "PolicyBelowFloorError",
    "builtin_default_policy",
    "dump_floor",
    "effective_policy",
    "load_floor",
    "parse_policy",
    "parse_stored_policy",
    "repo_policy",
    "require_floor",
]


class PolicyBelowFloorError(BadRequest):
    """400: a policy sent to the registry is weaker than its org's floor."""

    code = "policy_below_floor"


class FloorNotMet(Conflict):
    """409: a repository's policy no longer meets its org's floor (or a raised floor would
    leave repositories below it)."""

    code = "policy_below_floor"


def builtin_default_policy() -> str:
    policies = resources.files("modelward.policies")
    return policies.joinpath("default.yaml").read_text(encoding="utf-8")


def parse_policy(text: str, source: str = "policy", repository: str | None = None) -> Policy:
    """Validate a policy document (for ``repository``, or any: the operator's default);
    raises BadRequest (invalid_policy) naming the field."""
    try:
        policy = load_policy(text.encode(), source=source)
        require_distinct_role_patterns(policy, source)  # each protected rule: one TUF role
        require_role_names_fit(
            policy, source, repository=repository
        )  # ... whose name fits its columns and files
        return policy
    except PolicyError as exc:
        raise BadRequest(str(exc), code="invalid_policy") from exc
    except RecursionError as exc:
        raise BadRequest(f"{source}: nested too deeply", code="invalid_policy") from exc


def _file_references(policy: Policy) -> list[str]:
    """The fields of ``policy`` that name a file (not inline PEM)."""
    fields = [f"signers.keys[{i}].path" for i, k in enumerate(policy.signers.keys) if k.path]
    for i, ca in enumerate(policy.signers.cas):
        for part in ("roots", "intermediates"):
            fields += [
                f"signers.cas[{i}].{part}[{j}]"
                for j, ref in enumerate(getattr(ca, part))
                if not ref.lstrip().startswith("-----BEGIN")
            ]
    fields += [
        f"signers.identities[{i}].trust_root"
        for i, ident in enumerate(policy.signers.identities)
        if ident.trust_root is not None
    ]
    return fields


def parse_stored_policy(text: str, source: str = "policy", repository: str | None = None) -> Policy:
    """Validate a policy sent through the API: it must be self-contained.

    A stored policy is read by the server, so a file path in it would make the server open
    its own files on a publisher's say (an existence oracle, or worse). Keys and certificates
    must be inline PEM; ``trust_root`` (a file) is refused: identities use the public-good
    root. Raises BadRequest (invalid_policy) naming every field at fault.
    """
    policy = parse_policy(text, source, repository)
    refs = _file_references(policy)
    if refs:
        raise BadRequest(
            f"{source}: {refs[0]}: a policy stored in the registry must be self-contained: "
            "give keys and certificates as inline PEM, not file paths (trust_root is refused)",
            detail={"fields": refs},
            code="invalid_policy",
        )
    return policy


def effective_policy(
    policy_yaml: str | None,
    default_policy_yaml: str | None,
    source: str,
    repository: str | None = None,
) -> Policy:
    """A repository's own (self-contained) policy, else the operator's, else the packaged
    default. Raises BadRequest (invalid_policy)."""
    if policy_yaml:
        return parse_stored_policy(policy_yaml, source, repository)
    return parse_policy(default_policy_yaml or builtin_default_policy(), source, repository)


def load_floor(text: str | None) -> PolicyFloor | None:
    """An org's stored floor (None: no floor). A stored floor that no longer parses is an
    error, never "no floor" (fail closed): RuntimeError, a 500."""
    if text is None:
        return None
    try:
        return PolicyFloor.model_validate_json(text)
    except ValidationError as exc:
        raise RuntimeError("an org's stored floor does not parse") from exc


def dump_floor(floor: PolicyFloor | None) -> str | None:
    return None if floor is None else floor.model_dump_json()


def require_floor(policy: Policy, floor: PolicyFloor | None, source: str) -> None:
    """Refuse (400 ``policy_below_floor``, every shortfall in ``detail``) a policy weaker
    than ``floor``."""
    try:
        require_meets_floor(policy, floor, source=source)
    except PolicyBelowFloor as exc:
        raise PolicyBelowFloorError(
            str(exc), detail={"shortfalls": [str(s) for s in exc.shortfalls]}
        ) from exc


def repo_policy(repo: Repository, default_policy_yaml: str | None) -> Policy:
    """The policy that judges ``repo``'s bundles now (see the module docstring).

    ``repo`` must belong to an open session (its org's floor is read through it). Raises
    BadRequest (invalid_policy) and FloorNotMet (409 ``policy_below_floor``).
    """
    source = f"{repo.name} policy"
    policy = effective_policy(repo.policy_yaml, default_policy_yaml, source, repo.name)
    session: Session | None = object_session(repo)
    if session is None:
        raise RuntimeError("repo_policy needs a repository of an open session")
    org = session.get(Org, repo.org_id)
    if org is None:  # the foreign key rules this out; never read it as "no floor"
        raise RuntimeError(f"repository {repo.name} has no org")
    try:
        require_meets_floor(policy, load_floor(org.floor), source=source)
    except PolicyBelowFloor as exc:
        raise FloorNotMet(
            f"{exc}; an admin must replace the policy of {repo.name} "
            f"(PUT /v1/repos/{repo.name}/policy) before it can be used",
            detail={"shortfalls": [str(s) for s in exc.shortfalls]},
        ) from exc
    return policy
