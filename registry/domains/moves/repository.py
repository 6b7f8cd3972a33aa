"""The database reads an alias move is decided on (attest.alias_decision decides, without I/O).

Authorization is ``auth.authz.may``: whether the mover publishes here (a rule that lets
publishers move an alias means publishers *of this repository*), and who approves (the
approvals query keeps only principals that may approve now). In the order of the decision:

  (1) ``read_rule``: the repository, its current policy, the policy's alias rule for the
      alias and the mover's facts (name, role, ``may(caller, PUBLISH, repo)``);
  (2)-(6) ``read_facts``: the live bundle and its stored attestations (judged by the bundle
      verifier, outside the transaction), the digest's quarantine, the evidence signers
      (moves.evidence), the approvers that count, the bundle on the alias now and every
      earlier target.

``fresh_facts`` reads (2), (6) and the alias's state again inside the transaction that
moves it (a quarantine or a withdrawal that landed meanwhile counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.alias_decision import Mover
from modelward.attest.manifest import parse_manifest
from modelward.attest.policy import alias_rule_for
from modelward.registry.domains._state import AppState
from modelward.registry.domains.attestations.repository import live_attestations
from modelward.registry.domains.auth.authz import APPROVER_ROLES, Action, may
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.bundles.service import live_bundle
from modelward.registry.domains.moves.evidence import evidence_signers
from modelward.registry.domains.quarantine.service import quarantine_json, quarantine_of
from modelward.registry.domains.repos.service import get_repo, repo_policy
from modelward.registry.errors import RegistryError
from modelward.registry.models import Alias, AliasHistory, Approval, Bundle, Principal, Repository

if TYPE_CHECKING:
    from modelward.attest.manifest import Manifest
    from modelward.attest.policy import AliasRule, Policy

__all__ = [
    "LARGEST_ALIAS_VERSION",
    "AliasRowRefused",
    "BundleFacts",
    "RuleFacts",
    "alias_row",
    "approvers",
    "earlier_targets",
    "fresh_facts",
    "read_facts",
    "read_rule",
]


@dataclass(frozen=True)
class RuleFacts:
    """Step (1)'s inputs."""

    repo: Repository
    policy: Policy
    rule: AliasRule | None
    mover: Mover


@dataclass(frozen=True)
class BundleFacts:
    """Steps (2)-(6)'s inputs, and the bundle to judge for (3)."""

    manifest: Manifest
    attestations: list[bytes]
    trust: verdict.Trust
    request: dict[str, Any]  # the MoveRequest fields read here


# the largest version a move can write: ``aliases.version`` and ``alias_history.version``
# are INTEGER columns (32-bit on PostgreSQL; SQLite stores up to 2**63 - 1). A row at or past
# it leaves the next move (``Alias.version + 1``) no version to write
LARGEST_ALIAS_VERSION = 2**31 - 1


class AliasRowRefused(RegistryError):  # noqa: N818 - named after what it says
    """A stored ``aliases`` row no move can follow: its version leaves none after it (a
    database writer's row at 2**31 - 1, or 2**63 - 1 on SQLite). Refused when it is read,
    naming the row, instead of every move answering that the caller's
    ``expected_version`` is stale."""

    status = 503
    code = "alias_row_refused"

    def __init__(self, repo: str, row: Alias) -> None:
        why = f"no move can follow it (the largest version is {LARGEST_ALIAS_VERSION})"
        super().__init__(
            f"alias {repo}@{row.name}: the stored row (id {row.id}) at version {row.version} "
            f"is refused: {why}; a database writer's row: set its version back to the one "
            "its history names",
            detail={"repository": repo, "alias": row.name, "version": row.version, "why": why},
        )


def alias_row(session: Session, repo: Repository, alias: str) -> Alias | None:
    """The alias's row; ``AliasRowRefused`` when its version leaves no next move."""
    row = session.execute(
        select(Alias).where(Alias.repo_id == repo.id, Alias.name == alias)
    ).scalar_one_or_none()
    if row is not None and row.version >= LARGEST_ALIAS_VERSION:
        raise AliasRowRefused(repo.name, row)
    return row


def earlier_targets(session: Session, row: Alias | None) -> frozenset[str]:
    """Every digest the alias ever pointed at (its history rows)."""
    if row is None:
        return frozenset()
    query = select(AliasHistory.to_digest).where(AliasHistory.alias_id == row.id)
    return frozenset(session.execute(query).scalars())


def approvers(session: Session, bundle_id: int, alias: str, exclude: set[int]) -> list[str]:
    """Who approved the bundle for ``alias`` and still counts: not withdrawn, the approver
    one that may approve now (``authz.APPROVER_ROLES``: a principal's current role,
    whatever token it used) and not disabled, and not in ``exclude`` (the publisher, the
    mover)."""
    rows = session.execute(
        select(Principal.id, Principal.name)
        .join(Approval, Approval.principal_id == Principal.id)
        .where(
            Approval.bundle_id == bundle_id,
            Approval.alias == alias,
            Approval.withdrawn_at.is_(None),
            Principal.role.in_(APPROVER_ROLES),
            Principal.disabled_at.is_(None),
        )
    ).all()
    return sorted({name for pid, name in rows if pid not in exclude})


def read_rule(
    session: Session,
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    caller: Caller,
) -> RuleFacts:
    """(1): the repository, its policy, the alias rule and the mover's facts."""
    repo = get_repo(session, repo_name, caller)
    policy = repo_policy(repo, state.default_policy_yaml)
    publishes_here = may(session, caller, Action.PUBLISH, repo)
    # a publisher's role holds only in a repository it may publish to; any other role holds
    holds = publishes_here or caller.role != "publisher"
    mover = Mover(name=caller.name, role=caller.role, role_holds_here=holds)
    return RuleFacts(repo, policy, alias_rule_for(policy, alias), mover)


def read_facts(
    session: Session,
    state: AppState,
    rule: RuleFacts,
    *,
    alias: str,
    digest: str,
    caller: Caller,
) -> BundleFacts:
    """(2)-(6): what the decision needs besides the bundle verifier's report. Raises
    NotFound (no such bundle here) and Gone (deleted)."""
    repo, policy = rule.repo, rule.policy
    bundle = live_bundle(session, repo, digest)
    stored = [a.data for a in session.execute(live_attestations(bundle.id)).scalars()]
    trust = verdict.trust_for(session, repo, policy, state)
    vouches = evidence_signers(
        session, repo, policy, publisher_id=bundle.created_by, mover_id=caller.id
    )
    request: dict[str, Any] = {
        "evidence": vouches.reason_against,
        "evidence_policy": policy.evidence.model_dump(),
        **fresh_facts(session, repo, bundle, alias=alias, caller=caller),
    }
    return BundleFacts(parse_manifest(bytes(bundle.manifest)), stored, trust, request)


def fresh_facts(
    session: Session, repo: Repository, bundle: Bundle, *, alias: str, caller: Caller
) -> dict[str, Any]:
    """(2), (5), (6): the quarantine, the alias's state and history, the approvers."""
    held = quarantine_of(session, bundle.digest)
    current = alias_row(session, repo, alias)
    return {
        "quarantine": quarantine_json(session, held, caller) if held is not None else None,
        "approvers": tuple(approvers(session, bundle.id, alias, {bundle.created_by, caller.id})),
        "current": current.digest if current is not None else None,
        "history": earlier_targets(session, current),
    }
