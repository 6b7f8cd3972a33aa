"""Aliases ``org/name@alias``: compare-and-swap moves under the policy's alias rules.

``set_alias`` reads what a move is decided on (moves.repository, authorization through
``auth.authz.may``), has the bundle judged by the one bundle verifier as it is now (a re-scan
under the current policy, every attestation not retracted verified again), and hands it all
to the one owner of the move's verdict, ``attest.alias_decision.decide_move``: steps (1) rule
and mover, (2) quarantine, (3) policy, (4) a protected alias's baseline, replay and release
gates, (5) rollback, (6) approvals (docs/registry.md#aliases); a move back to a release the
alias held under valid signatures is a rollback and skips (4) (moves.rollback). A refusal is
answered by moves.refusals, the one map from its typed reason to the HTTP error. Then:

  (7) compare-and-swap on the version (a conditional UPDATE; 409 with the current state),
      history row and audit event in the same transaction, which decides (2) and (6) again
      on what it reads (a quarantine or a withdrawal that landed meanwhile counts).

``dry_run`` runs every step of the decision (``decide_move_result``) and reports each;
nothing moves and nothing is proposed. ``require_move_allowed`` is steps (1)-(5), for a
signed proposal at its threshold (the reviewers' signatures are its approvals).

Approvals (``approve``, ``withdraw_approval``) are the principal's, not the token's: an
approval survives the revocation of the token that made it, counts only while its approver is
a reviewer or an admin, and stops counting once the approver withdraws it (the row stays,
marked withdrawn, with the reason).
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from securesystemslib.signer import Key
from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.exceptions import RepositoryError

from modelward.attest.alias_decision import (
    AliasMoveRefused,
    MoveRequest,
    RefusalReason,
    decide_move,
)
from modelward.attest.tuf import alias_path
from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.aliases.signers import move_signers
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import Action, may
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles.service import find_bundle, live_bundle
from modelward.registry.domains.moves import repository
from modelward.registry.domains.moves.refusals import http_error
from modelward.registry.domains.moves.rollback import PROMOTION_GATES
from modelward.registry.domains.moves.service import (
    ALIAS_RE,
    decide,
    dry_run,
    read_move,
    record_move,
    require_move_allowed,
    stale_version,
    state_json,
)
from modelward.registry.domains.quarantine.service import require_not_quarantined
from modelward.registry.domains.repos.listing import (
    Page,
    check_limit,
    decode_cursor,
    encode_cursor,
    readable_repo,
)
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.signing.online import repository as tuf_repository
from modelward.registry.domains.signing.proposals import pending_proposal_id, propose_alias
from modelward.registry.domains.signing.proposals import proposal_json as tuf_json
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.store import SessionStore
from modelward.registry.domains.signing.tuf.view import SignedView
from modelward.registry.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    RegistryError,
)
from modelward.registry.models import (
    Alias,
    AliasHistory,
    Approval,
    Bundle,
    QuarantinedDigest,
    Repository,
)

__all__ = [
    "approve",
    "dry_run",
    "get_alias",
    "history",
    "list_aliases",
    "record_move",
    "require_move_allowed",
    "set_alias",
    "withdraw_approval",
]

# What a move that changes nothing still decides: who moves it, the quarantine, the policy.
UNCHANGED_STEPS = frozenset({"1", "2", "3"})

# A mistyped alias's 404 suggests up to this many existing names (difflib), read from at most
# SUGGESTION_SCAN of the repository's aliases.
MAX_SUGGESTIONS = 3
SUGGESTION_SCAN = 10_000


_alias_row = repository.alias_row


def _no_alias(session: Session, repo: Repository, alias: str) -> NotFound:
    """The 404 for a missing alias, suggesting the repository's aliases closest to it."""
    names = list(
        session.execute(
            select(Alias.name).where(Alias.repo_id == repo.id).limit(SUGGESTION_SCAN)
        ).scalars()
    )
    close = difflib.get_close_matches(alias, names, n=MAX_SUGGESTIONS, cutoff=0.6)
    close += [n for n in names if n.lower() == alias.lower() and n not in close]
    message = f"no alias {repo.name}@{alias}"
    if close:
        message += "; did you mean " + " or ".join(f"{repo.name}@{n}" for n in close) + "?"
    elif names:
        message += f" (`modelward alias list {repo.name}` lists its {len(names)} aliases)"
    else:
        message += f" ({repo.name} has no aliases yet)"
    return NotFound(message, detail={"repository": repo.name, "alias": alias, "suggestions": close})


