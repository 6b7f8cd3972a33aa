"""Signing a proposal: whose signatures count, and publishing one that reaches its threshold
(docs/tuf.md#proposals)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.alias_decision import MoveRequest
from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.moves.service import (
    decide_again,
    record_move,
    require_move_allowed,
)
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.proposals import (
    alias_of,
    is_protected,
    moves_of,
    naming,
    proposal_json,
)
from modelward.registry.domains.signing.resign import next_delegation
from modelward.registry.domains.signing.tuf.proposals import (
    TARGETS_ROLE,
    Added,
    add_signature,
    signing_role,
)
from modelward.registry.domains.signing.tuf.tables import TufProposal, proposal_row
from modelward.registry.errors import Conflict, Forbidden, NotFound, RegistryError
from modelward.registry.models import Principal, SigningKey


def _excluded(
    session: Session,
    p: TufProposal,
    moves: list[tuple[str, str, str]],
    default_policy_yaml: str | None,
) -> dict[int, str]:
    """The two-person rule of protected aliases: not the proposer, not the publisher of a
    bundle the proposal moves an alias to (for an adoption: of any adopted bundle)."""
    from modelward.registry.models import Bundle, Repository

    target = alias_of(p)
    repos = {m[0] for m in moves} | ({target[0]} if target is not None else set())
    if not any(is_protected(p.role, r) for r in repos):
        return {}
    adoption = target is None and "/rollouts/" not in p.target  # a plan is one move
    excluded = {
        p.created_by: "the principal who proposed this adoption"
        if adoption
        else "the principal who proposed this move"
    }
    for repo_name, alias, digest in moves:
        publisher = session.scalar(
            select(Bundle.created_by)
            .join(Repository, Repository.id == Bundle.repo_id)
            .where(Repository.name == repo_name, Bundle.digest == digest)
        )
        if publisher is not None:
            excluded.setdefault(
                publisher,
                f"the publisher of {digest}, adopted for {repo_name}@{alias}"
                if adoption
                else "the publisher of the bundle",
            )
        for evaluator in _evaluators(session, repo_name, alias, digest, default_policy_yaml):
            excluded.setdefault(
                evaluator,
                f"an evaluator of {digest} (the alias rule's distinct_from: evaluator)",
            )
    return excluded


def _evaluators(
    session: Session, repo_name: str, alias: str, digest: str, default_policy_yaml: str | None
) -> set[int]:
    """Who attached a live evaluation of ``digest`` in ``repo_name``, when the alias rule
    lists ``evaluator`` in ``distinct_from`` (docs/policy.md#alias-rules); else nobody. A
    policy that no longer loads excludes nobody more: its aliases sign nothing anyway."""
    from modelward.attest.policy import alias_rule_for
    from modelward.attest.statement import PredicateType
    from modelward.registry.models import Attestation, Bundle, Repository
    from modelward.registry.policy import repo_policy

    repo = session.scalar(select(Repository).where(Repository.name == repo_name))
    if repo is None:
        return set()
    try:
        rule = alias_rule_for(repo_policy(repo, default_policy_yaml), alias)
    except RegistryError:
        return set()
    if rule is None or "evaluator" not in rule.distinct_from:
        return set()
    return set(
        session.scalars(
            select(Attestation.created_by)
            .join(Bundle, Bundle.id == Attestation.bundle_id)
            .where(
                Bundle.repo_id == repo.id,
                Bundle.digest == digest,
                Attestation.predicate_type == PredicateType.EVALUATION,
                Attestation.is_live(),
            )
        )
    )


def sign_proposal(
    state: AppState, proposal_id: int, *, keyid: str, signature_hex: str, caller: Caller
) -> dict[str, Any]:
    """Add ``caller``'s signature (made with a key it registered; admins' root-listed keys
    for top-level targets) to a proposal and publish it at threshold. Audited as
    ``tuf.sign`` (and ``tuf.publish``); a published alias proposal moves the alias.

    Every alias move the proposal makes (its one alias, or each alias an adoption signs) is
    decided as a move by its proposer (attest.alias_decision, steps (1) to (5); the
    signatures are the approvals) before the signature that meets the threshold publishes
    it, and its quarantine is read again in the transaction that publishes. A refusal of
    an adopted alias names it (``detail.alias``)."""
    with state.db.read() as session:
        row = proposal_row(session, proposal_id)
        if row is None:
            raise NotFound(f"no TUF proposal {proposal_id}")
        target = alias_of(row)
        proposer = session.get(Principal, row.created_by)
        # only the signature that meets the threshold publishes: the gates (a re-scan of
        # the bundle among them) are checked for that one, not for every signature
        collected = {s["keyid"] for s in json.loads(row.signatures)} | {keyid}
        tuf = repository(session, state)
        try:
            threshold = signing_role(tuf, row)[2]
        except NotFound:
            threshold = 0
        moves = moves_of(tuf, row) if row.state == "pending" else []
    mover = Caller(id=proposer.id, name=proposer.name, role=proposer.role) if proposer else None
    decided: list[tuple[MoveRequest, Caller]] = []
    if moves and mover is not None and len(collected) >= threshold:
        # the registry's own gates, checked again before it publishes anything
        for repo_name, alias, digest in moves:
            with naming(row, target, repo_name, alias):
                request = require_move_allowed(
                    state, repo_name=repo_name, alias=alias, digest=digest, mover=mover
                )
            decided.append((request, mover))

    def gates_checked(proposal: TufProposal) -> None:
        if moves and len(decided) != len(moves):
            raise Conflict(
                f"proposal {proposal.id}: its signature threshold changed while this "
                "signature was checked; send the signature again",
                code="threshold_changed",
            )
        # The transaction rule: the decision above read its facts in an earlier (read)
        # transaction; a quarantine or a deletion committed since must count, so the facts a
        # refusal rests on are read again here, in the write transaction that publishes
        # (as aliases.service._swap does for an unsigned move).
        for request, by in decided:
            with naming(proposal, target, request.repo, request.alias):
                decide_again(session, request, mover=by)

    with state.db.write() as session:
        row = proposal_row(session, proposal_id)
        if row is None:  # pragma: no cover - rows are never deleted
            raise NotFound(f"no TUF proposal {proposal_id}")
        owner = session.scalar(
            select(SigningKey.principal_id).where(
                SigningKey.keyid == keyid, SigningKey.revoked_at.is_(None)
            )
        )
        if row.role == TARGETS_ROLE:
            if not caller.is_admin:
                raise Forbidden("only admins sign top-level targets")
        elif owner != caller.id:
            raise Forbidden(
                f"key {keyid} is not an active key of {caller.name}: register it with "
                "`modelward key register` and sign with it",
                detail={"keyid": keyid, "principal": caller.name},
            )
        repo = repository(session, state)
        added: Added = add_signature(
            session,
            repo,
            row,
            keyid=keyid,
            signature_hex=signature_hex,
            excluded=_excluded(session, row, moves, state.default_policy_yaml),
            before_publish=gates_checked,
            next_delegation=next_delegation(session, state, repo, row, keyid),
        )
        append(
            session,
            actor=caller.name,
            action="tuf.sign",
            subject=f"{row.role} v{row.version}",
            details={
                "proposal": row.id,
                "keyid": keyid,
                "target": row.target,
                "signatures": added.signatures,
                "threshold": added.threshold,
            },
        )
        if added.published:
            append(
                session,
                actor=caller.name,
                action="tuf.publish",
                subject=f"{row.role} v{row.version}",
                details={"proposal": row.id, "target": row.target, "to": row.to_digest},
            )
            if target is not None and row.to_digest is not None:
                record_move(
                    session,
                    repo_name=target[0],
                    alias=target[1],
                    digest=row.to_digest,
                    actor=proposer.name if proposer else "?",
                    reason=row.reason,
                    signed_by=caller.name,
                )
            if row.target.startswith("quarantine/") and row.to_digest is None and row.from_digest:
                # a quarantine's lift (trust.quarantine_endpoint) ends it once signed
                from modelward.registry.domains.quarantine.service import lift

                lift(
                    session,
                    digest=row.from_digest,
                    reason=row.reason or "",
                    actor=proposer.name if proposer else "?",
                    signed_by=caller.name,
                )
        return proposal_json(session, repo, row)
