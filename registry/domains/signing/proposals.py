"""Proposals: the next version of the role that decides an alias or the quarantine, and
how they are listed (docs/tuf.md#proposals)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from tuf.api.metadata import Metadata, Targets
from tuf.api.serialization import DeserializationError

from modelward.attest.rollout.paths import rollout_path
from modelward.attest.tuf import (
    QUARANTINE_ROLE,
    REASON_WITHHELD,
    WITHHELD_PRIVATE,
    alias_path,
    online_role,
    open_role,
    proposal_changes,
    quarantine_path,
)
from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.auth.authz import READER
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.quarantine.service import held_where_readable
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.publish import sync
from modelward.registry.domains.signing.tuf.bootstrap import (
    delegated_as_wanted,
)
from modelward.registry.domains.signing.tuf.keys import (
    ALIAS_KEY,
)
from modelward.registry.domains.signing.tuf.proposals import (
    ADOPT_TARGET,
    TARGETS_ROLE,
    add_signature,
    delegated_role_for,
    propose_target,
    signing_role,
)
from modelward.registry.domains.signing.tuf.repository import (
    MetadataRepository,
)
from modelward.registry.domains.signing.tuf.rotation import (
    signed_version,
)
from modelward.registry.domains.signing.tuf.tables import TufProposal, proposal_row
from modelward.registry.errors import Conflict, NotFound, RegistryError
from modelward.registry.models import Principal, SigningKey, utcnow

PROPOSAL_PAGE = 200
# A reader granted nothing (no id matches a principal row): what every principal the
# quarantine role is served to may read, by the domain's own read rule (auth.authz READ)
EVERY_READER = Caller(id=0, name="(every reader)", role=READER)


def supersede(session: Session, target: str) -> None:
    """Mark every pending proposal for ``target`` superseded (a newer one replaces it)."""
    for old in session.scalars(
        select(TufProposal).where(TufProposal.target == target, TufProposal.state == "pending")
    ):
        old.state, old.decided_at = "superseded", utcnow()


def sign_online(
    session: Session, state: AppState, repo: MetadataRepository, proposal: TufProposal
) -> None:
    """Add the registry's online alias key's signature to ``proposal`` (an online role's)."""
    signer = trust_of(state.settings).keys.signer(ALIAS_KEY)
    signature = signer.sign(Metadata[Targets].from_bytes(proposal.payload).signed_bytes)
    add_signature(session, repo, proposal, keyid=signature.keyid, signature_hex=signature.signature)


def pending_proposal_id(session: Session, target: str, to_digest: str) -> int | None:
    """The newest pending proposal setting ``target`` to ``to_digest``, or None."""
    found = session.scalar(
        select(TufProposal.id)
        .where(
            TufProposal.target == target,
            TufProposal.to_digest == to_digest,
            TufProposal.state == "pending",
        )
        .order_by(TufProposal.id.desc())
        .limit(1)
    )
    return None if found is None else int(found)


def proposal_state(session: Session, proposal_id: int | None) -> str | None:
    """The state of proposal ``proposal_id`` (pending, published, ...), or None."""
    row = proposal_row(session, proposal_id) if proposal_id else None
    return None if row is None else row.state


def pending_count(session: Session) -> int:
    """How many proposals wait for their signers."""
    return int(
        session.scalar(
            select(func.count()).select_from(TufProposal).where(TufProposal.state == "pending")
        )
        or 0
    )


def propose_alias(
    session: Session,
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    digest: str,
    manifest: bytes,
    from_digest: str | None,
    caller: Caller,
    reason: str | None,
) -> TufProposal | None:
    """Propose ``repo_name@alias`` -> ``digest`` to the role that decides it; an online
    role is signed and published at once. None when no role is delegated the alias yet
    (a targets proposal waits for the admins)."""
    repo = repository(session, state)
    keys = trust_of(state.settings).keys
    if not delegated_as_wanted(session, repo, keys, state.default_policy_yaml, repo_name):
        sync(session, state, repo, proposer_id=caller.id)
    path = alias_path(repo_name, alias)
    try:
        role = delegated_role_for(repo, path)
    except NotFound:
        return None
    supersede(session, path)
    proposal = propose_target(
        session,
        repo,
        path=path,
        data=manifest,
        proposer_id=caller.id,
        reason=reason,
        from_digest=from_digest,
        to_digest=digest,
        delegated_role=role,
    )
    if role.name == online_role(repo_name):
        sign_online(session, state, repo, proposal)
    return proposal


def propose_quarantine(
    session: Session,
    state: AppState,
    *,
    digest: str,
    manifest: bytes,
    caller: Caller,
    reason: str,
) -> TufProposal:
    """Propose adding ``digest`` to the quarantine role (reviewers sign, threshold 1). The
    role is served to every reader, so the target's signed ``custom`` carries
    ``{"reason": reason}`` only when a repository every reader may read (a public one) holds
    the digest; for a digest only private repositories hold it is ``{"reason_withheld":
    "private"}``: workers learn the digest, and nothing of its reason, repository or
    reviewer (docs/tuf.md#private-repositories)."""
    repo = repository(session, state)
    sync(session, state, repo, proposer_id=caller.id)
    path = quarantine_path(digest)
    supersede(session, path)
    public = held_where_readable(session, digest, EVERY_READER)
    return propose_target(
        session,
        repo,
        path=path,
        data=manifest,
        proposer_id=caller.id,
        reason=reason,
        from_digest=None,
        to_digest=digest,
        custom={"reason": reason} if public else {REASON_WITHHELD: WITHHELD_PRIVATE},
    )


def alias_of(proposal: TufProposal) -> tuple[str, str] | None:
    """(repository, alias) of a proposal that moves one alias; None for any other (an
    adoption's target is ``ADOPT_TARGET``: ``moves_of`` reads its aliases)."""
    repo, sep, alias = proposal.target.partition("/aliases/")
    return (repo, alias) if sep and proposal.role != TARGETS_ROLE else None


def moves_of(repo: MetadataRepository, proposal: TufProposal) -> list[tuple[str, str, str]]:
    """(repository, alias, digest) of every alias move publishing ``proposal`` makes: its
    one alias, or for an adoption every target its payload sets against the role version
    it was made from (its newest that verifies), read from the bytes to be signed
    (attest.tuf.proposal_changes).
    Raises Conflict for an adoption that changes anything but alias targets."""
    target = alias_of(proposal)
    if target is not None:
        return [(target[0], target[1], proposal.to_digest)] if proposal.to_digest else []
    # a rollout plan (docs/rollouts.md): its candidate is decided as a move by its proposer
    repo_name, sep, alias = proposal.target.partition("/rollouts/")
    if sep and proposal.role != TARGETS_ROLE:
        return [(repo_name, alias, proposal.to_digest)] if proposal.to_digest else []
    if proposal.target != ADOPT_TARGET or proposal.role == TARGETS_ROLE:
        return []
    # the version it was made from: the role's newest that verifies now (a version whose
    # signatures no longer count is not what workers read, so its aliases are adopted too)
    if proposal.state == "pending":
        signed_base = signed_version(repo, proposal.role)
        base = signed_base.to_bytes() if signed_base is not None else None
    else:  # decided: what it changed then, against the version before it
        base = repo.store.read(proposal.role, proposal.version - 1)
    moves = []
    for change in proposal_changes(proposal.payload, base):
        repo_name, sep, alias = change.path.partition("/aliases/")
        if not sep or change.after is None:
            raise Conflict(
                f"proposal {proposal.id} adopts aliases but changes {change.path} "
                f"({change.before} -> {change.after}): refused",
                detail={"proposal": proposal.id, "path": change.path},
            )
        moves.append((repo_name, alias, change.after))
    return moves


@contextmanager
def naming(
    proposal: TufProposal, target: tuple[str, str] | None, repo_name: str, alias: str
) -> Iterator[None]:
    """A refusal of one alias an adoption signs, answered naming the alias (same error
    class, status and code; ``detail.alias``); a single move's refusal as it is."""
    try:
        yield
    except RegistryError as exc:
        if target is not None:
            raise
        ref = f"{repo_name}@{alias}"
        detail = exc.detail if isinstance(exc.detail, dict) else {"detail": exc.detail}
        raise type(exc)(
            f"proposal {proposal.id} adopts {ref}, refused: {exc.message}",
            detail={**detail, "alias": ref, "proposal": proposal.id},
            code=exc.code,
        ) from exc


def is_protected(role: str, repo_name: str) -> bool:
    return role not in (QUARANTINE_ROLE, TARGETS_ROLE, online_role(repo_name), open_role(repo_name))


def proposal_json(
    session: Session, repo: MetadataRepository, p: TufProposal, *, payload: bool = False
) -> dict[str, Any]:
    md = Metadata[Targets].from_bytes(p.payload)
    try:
        _role, keyids, threshold = signing_role(repo, p)
    except NotFound:
        keyids, threshold = [], 0
    signed = [s["keyid"] for s in json.loads(p.signatures)]
    owners = dict(
        session.execute(
            select(SigningKey.keyid, SigningKey.principal_id).where(SigningKey.keyid.in_(signed))
        ).all()
    )
    names = dict(
        session.execute(
            select(Principal.id, Principal.name).where(
                Principal.id.in_({p.created_by, *owners.values()})
            )
        ).all()
    )
    target = alias_of(p)
    plan_repo, plan_sep, plan_alias = p.target.partition("/rollouts/")
    if target is None and plan_sep and p.role != TARGETS_ROLE:
        target = (plan_repo, plan_alias)  # a rollout plan of the alias (docs/rollouts.md)
    out: dict[str, Any] = {
        "id": p.id,
        "role": p.role,
        "version": p.version,
        "target": p.target,
        "kind": _kind(p, plan=bool(plan_sep)),
        "repository": target[0] if target else None,
        "alias": target[1] if target else None,
        "from_digest": p.from_digest,
        "to_digest": p.to_digest,
        "reason": p.reason,
        "state": p.state,
        "proposed_by": names.get(p.created_by),
        "created_at": iso(p.created_at),
        "decided_at": iso(p.decided_at),
        "expires": iso(md.signed.expires),
        "signatures": [{"keyid": k, "signer": names.get(owners.get(k, -1))} for k in signed],
        "threshold": threshold,
        "keyids": keyids,
    }
    if p.target == ADOPT_TARGET and p.role != TARGETS_ROLE:
        try:
            adopted = moves_of(repo, p)
        except (Conflict, ValueError, DeserializationError):  # shown, never a 500
            adopted = []
        out["adopts"] = [{"alias": f"{r}@{a}", "digest": d} for r, a, d in adopted]
    if payload:
        out["payload"] = base64.b64encode(p.payload).decode()
    return out


def _kind(p: TufProposal, *, plan: bool) -> str:
    """What a proposal is, for display: ``move``, ``rollout plan``, ``quarantine``,
    ``delegations`` (top-level targets), ``adoption`` or ``resign``."""
    if p.role == TARGETS_ROLE:
        return "delegations"
    if p.target == ADOPT_TARGET:
        return "adoption"
    if p.target == "resign":
        return "resign"
    if plan:
        return "rollout plan"
    if p.role == QUARANTINE_ROLE:
        return "quarantine"
    return "move"


def list_proposals(
    session: Session,
    state: AppState,
    *,
    pending_only: bool,
    repo_name: str | None,
    alias: str | None,
) -> list[dict[str, Any]]:
    query = select(TufProposal).order_by(TufProposal.id.desc()).limit(PROPOSAL_PAGE)
    if pending_only:
        query = query.where(TufProposal.state == "pending")
    if repo_name is not None:  # its alias moves and its rollout plans
        if alias:
            query = query.where(
                TufProposal.target.in_(
                    (alias_path(repo_name, alias), rollout_path(repo_name, alias))
                )
            )
        else:
            query = query.where(
                TufProposal.target.startswith(f"{repo_name}/aliases/")
                | TufProposal.target.startswith(f"{repo_name}/rollouts/")
            )
    repo = repository(session, state)
    return [proposal_json(session, repo, p) for p in session.scalars(query)]


def get_proposal(session: Session, state: AppState, proposal_id: int) -> dict[str, Any]:
    row = proposal_row(session, proposal_id)
    if row is None:
        raise NotFound(f"no TUF proposal {proposal_id}")
    return proposal_json(session, repository(session, state), row, payload=True)