def get_alias(
    session: Session, repo_name: str, alias: str, caller: Caller, *, view: SignedView
) -> dict[str, Any]:
    """The alias's state, ``signed`` when its TUF role signs the same digest; NotFound
    (suggesting close names) when it does not exist, the same NotFound as a missing
    repository's when ``caller`` may not read it."""

    repo = get_repo(session, repo_name, caller)
    row = _alias_row(session, repo, alias)
    if row is None:
        raise _no_alias(session, repo, alias)
    answer = state_json(row, alias)
    answer["signed"] = view.aliases(session, repo_name).get(alias) == row.digest
    return answer


def list_aliases(
    session: Session,
    caller: Caller,
    repo_name: str,
    *,
    limit: int,
    cursor: str | None = None,
    view: SignedView,
) -> Page:
    """A repository's aliases by name, a page at a time (authorization in the query:
    ``repos.listing.readable_repo``). Each: ``{alias, digest, version, updated_at,
    bundle_state}`` where ``bundle_state`` is the target bundle's (live, quarantined or
    tombstoned) and ``signed`` (its TUF role signs that digest). Raises NotFound,
    InvalidCursor."""
    check_limit(limit)
    repo = readable_repo(session, repo_name, caller)
    quarantined = (
        select(QuarantinedDigest.digest).where(QuarantinedDigest.digest == Alias.digest).exists()
    )
    query = (
        select(Alias, Bundle.tombstoned, quarantined)
        .outerjoin(Bundle, (Bundle.repo_id == Alias.repo_id) & (Bundle.digest == Alias.digest))
        .where(Alias.repo_id == repo.id)
        .order_by(Alias.name)
        .limit(limit + 1)
    )
    if cursor is not None:
        query = query.where(Alias.name > decode_cursor("aliases", cursor))
    rows = session.execute(query).all()

    signed = view.aliases(session, repo.name)
    items = [
        {
            "alias": row.name,
            "digest": row.digest,
            "version": row.version,
            "updated_at": iso(row.updated_at),
            "bundle_state": "tombstoned" if tombstoned else "quarantined" if held else "live",
            "signed": signed.get(row.name) == row.digest,
        }
        for row, tombstoned, held in rows[:limit]
    ]
    more = len(rows) > limit
    return Page(items, encode_cursor("aliases", str(items[-1]["alias"])) if more else None)


def history(session: Session, repo_name: str, alias: str, caller: Caller) -> list[dict[str, Any]]:
    """Every move of ``repo_name@alias``, oldest first: version, from -> to, who, when, why,
    rollback, and ``signed``: the TUF role version that signed the move and its
    ``signers`` (keyid, principal), read from the signed metadata itself
    (``aliases.signers``); None for a move no signed version names. NotFound unless
    ``caller`` may read the repository."""
    repo = get_repo(session, repo_name, caller)
    row = _alias_row(session, repo, alias)
    if row is None:
        raise _no_alias(session, repo, alias)
    rows = list(
        session.execute(
            select(AliasHistory)
            .where(AliasHistory.alias_id == row.id)
            .order_by(AliasHistory.version)
        ).scalars()
    )
    signed = move_signers(session, repo_name, alias, rows, online_keys=_delegated_keys(session))
    return [
        {
            "version": h.version,
            "from_digest": h.from_digest,
            "to_digest": h.to_digest,
            "actor": h.actor,
            "at": iso(h.at),
            "reason": h.reason,
            "rollback": h.rollback,
            "signed": s.as_json() if s is not None else None,
        }
        for h, s in zip(rows, signed, strict=True)
    ]


