"""The decision of an alias move, and recording one: what ``aliases.service`` (``set_alias``,
its dry run) and ``trust.service`` (a signed proposal at its threshold) share.

``read_move`` reads what the decision needs (moves.repository) and has the bundle judged
by the one bundle verifier as it is now; ``decide`` runs attest.alias_decision.decide_move
and answers its refusal through moves.refusals; ``record_move`` moves the alias row with
its history row and audit event. This module imports neither ``aliases.service`` nor
``trust.service``, so the two depend on it and not on each other.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from modelward.attest.alias_decision import (
    AliasDecision,
    AliasMoveRefused,
    MoveRequest,
    decide_move,
    decide_move_result,
)
from modelward.attest.errors import BundleError
from modelward.attest.names import ALIAS_RE  # one definition, the client's too
from modelward.attest.verifier import verify_bundle_result
from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.bundles.service import live_bundle
from modelward.registry.domains.moves import repository
from modelward.registry.domains.moves.refusals import http_error, report_json
from modelward.registry.domains.moves.rollback import as_rollback, signed_earlier_targets
from modelward.registry.domains.repos.service import authorized_repo, get_repo
from modelward.registry.errors import BadRequest, InvalidManifest, StaleVersion
from modelward.registry.models import Alias, AliasHistory

if TYPE_CHECKING:
    from modelward.attest.trust import Signer

__all__ = [
    "ALIAS_RE",
    "decide",
    "decide_again",
    "dry_run",
    "read_move",
    "record_move",
    "require_move_allowed",
    "stale_version",
    "state_json",
]

_alias_row = repository.alias_row


def state_json(row: Alias | None, alias: str) -> dict[str, Any]:
    if row is None:
        return {"alias": alias, "digest": None, "version": 0}
    return {"alias": row.name, "digest": row.digest, "version": row.version}


def _nobody(_signer: Signer) -> str:
    return "not judged before step (1) passed"


def read_move(
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    digest: str,
    rollback: bool,
    caller: Caller,
    every_check: bool = False,
) -> tuple[MoveRequest, bytes]:
    """What the decision needs (moves.repository) and the bundle verifier's report for
    step (3), judged outside the read transaction; and the manifest bytes. Unless
    ``every_check``, step (1) is decided first, before the bundle is read: who may not move
    the alias learns nothing about it. The bundle's evidence (scan, attestations) is
    recalled from ``state.verdicts`` when the same bundle was judged with the same
    attestations and trust before."""
    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    with state.db.read() as session:
        rule = repository.read_rule(session, state, repo_name=repo_name, alias=alias, caller=caller)
        if not every_check:
            decide(
                MoveRequest(
                    repo=repo_name,
                    alias=alias,
                    digest=digest,
                    rule=rule.rule,
                    statements=(),
                    evidence=_nobody,
                    mover=rule.mover,
                    judged=frozenset({"1"}),
                )
            )
        found = repository.read_facts(
            session, state, rule, alias=alias, digest=digest, caller=caller
        )
        # (5): an earlier target is a rollback, without the promotion gates, only when a
        # signed version of the alias's role named it (moves.rollback)
        signed_earlier: frozenset[str] = frozenset()
        if digest in found.request["history"] and digest != found.request["current"]:
            signed_earlier = signed_earlier_targets(session, repo_name, alias)
    # (3): the bundle as it is now, under the current policy (the one bundle verifier).
    try:
        bundle = verify_bundle_result(
            found.manifest.raw,
            found.attestations,
            policy=rule.policy,
            trust=found.trust.verify,
            registered=found.trust.extra,
            reader=verdict.StoreReader(state, found.manifest),
            expected_digest=found.manifest.digest,
            # judged once per bundle, attestations and trust (registry/domains/_verdict_cache);
            # a reader's request (every_check: dry run, gates) waits for a read slot to compute
            memo=state.verdicts.reads if every_check else state.verdicts,
        )
    except BundleError as exc:
        raise InvalidManifest(f"invalid manifest: {exc}", detail=str(exc)) from exc
    request = MoveRequest.for_bundle(
        bundle,
        repo=repo_name,
        alias=alias,
        rule=rule.rule,
        mover=rule.mover,
        rollback=rollback,
        **found.request,
    )
    return as_rollback(request, signed_earlier), bytes(found.manifest.raw)


def decide(request: MoveRequest) -> AliasDecision:
    """attest.alias_decision.decide_move, its refusal answered as the registry answers it
    (moves.refusals)."""
    try:
        return decide_move(request)
    except AliasMoveRefused as refused:
        raise http_error(refused) from refused


def require_move_allowed(
    state: AppState, *, repo_name: str, alias: str, digest: str, mover: Caller
) -> MoveRequest:
    """Steps (1) to (5) of ``mover`` moving ``repo_name@alias`` to ``digest``: what the
    registry checks again before it publishes a signed move (the reviewers' signatures are
    its approvals: step (6) is not judged here; nor are the promotion gates of a rollback
    to a release the alias held under valid signatures, moves.rollback). Returns the
    request decided, for ``decide_again`` in the transaction that publishes the move."""
    request, _ = read_move(
        state, repo_name=repo_name, alias=alias, digest=digest, rollback=False, caller=mover
    )
    request = replace(request, approvers=None, judged=request.judged - {"6"})
    decide(request)
    return request


def decide_again(session: Session, request: MoveRequest, *, mover: Caller) -> AliasDecision:
    """``request`` (from ``require_move_allowed``) decided again on what ``session``, the
    write transaction that publishes the move, reads now: the bundle still live (Gone) and
    step (2), the quarantine. The transaction rule (as ``aliases.service._swap``): a fact a
    refusal rests on is read again in the transaction that acts on the verdict, so a
    quarantine or a deletion committed after the first check counts."""
    repo = get_repo(session, request.repo, mover)
    bundle = live_bundle(session, repo, request.digest)
    fresh = repository.fresh_facts(session, repo, bundle, alias=request.alias, caller=mover)
    return decide(replace(request, quarantine=fresh["quarantine"]))


def dry_run(
    state: AppState, *, repo_name: str, alias: str, digest: str, rollback: bool, caller: Caller
) -> dict[str, Any]:
    """Every step of a move of ``repo_name@alias`` to ``digest`` by ``caller``, judged and
    reported (attest.alias_decision.decide_move_result): nothing moves, nothing is proposed.
    Audited as ``alias.dry_run`` with the verdict and the reasons refused, unless the same
    principal ran the same dry run with the same outcome lately or is over its dry runs a
    minute (``state.dry_runs``: counted, not audited). Raises BadRequest
    (alias name), NotFound (repository, bundle), Gone (deleted bundle)."""
    request, _ = read_move(
        state,
        repo_name=repo_name,
        alias=alias,
        digest=digest,
        rollback=rollback,
        caller=caller,
        every_check=True,
    )
    report = decide_move_result(request)
    subject = f"{repo_name}@{alias}"
    refused = [r.reason.value for r in report.refusals]
    # the same dry run with the same outcome is audited once per window, and a principal's
    # dry runs add a bounded number of events a minute (registry/domains/_verdict_cache.py)
    if state.dry_runs.admit(caller.name, subject, digest, str(report.allowed), *refused):
        with state.db.write() as session:
            append(
                session,
                actor=caller.name,
                action="alias.dry_run",
                subject=subject,
                details={"to": digest, "allowed": report.allowed, "refused": refused},
            )
    answer = report_json(report)
    answer["dry_run"] = True
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
    repo = authorized_repo(session, repo_name)  # its caller decided the move
    current = _alias_row(session, repo, alias)
    if current is not None and current.digest == digest and signed_by is not None:
        return current  # the registry's word already agreed with the signed decision
    if rollback is None:
        rollback = digest in repository.earlier_targets(session, current)
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
            raise stale_version(current, alias, version)
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
    if rollback:
        details["emergency"] = True  # the way back in an incident (docs/operations.md)
    append(
        session,
        actor=actor if signed_by is None else signed_by,
        action="alias.rollback" if rollback else "alias.set",
        subject=f"{repo_name}@{alias}",
        details=details,
    )
    return row


def stale_version(current: Alias | None, alias: str, expected: int) -> StaleVersion:
    state = state_json(current, alias)
    return StaleVersion(
        f"alias {alias} is at version {state['version']}, not {expected}: re-read and retry",
        detail=state,
    )
