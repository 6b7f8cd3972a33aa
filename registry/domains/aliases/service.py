"""Aliases ``org/name@alias``: compare-and-swap moves under the policy's alias rules.

``set_alias`` checks, in order (docs/registry.md#aliases):
  (1) an alias rule matches (none: nobody may move it) and names the caller's principal or
      role (a publisher also needs to publish to this repository);
  (2) the bundle exists, is not tombstoned, and its digest is not quarantined in any
      repository (bundles.quarantine);
  (3) the repository's current policy still allows the bundle: the one bundle verifier
      (attest.verifier) judges it as it is now, scanning the stored layers again under the
      current policy and re-verifying every attestation that is not retracted;
  (4) protected aliases: k approvals (not withdrawn) by reviewers or admins other than the
      publisher and the mover, a trusted determinism baseline, replay results and the
      rule's release gates over evaluation statements (aliases.gates), as the rule requires
      (baselines, replay results and evaluations count only when signed by an evidence
      signer the policy names, never the publisher, the mover, a publisher of the repository
      or an admin: aliases.evidence; a replay result counts only against the bundle
      currently on the alias, or against none when the alias has no bundle yet);
  (5) compare-and-swap on the version (a conditional UPDATE; 409 with the current state),
      history row and audit event in the same transaction, which checks (2) and the
      approvals of (4) again (a quarantine or a withdrawal that landed meanwhile counts).

Approvals (``approve``, ``withdraw_approval``) are the principal's, not the token's: an
approval survives the revocation of the token that made it, counts only while its approver is
a reviewer or an admin, and stops counting once the approver withdraws it (the row stays,
marked withdrawn, with the reason).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.aliases.evidence import EvidenceSigners, evidence_signers
from modelward.registry.domains.aliases.gates import check_gates
from modelward.registry.domains.attestations.repository import live_attestations
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.bundles.quarantine import require_not_quarantined
from modelward.registry.domains.bundles.service import find_bundle, live_bundle
from modelward.registry.domains.repos.listing import (
    Page,
    check_limit,
    decode_cursor,
    encode_cursor,
    readable_repo,
)
from modelward.registry.domains.repos.service import get_repo, may_publish, repo_policy
from modelward.registry.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    Refused,
    StaleVersion,
)
from modelward.registry.models import (
    Alias,
    AliasHistory,
    Approval,
    Bundle,
    Principal,
    QuarantinedDigest,
    Repository,
)

if TYPE_CHECKING:
    from modelward.attest.policy import AliasRule
    from modelward.attest.trust import VerifiedStatement

__all__ = [
    "approve",
    "get_alias",
    "history",
    "list_aliases",
    "record_move",
    "require_move_allowed",
    "set_alias",
    "withdraw_approval",
]

ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
APPROVER_ROLES = ("reviewer", "admin")
# A mistyped alias's 404 suggests up to this many existing names (difflib), read from at most
# SUGGESTION_SCAN of the repository's aliases.
MAX_SUGGESTIONS = 3
SUGGESTION_SCAN = 10_000


def _state_json(row: Alias | None, alias: str) -> dict[str, Any]:
    if row is None:
        return {"alias": alias, "digest": None, "version": 0}
    return {"alias": row.name, "digest": row.digest, "version": row.version}


def _alias_row(session: Session, repo: Repository, alias: str) -> Alias | None:
    return session.execute(
        select(Alias).where(Alias.repo_id == repo.id, Alias.name == alias)
    ).scalar_one_or_none()


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


def get_alias(session: Session, repo_name: str, alias: str) -> dict[str, Any]:
    """The alias's state, ``signed`` when its TUF role signs the same digest; NotFound
    (suggesting close names) when it does not exist."""
    from modelward.registry.domains.trust.service import signed_aliases

    repo = get_repo(session, repo_name)
    row = _alias_row(session, repo, alias)
    if row is None:
        raise _no_alias(session, repo, alias)
    answer = _state_json(row, alias)
    answer["signed"] = signed_aliases(session, repo_name).get(alias) == row.digest
    return answer


def list_aliases(
    session: Session, caller: Caller, repo_name: str, *, limit: int, cursor: str | None = None
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
    from modelward.registry.domains.trust.service import signed_aliases

    signed = signed_aliases(session, repo.name)
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


def history(session: Session, repo_name: str, alias: str) -> list[dict[str, Any]]:
    repo = get_repo(session, repo_name)
    row = _alias_row(session, repo, alias)
    if row is None:
        raise _no_alias(session, repo, alias)
    rows = session.execute(
        select(AliasHistory).where(AliasHistory.alias_id == row.id).order_by(AliasHistory.version)
    ).scalars()
    return [
        {
            "version": h.version,
            "from_digest": h.from_digest,
            "to_digest": h.to_digest,
            "actor": h.actor,
            "at": iso(h.at),
            "reason": h.reason,
            "rollback": h.rollback,
        }
        for h in rows
    ]


def _approvers(session: Session, bundle_id: int, alias: str, exclude: set[int]) -> list[str]:
    """Who approved the bundle for ``alias`` and still counts: not withdrawn, the approver
    still a reviewer or an admin (a principal's current role, whatever token it used)."""
    rows = session.execute(
        select(Principal.id, Principal.name)
        .join(Approval, Approval.principal_id == Principal.id)
        .where(
            Approval.bundle_id == bundle_id,
            Approval.alias == alias,
            Approval.withdrawn_at.is_(None),
            Principal.role.in_(APPROVER_ROLES),
        )
    ).all()
    return sorted({name for pid, name in rows if pid not in exclude})


def _vouched(
    statements: Sequence[VerifiedStatement], predicate_type: str, vouches: EvidenceSigners
) -> tuple[list[VerifiedStatement], list[dict[str, str]]]:
    """The statements of ``predicate_type`` an evidence signer vouched for, and each signer
    of the others with the reason it does not count."""
    counted: list[VerifiedStatement] = []
    refused: list[dict[str, str]] = []
    for stmt in statements:
        if stmt.predicate_type != predicate_type:
            continue
        reasons = [(s.name, vouches.reason_against(s)) for s in stmt.signers]
        if any(reason is None for _, reason in reasons):
            counted.append(stmt)
        else:
            refused += [{"signer": n, "reason": r} for n, r in reasons if r is not None]
    return counted, refused


def _against(stmt: Any) -> str | None:
    """The digest a replay result compared against (``against``), or None."""
    predicate = stmt.statement.get("predicate", {})
    against = predicate.get("against") if isinstance(predicate, dict) else None
    return against if isinstance(against, str) else None


def _replay_ok(statements: list[Any], min_consecutive: int, max_divergences: int) -> bool:
    for stmt in statements:
        predicate = stmt.statement.get("predicate", {})
        consecutive = predicate.get("consecutive_matches")
        divergences = predicate.get("divergence_count")
        if (
            isinstance(consecutive, int)
            and isinstance(divergences, int)
            and consecutive >= min_consecutive
            and divergences <= max_divergences
        ):
            return True
    return False


@dataclass(frozen=True)
class _Move:
    """What the checks of a move found."""

    rule: AliasRule
    manifest: bytes
    current_digest: str | None
    is_rollback: bool
    approvers: list[str]


def _check_move(
    state: AppState, *, repo_name: str, alias: str, digest: str, rollback: bool, caller: Caller
) -> _Move:
    """Checks (1) to (4) of a move by ``caller``, except the approvals of (4)."""
    from modelward.attest.manifest import parse_manifest
    from modelward.attest.policy import alias_rule_for
    from modelward.attest.statement import PredicateType

    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    with state.db.read() as session:
        repo = get_repo(session, repo_name)
        policy = repo_policy(repo, state.default_policy_yaml)
        # (1): who may move this alias.
        rule = alias_rule_for(policy, alias)
        if rule is None:
            raise Forbidden(
                f"{caller.name} ({caller.role}) may not move {repo_name}@{alias}: no alias "
                f"rule in the repository's policy matches {alias!r}, so nobody may move it",
                detail={
                    "principal": caller.name,
                    "role": caller.role,
                    "repository": repo_name,
                    "alias": alias,
                    "rule": None,
                    "cause": "no_rule",
                },
            )
        publishes_here = may_publish(session, repo, caller)
        by_role = caller.role in rule.roles and (caller.role != "publisher" or publishes_here)
        if caller.name not in rule.principals and not by_role:
            raise _may_not_move(caller, repo_name, alias, rule, publishes_here=publishes_here)
        # (2): a live bundle of this repository, its digest quarantined nowhere.
        bundle = live_bundle(session, repo, digest)
        require_not_quarantined(session, digest)
        # (3): the current policy still allows it (judged below, outside the transaction).
        raw_manifest = bytes(bundle.manifest)
        manifest = parse_manifest(raw_manifest)
        stored = [a.data for a in session.execute(live_attestations(bundle.id)).scalars()]
        trust = verdict.trust_for(session, repo, policy, state)
        publisher_id = bundle.created_by
        approvers = _approvers(session, bundle.id, alias, {publisher_id, caller.id})
        vouches = evidence_signers(
            session, repo, policy, publisher_id=publisher_id, mover_id=caller.id
        )
        current = _alias_row(session, repo, alias)
        current_digest = current.digest if current is not None else None
        earlier = set()
        if current is not None:
            earlier = set(
                session.execute(
                    select(AliasHistory.to_digest).where(AliasHistory.alias_id == current.id)
                ).scalars()
            ) - {current.digest}
    trusted = verdict.judge(
        state, manifest=manifest, attestations=stored, policy=policy, trust=trust
    )
    # (4): protected-alias evidence (the approvals are the caller's to check).
    if rule.protected:
        # Baselines and replay results are a serving worker's evidence: only statements an
        # evidence signer of the policy vouched for count (aliases.evidence).
        evidence = policy.evidence.model_dump()
        baselines, not_counted = _vouched(trusted.statements, PredicateType.BASELINE, vouches)
        if rule.require_baseline and not baselines:
            raise Refused(
                f"{repo_name}@{alias} needs a determinism baseline for {digest} signed by an "
                "evidence signer of the policy (never the publisher, the mover, a publisher "
                "of the repository or an admin)",
                detail={"evidence": evidence, "not_counted": not_counted},
                code="baseline_required",
            )
        reference = current_digest  # the bundle on the alias now (None: the alias is new)
        vouched, not_counted = _vouched(trusted.statements, PredicateType.REPLAY, vouches)
        replays = [s for s in vouched if _against(s) == reference]
        if rule.replay is not None and not _replay_ok(
            replays, rule.replay.min_consecutive, rule.replay.max_divergences
        ):
            against = f"against {reference}" if reference else "against no bundle"
            raise Refused(
                f"{repo_name}@{alias} needs a replay result {against} (the bundle on the "
                f"alias now) with at least {rule.replay.min_consecutive} consecutive "
                f"matches and at most {rule.replay.max_divergences} divergences, signed by "
                "an evidence signer of the policy (never the publisher, the mover, a "
                "publisher of the repository or an admin)",
                detail={"evidence": evidence, "not_counted": not_counted},
                code="replay_required",
            )
        check_gates(
            rule,
            trusted.statements,
            vouches,
            repo_name=repo_name,
            alias=alias,
            digest=digest,
            current_digest=current_digest,
        )
    if rollback and digest not in earlier:
        raise BadRequest(
            f"{digest} was never an earlier target of {repo_name}@{alias}", code="not_a_rollback"
        )
    return _Move(rule, raw_manifest, current_digest, rollback or digest in earlier, approvers)


def require_move_allowed(
    state: AppState, *, repo_name: str, alias: str, digest: str, mover: Caller
) -> None:
    """Checks (1) to (4), less the approvals, of ``mover`` moving ``repo_name@alias`` to
    ``digest``: what the registry checks again before it publishes a signed move."""
    _check_move(
        state, repo_name=repo_name, alias=alias, digest=digest, rollback=False, caller=mover
    )


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
    alias moves when they have."""
    from modelward.registry.domains.trust.service import proposal_json as tuf_json
    from modelward.registry.domains.trust.service import propose_alias, repository

    move = _check_move(
        state, repo_name=repo_name, alias=alias, digest=digest, rollback=rollback, caller=caller
    )
    rule = move.rule
    if rule.protected and len(move.approvers) < rule.approvals and propose:
        with state.db.write() as session:
            proposal = propose_alias(
                session,
                state,
                repo_name=repo_name,
                alias=alias,
                digest=digest,
                manifest=move.manifest,
                from_digest=move.current_digest,
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
                    "from": move.current_digest,
                    "to": digest,
                    "proposal": proposal.id,
                    "reason": reason,
                },
            )
            current = _alias_row(session, get_repo(session, repo_name), alias)
            answer = _state_json(current, alias)
            answer["pending"] = tuf_json(session, repository(session, state), proposal)
            return answer
    if rule.protected:
        _require_approvals(move.approvers, rule.approvals, f"{repo_name}@{alias}", digest)
    # (5): compare-and-swap, history and audit in one transaction.
    return _swap(
        state=state,
        repo_name=repo_name,
        alias=alias,
        digest=digest,
        expected=expected_version,
        reason=reason,
        rollback=move.is_rollback,
        approvals=rule.approvals if rule.protected else 0,
        caller=caller,
        manifest=move.manifest,
    )


def _may_not_move(
    caller: Caller, repo_name: str, alias: str, rule: AliasRule, *, publishes_here: bool
) -> Forbidden:
    """Why ``caller`` may not move ``repo_name@alias`` under ``rule``, in plain words: the
    rule lets its role move the alias only as a publisher of the repository, or it names
    neither the caller nor its role."""
    who = f"{caller.name} ({caller.role})"
    ref = f"{repo_name}@{alias}"
    plural = {"publisher": f"publishers of {repo_name}", "admin": "admins"}
    allowed = [plural.get(r, f"{r}s") for r in rule.roles]
    allowed += [f"principal {p}" for p in rule.principals]
    rule_text = f"the alias rule {rule.pattern!r} of {repo_name}'s policy"
    if caller.role in rule.roles and caller.role == "publisher" and not publishes_here:
        cause = "not_a_publisher_of_repository"
        message = (
            f"{who} may not move {ref}: {caller.name} is not a publisher of {repo_name} "
            f"({rule_text} lets publishers move it only in repositories they may publish to; "
            f"an admin adds one with `modelward repo add-publisher {repo_name} {caller.name}`)"
        )
    else:
        cause = "not_allowed_by_rule"
        message = (
            f"{who} may not move {ref}: {rule_text} allows only {_and(allowed)}, and "
            f"names neither {caller.name} nor role {caller.role}"
        )
    return Forbidden(
        message,
        detail={
            "principal": caller.name,
            "role": caller.role,
            "repository": repo_name,
            "alias": alias,
            "rule": {
                "pattern": rule.pattern,
                "roles": list(rule.roles),
                "principals": list(rule.principals),
            },
            "cause": cause,
            # kept from the earlier answer's detail, for scripts that read it
            "pattern": rule.pattern,
        },
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _require_approvals(approvers: list[str], need: int, ref: str, digest: str) -> None:
    if len(approvers) < need:
        raise Forbidden(
            f"{ref} needs {need} approval(s) by reviewers other than the publisher and the "
            f"mover; {digest} has {len(approvers)}",
            detail={"have": approvers, "need": need},
            code="approvals_required",
        )


def _swap(
    *,
    state: AppState,
    repo_name: str,
    alias: str,
    digest: str,
    expected: int,
    reason: str | None,
    rollback: bool,
    approvals: int,
    caller: Caller,
    manifest: bytes,
) -> dict[str, Any]:
    from modelward.registry.domains.trust.service import propose_alias

    with state.db.write() as session:
        repo = get_repo(session, repo_name)
        bundle = live_bundle(session, repo, digest)
        # (2) and the approvals of (4) again: quarantined or withdrawn meanwhile.
        require_not_quarantined(session, digest)
        if approvals:
            counted = _approvers(session, bundle.id, alias, {bundle.created_by, caller.id})
            _require_approvals(counted, approvals, f"{repo_name}@{alias}", digest)
        current = _alias_row(session, repo, alias)
        if (current.version if current is not None else 0) != expected:
            raise _stale(current, alias, expected)
        from_digest = current.digest if current is not None else None
        row = record_move(
            session,
            repo_name=repo_name,
            alias=alias,
            digest=digest,
            actor=caller.name,
            reason=reason,
            rollback=rollback,
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
        answer = _state_json(row, alias)
        answer["signed"] = proposal is not None and proposal.state == "published"
        answer["proposal"] = proposal.id if proposal is not None else None
        return answer


def record_move(
    session: Session,
    *,
    repo_name: str,
    alias: str,
    digest: str,
    actor: str,
    reason: str | None,
    rollback: bool | None = None,
    expected: int | None = None,
    signed_by: str | None = None,
) -> Alias:
    """Move the alias row (compare-and-swap on ``expected`` when given), with its history
    row and an ``alias.set``/``alias.rollback`` audit event. ``rollback`` None: a rollback
    when ``digest`` was an earlier target. ``signed_by``: the signer whose signature
    published the move (a signed decision moves the row whatever its version)."""
    now = datetime.now(UTC)
    repo = get_repo(session, repo_name)
    current = _alias_row(session, repo, alias)
    if current is not None and current.digest == digest and signed_by is not None:
        return current  # the registry's word already agreed with the signed decision
    if rollback is None:
        earlier = (
            set()
            if current is None
            else set(
                session.execute(
                    select(AliasHistory.to_digest).where(AliasHistory.alias_id == current.id)
                ).scalars()
            )
        )
        rollback = digest in earlier
    if current is None:
        row = Alias(repo_id=repo.id, name=alias, digest=digest, version=1, updated_at=now)
        session.add(row)
        session.flush()
        from_digest = None
    else:
        version = current.version if expected is None else expected
        result = session.execute(
            update(Alias)
            .where(Alias.repo_id == repo.id, Alias.name == alias, Alias.version == version)
            .values(digest=digest, version=Alias.version + 1, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise _stale(current, alias, version)
        from_digest = current.digest
        session.expire(current)
        row = current
    session.add(
        AliasHistory(
            alias_id=row.id,
            version=row.version,
            from_digest=from_digest,
            to_digest=digest,
            actor=actor,
            at=now,
            reason=reason,
            rollback=rollback,
        )
    )
    details: dict[str, Any] = {
        "from": from_digest,
        "to": digest,
        "version": row.version,
        "reason": reason,
    }
    if signed_by is not None:
        details["signed"] = True
    append(
        session,
        actor=actor if signed_by is None else signed_by,
        action="alias.rollback" if rollback else "alias.set",
        subject=f"{repo_name}@{alias}",
        details=details,
    )
    return row


def _stale(current: Alias | None, alias: str, expected: int) -> StaleVersion:
    state = _state_json(current, alias)
    return StaleVersion(
        f"alias {alias} is at version {state['version']}, not {expected}: re-read and retry",
        detail=state,
    )


def approve(
    session: Session, *, repo_name: str, digest: str, alias: str, caller: Caller
) -> list[str]:
    """Record the caller's approval of ``digest`` for ``alias`` (approving again after a
    withdrawal makes it count again); returns every approver that counts.

    Raises Forbidden (not a reviewer or admin; the bundle's publisher), BadRequest (alias
    name), NotFound, Gone, BundleQuarantined."""
    if caller.role not in APPROVER_ROLES:
        raise Forbidden("only reviewers and admins may approve")
    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    repo = get_repo(session, repo_name)
    bundle = live_bundle(session, repo, digest)
    if bundle.created_by == caller.id:
        raise Forbidden("the publisher of a bundle may not approve it (two-person rule)")
    require_not_quarantined(session, digest)
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
    return _approvers(session, bundle.id, alias, {bundle.created_by})


def withdraw_approval(
    session: Session, *, repo_name: str, digest: str, alias: str, reason: str, caller: Caller
) -> dict[str, Any]:
    """Withdraw the caller's own approval of ``digest`` for ``alias``: it stops counting at
    once; the row stays, marked withdrawn with the reason; audited as
    ``bundle.approval.withdraw``. Allowed on deleted and quarantined bundles too.

    Returns ``{digest, alias, approvers (those that still count), withdrawn: {approver, at,
    reason}}``. Raises BadRequest (alias name, blank reason), NotFound (no such bundle, or
    no approval at all), Forbidden (only others approved it: only an approver may withdraw
    an approval, and only their own), Conflict (already withdrawn).
    """
    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    if not reason.strip():
        raise BadRequest("a withdrawal needs a reason")
    repo = get_repo(session, repo_name)
    bundle = find_bundle(session, repo, digest)
    row = _approval(session, bundle.id, alias, caller.id)
    # the caller's TUF signatures on the pending move stop counting too (docs/tuf.md)
    from modelward.registry.domains.trust.service import withdraw_approval_signatures

    unsigned = withdraw_approval_signatures(
        session, repo_name=repo_name, alias=alias, digest=bundle.digest, caller=caller
    )
    if unsigned and (row is None or row.withdrawn_at is not None):
        return {
            "digest": digest,
            "alias": alias,
            "approvers": _approvers(session, bundle.id, alias, {bundle.created_by}),
            "withdrawn": {"approver": caller.name, "at": None, "reason": reason},
            "unsigned_proposals": unsigned,
        }
    if row is None:
        others = _approvers(session, bundle.id, alias, {caller.id})
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
        "approvers": _approvers(session, bundle.id, alias, {bundle.created_by}),
        "withdrawn": {"approver": caller.name, "at": iso(row.withdrawn_at), "reason": reason},
    }


def _approval(session: Session, bundle_id: int, alias: str, principal_id: int) -> Approval | None:
    return session.execute(
        select(Approval).where(
            Approval.bundle_id == bundle_id,
            Approval.alias == alias,
            Approval.principal_id == principal_id,
        )
    ).scalar_one_or_none()