def _delegated_keys(session: Session) -> dict[str, Key]:
    """The keys top-level targets delegates to now (the registry's online alias key among
    them), by keyid; none when no verified targets can be read."""
    try:
        delegations = MetadataRepository(SessionStore(session), {}).targets().delegations
    except (RegistryError, ValueError, RepositoryError):
        return {}
    return dict(delegations.keys or {}) if delegations is not None else {}


def set_alias(
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    digest: str,
    expected_version: int,
    reason: str | None,
    rollback: bool,
    caller: Caller,
    propose: bool = False,
) -> dict[str, Any]:
    """Move ``repo_name@alias`` to ``digest`` (steps (1) to (5)); the move is also proposed
    to the TUF role that decides the alias (``signed``/``proposal`` in the answer).

    ``propose``: a protected alias short of approvals is not refused but proposed: the
    answer's ``pending`` is the proposal its reviewers sign (``approve --key``), and the
    alias moves when they have.

    A move to the alias's current target changes nothing and is a success, never an error
    (a retried push): ``unchanged`` in the answer, no history row, no proposal."""
    request, manifest = read_move(
        state, repo_name=repo_name, alias=alias, digest=digest, rollback=rollback, caller=caller
    )
    if request.current == digest:
        # nothing to do (a retried push, `alias set` to the current target): steps (1) who
        # moves, (2) quarantine and (3) policy still decide; the rest was decided when the
        # alias moved there, and nothing is recorded or proposed again
        decide(replace(request, judged=UNCHANGED_STEPS))
        return _unchanged(
            state,
            repo_name=repo_name,
            alias=alias,
            digest=digest,
            expected=expected_version,
            caller=caller,
        )
    try:
        decision = decide_move(request)
    except AliasMoveRefused as refused:
        # (6) is the last step: short only of approvals, the move may be proposed instead.
        if refused.reason is not RefusalReason.APPROVALS_REQUIRED or not propose:
            raise http_error(refused) from refused
        return _propose(state, request, manifest=manifest, caller=caller, reason=reason)
    # (7): compare-and-swap, history and audit in one transaction.
    return _swap(
        state=state,
        request=decision.request,
        expected=expected_version,
        reason=reason,
        caller=caller,
        manifest=manifest,
    )


def _unchanged(
    state: AppState, *, repo_name: str, alias: str, digest: str, expected: int, caller: Caller
) -> dict[str, Any]:
    """The answer to a move that changes nothing: the alias as it is, ``unchanged``,
    ``signed`` (its TUF role signs ``digest``) and, when it is not, the pending proposal
    setting it to ``digest`` that its signers may still sign (``proposal``; None if none).
    The compare-and-swap still holds: StaleVersion (409) when the alias is not at version
    ``expected`` (another writer moved it since it was read)."""
    with state.db.read() as session:
        row = _alias_row(session, get_repo(session, repo_name, caller), alias)
        if row is None or row.version != expected or row.digest != digest:
            raise stale_version(row, alias, expected)
        answer = state_json(row, alias)
        signed = state.signed.aliases(session, repo_name).get(alias) == digest
        proposal = None
        if not signed:
            proposal = pending_proposal_id(session, alias_path(repo_name, alias), digest)
    answer.update(unchanged=True, signed=signed, proposal=proposal)
    return answer


