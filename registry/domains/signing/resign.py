"""Re-signing a delegated role with the keys its delegation names next (``trust resign``;
docs/tuf.md#keys)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.metadata import Delegations

from modelward.attest.tuf import (
    alias_path,
)
from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.proposals import proposal_json
from modelward.registry.domains.signing.tuf.proposals import (
    RESIGN_TARGET,
    TARGETS_ROLE,
    NextDelegation,
    delegated_role_for,
    propose_changes,
)
from modelward.registry.domains.signing.tuf.repository import (
    MetadataRepository,
)
from modelward.registry.domains.signing.tuf.rotation import (
    wanted_delegations,
)
from modelward.registry.domains.signing.tuf.tables import TufProposal
from modelward.registry.errors import Conflict, NotFound


def next_delegation(
    session: Session, state: AppState, repo: MetadataRepository, proposal: TufProposal, keyid: str
) -> NextDelegation | None:
    """What a proposal signed by ``keyid`` is checked against when its role still names an
    older key of a signer (``signing.tuf.rotation`` holds it): the role as the database
    asks for it (its signers' newest keys) and the current delegations with it, which
    publishing the proposal signs at once, re-signing every target of the role. For a
    re-signing proposal (``RESIGN_TARGET``) always; for any other, when ``keyid`` is a
    signer's newest key the role does not name yet (a targets key offline: not at all).
    None otherwise. Raises NotFound (a re-signed role no longer delegated), Conflict
    (re-signing with the targets key offline)."""
    resign = proposal.target == RESIGN_TARGET
    if proposal.state != "pending" or proposal.role == TARGETS_ROLE:
        return None
    current = repo.targets().delegations
    named = (current.roles or {}).get(proposal.role) if current is not None else None
    if not resign and (
        named is None or keyid in named.keyids or not repo.signers.get(TARGETS_ROLE)
    ):
        return None
    keys = trust_of(state.settings).keys
    unheld = wanted_delegations(session, repo, keys, state.default_policy_yaml, hold=False)
    role = (unheld.roles or {}).get(proposal.role)
    if not resign and (role is None or keyid not in role.keyids):
        return None
    if role is None or current is None or named is None:
        raise NotFound(f"role {proposal.role} is no longer delegated: nothing to re-sign")
    if not repo.signers.get(TARGETS_ROLE):
        raise Conflict(
            f"re-signing role {proposal.role} switches it to its signers' new keys in "
            "top-level targets, and the targets key is offline: sign the pending targets "
            "proposal instead (`modelward trust pending`, docs/tuf.md#rotating-a-signers-key)",
            code="targets_key_offline",
        )
    roles = {**(current.roles or {}), role.name: role}
    merged = {**(current.keys or {}), **(unheld.keys or {})}
    used = {k for r in roles.values() for k in r.keyids}
    delegated = Delegations(
        keys={k: v for k, v in sorted(merged.items()) if k in used}, roles=roles
    )
    return NextDelegation(role, delegated)


def propose_resign(
    state: AppState, *, repo_name: str, alias: str | None, caller: Caller
) -> dict[str, Any]:
    """Re-sign what ``repo_name``'s roles (``alias``: the role deciding it) sign now with
    their signers' newest keys: one proposal per role whose delegation still names an
    older key of a signer (``signing.tuf.rotation`` held it, so that its signed version
    stays verifiable), of the role's next version with its targets as they are. Its
    signers sign it (``modelward trust resign --key NEW``); at the role's threshold it is
    published with the role delegated to the new keys, in one step. A pending one is
    reused. ``proposals``: what to sign; ``current``: the roles that name the newest keys
    already (nothing to re-sign). Audited as ``tuf.resign``."""
    from modelward.attest.tuf import protected_role
    from modelward.registry.domains.repos.service import get_repo

    with state.db.write() as session:
        # the read rule first: a name the caller may not read is missing (and never parsed)
        repo_name = get_repo(session, repo_name, caller).name
        repo = repository(session, state)
        if TARGETS_ROLE not in repo.store.latest_versions():
            raise NotFound("the registry has no top-level targets yet: nothing to re-sign")
        delegations = repo.targets().delegations
        named = (delegations.roles or {}) if delegations is not None else {}
        if alias is not None:
            roles = [delegated_role_for(repo, alias_path(repo_name, alias)).name]
        else:
            roles = [r for r in named if r.startswith(protected_role(repo_name, ""))]
        if not roles:
            raise NotFound(f"no TUF role signs {repo_name}'s aliases yet: nothing to re-sign")
        keys = trust_of(state.settings).keys
        unheld = wanted_delegations(session, repo, keys, state.default_policy_yaml, hold=False)
        made: list[TufProposal] = []
        current: list[str] = []
        for role in sorted(roles):
            wanted = (unheld.roles or {}).get(role)
            if wanted is None or sorted(wanted.keyids) == sorted(named[role].keyids):
                current.append(role)
                continue
            pending = session.scalar(
                select(TufProposal).where(
                    TufProposal.role == role,
                    TufProposal.target == RESIGN_TARGET,
                    TufProposal.state == "pending",
                )
            )
            made.append(
                pending
                if pending is not None
                else propose_changes(
                    session,
                    repo,
                    role,
                    {},
                    proposer_id=caller.id,
                    reason="re-sign the role's targets with its signers' new keys",
                    label=RESIGN_TARGET,
                )
            )
        append(
            session,
            actor=caller.name,
            action="tuf.resign",
            subject=repo_name if alias is None else f"{repo_name}@{alias}",
            details={"proposals": [p.id for p in made], "current": current},
        )
        proposals = []
        for p in made:
            shown = proposal_json(session, repo, p)
            wanted = (unheld.roles or {})[p.role]  # who signs it: the role as it will be
            shown.update(keyids=sorted(wanted.keyids), threshold=wanted.threshold)
            proposals.append(shown)
        return {"proposals": proposals, "current": current}