def _propose(
    state: AppState, request: MoveRequest, *, manifest: bytes, caller: Caller, reason: str | None
) -> dict[str, Any]:
    """A protected move short only of approvals, proposed to the alias's TUF role."""

    repo_name, alias, digest = request.repo, request.alias, request.digest
    with state.db.write() as session:
        proposal = propose_alias(
            session,
            state,
            repo_name=repo_name,
            alias=alias,
            digest=digest,
            manifest=manifest,
            from_digest=request.current,
            caller=caller,
            reason=reason,
        )
        if proposal is None:
            raise Conflict(
                f"no TUF role is delegated {repo_name}@{alias} yet: the admins sign the "
                "pending top-level targets first (`modelward trust pending`)",
                code="delegation_pending",
            )
        append(
            session,
            actor=caller.name,
            action="alias.propose",
            subject=f"{repo_name}@{alias}",
            details={
                "from": request.current,
                "to": digest,
                "proposal": proposal.id,
                "reason": reason,
                **_rollback_json(request),
            },
        )
        current = _alias_row(session, get_repo(session, repo_name, caller), alias)
        answer = state_json(current, alias)
        answer["pending"] = tuf_json(session, tuf_repository(session, state), proposal)
        answer.update(_rollback_json(request))
        return answer


def _rollback_json(request: MoveRequest) -> dict[str, Any]:
    """``rollback`` (the move goes back to an earlier target) and ``gates_skipped``: the
    promotion gates not judged because the alias held the digest under valid signatures
    (moves.rollback); both absent for any other move."""
    if not request.rollback:
        return {}
    return {"rollback": True, "gates_skipped": sorted(PROMOTION_GATES - request.judged)}


def _swap(
    *,
    state: AppState,
    request: MoveRequest,
    expected: int,
    reason: str | None,
    caller: Caller,
    manifest: bytes,
) -> dict[str, Any]:

    repo_name, alias, digest = request.repo, request.alias, request.digest
    with state.db.write() as session:
        repo = get_repo(session, repo_name, caller)
        bundle = live_bundle(session, repo, digest)
        # (2) and (6) decided again on what this transaction reads: a quarantine or a
        # withdrawal that landed meanwhile counts.
        fresh = repository.fresh_facts(session, repo, bundle, alias=alias, caller=caller)
        decision = decide(
            replace(request, quarantine=fresh["quarantine"], approvers=fresh["approvers"])
        )
        current = _alias_row(session, repo, alias)
        if (current.version if current is not None else 0) != expected:
            raise stale_version(current, alias, expected)
        from_digest = current.digest if current is not None else None
        row = record_move(
            session,
            repo_name=repo_name,
            alias=alias,
            digest=digest,
            actor=caller.name,
            reason=reason,
            rollback=decision.is_rollback,
            expected=expected,
        )
        proposal = propose_alias(
            session,
            state,
            repo_name=repo_name,
            alias=alias,
            digest=digest,
            manifest=manifest,
            from_digest=from_digest,
            caller=caller,
            reason=reason,
        )
        answer = state_json(row, alias)
        answer["signed"] = proposal is not None and proposal.state == "published"
        answer["proposal"] = proposal.id if proposal is not None else None
        answer.update(_rollback_json(decision.request))
        return answer


def approve(
    session: Session, *, repo_name: str, digest: str, alias: str, caller: Caller
) -> list[str]:
    """Record the caller's approval of ``digest`` for ``alias`` (approving again after a
    withdrawal makes it count again); returns every approver that counts.

    Raises Forbidden (not a reviewer or admin; the bundle's publisher), BadRequest (alias
    name), NotFound, Gone, Quarantined."""
    repo = get_repo(session, repo_name, caller)
    if not may(session, caller, Action.REVIEW, repo):
        raise Forbidden("only reviewers and admins may approve")
    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    bundle = live_bundle(session, repo, digest)
    if bundle.created_by == caller.id:
        raise Forbidden("the publisher of a bundle may not approve it (two-person rule)")
    require_not_quarantined(session, digest, caller)
    row = _approval(session, bundle.id, alias, caller.id)
    if row is None:
        now = datetime.now(UTC)
        session.add(
            Approval(bundle_id=bundle.id, alias=alias, principal_id=caller.id, created_at=now)
        )
    elif row.withdrawn_at is not None:
        row.created_at = datetime.now(UTC)
        row.withdrawn_at = None
        row.withdrawal_reason = None
    session.flush()
    append(
        session,
        actor=caller.name,
        action="bundle.approve",
        subject=f"{repo_name}@{digest}",
        details={"alias": alias},
    )
    return repository.approvers(session, bundle.id, alias, {bundle.created_by})


def withdraw_approval(
    session: Session, *, repo_name: str, digest: str, alias: str, reason: str, caller: Caller
) -> dict[str, Any]:
    """Withdraw the caller's own approval of ``digest`` for ``alias``: it stops counting at
    once; the row stays, marked withdrawn with the reason; audited as
    ``bundle.approval.withdraw``. Allowed on deleted and quarantined bundles too.

    Returns ``{digest, alias, approvers (those that still count), withdrawn: {approver, at,
    reason}, unsigned_proposals (the pending proposals the caller's signature was taken off;
    [] when none)}``. Raises BadRequest (alias name, blank reason), NotFound (no such bundle, or
    no approval at all), Forbidden (only others approved it: only an approver may withdraw
    an approval, and only their own), Conflict (already withdrawn).
    """
    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    if not reason.strip():
        raise BadRequest("a withdrawal needs a reason")
    repo = get_repo(session, repo_name, caller)
    bundle = find_bundle(session, repo, digest)
    row = _approval(session, bundle.id, alias, caller.id)
    # the caller's TUF signatures on the pending move stop counting too (docs/tuf.md)
    from modelward.registry.domains.signing.revocation import withdraw_approval_signatures

    unsigned = withdraw_approval_signatures(
        session, repo_name=repo_name, alias=alias, digest=bundle.digest, caller=caller
    )
    if unsigned and (row is None or row.withdrawn_at is not None):
        return {
            "digest": digest,
            "alias": alias,
            "approvers": repository.approvers(session, bundle.id, alias, {bundle.created_by}),
            "withdrawn": {"approver": caller.name, "at": None, "reason": reason},
            "unsigned_proposals": unsigned,
        }
    if row is None:
        others = repository.approvers(session, bundle.id, alias, {caller.id})
        if not others:
            raise NotFound(f"no approval of {repo_name}@{digest} for {alias}")
        raise Forbidden(
            f"{caller.name} ({caller.role}) may not withdraw the approval of {', '.join(others)}"
            f" for {alias}: only the principal who approved may withdraw it",
            detail={"principal": caller.name, "approvers": others, "alias": alias},
        )
    if row.withdrawn_at is not None:
        raise Conflict(
            f"{caller.name} already withdrew the approval of {repo_name}@{digest} for {alias} "
            f"at {iso(row.withdrawn_at)}",
            detail={"withdrawn_at": iso(row.withdrawn_at), "reason": row.withdrawal_reason},
        )
    row.withdrawn_at = datetime.now(UTC)
    row.withdrawal_reason = reason
    session.flush()
    append(
        session,
        actor=caller.name,
        action="bundle.approval.withdraw",
        subject=f"{repo_name}@{digest}",
        details={"alias": alias, "reason": reason},
    )
    return {
        "digest": digest,
        "alias": alias,
        "approvers": repository.approvers(session, bundle.id, alias, {bundle.created_by}),
        "withdrawn": {"approver": caller.name, "at": iso(row.withdrawn_at), "reason": reason},
        "unsigned_proposals": unsigned,
    }


def _approval(session: Session, bundle_id: int, alias: str, principal_id: int) -> Approval | None:
    return session.execute(
        select(Approval).where(
            Approval.bundle_id == bundle_id,
            Approval.alias == alias,
            Approval.principal_id == principal_id,
        )
    ).scalar_one_or_none()
