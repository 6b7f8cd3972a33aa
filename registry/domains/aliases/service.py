"""Aliases ``org/name@alias``: compare-and-swap moves under the policy's alias rules.

``set_alias`` checks, in order (docs/registry.md#aliases):
  (1) an alias rule matches (none: nobody may move it) and names the caller's principal or
      role (a publisher also needs to publish to this repository);
  (2) the bundle exists, is not tombstoned and not quarantined;
  (3) the repository's current policy still allows the bundle: the one bundle verifier
      (attest.verifier) judges it as it is now, scanning the stored layers again under the
      current policy and re-verifying every attestation that is not retracted;
  (4) protected aliases: k approvals by reviewers other than the publisher and the mover,
      a trusted determinism baseline, and replay results, as the rule requires (baselines and
      replay results count only when a reader, an admin or a policy signer other than the
      publisher and the mover signed them; a replay result counts only against the bundle
      currently on the alias, or against none when the alias has no bundle yet);
  (5) compare-and-swap on the version (a conditional UPDATE; 409 with the current state),
      history row and audit event in the same transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.attestations.repository import live_attestations
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.bundles.service import live_bundle
from modelward.registry.domains.repos.service import (
    get_repo,
    may_publish,
    registered_signer_name,
    repo_policy,
)
from modelward.registry.errors import (
    BadRequest,
    BundleQuarantined,
    Forbidden,
    NotFound,
    Refused,
    StaleVersion,
)
from modelward.registry.models import (
    Alias,
    AliasHistory,
    Approval,
    Identity,
    Principal,
    Repository,
    SigningKey,
)

if TYPE_CHECKING:
    from modelward.attest.policy import Policy
    from modelward.attest.trust import Signer

__all__ = ["approve", "get_alias", "history", "set_alias"]

ALIAS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _state_json(row: Alias | None, alias: str) -> dict[str, Any]:
    if row is None:
        return {"alias": alias, "digest": None, "version": 0}
    return {"alias": row.name, "digest": row.digest, "version": row.version}


def _alias_row(session: Session, repo: Repository, alias: str) -> Alias | None:
    return session.execute(
        select(Alias).where(Alias.repo_id == repo.id, Alias.name == alias)
    ).scalar_one_or_none()


def get_alias(session: Session, repo_name: str, alias: str) -> dict[str, Any]:
    repo = get_repo(session, repo_name)
    row = _alias_row(session, repo, alias)
    if row is None:
        raise NotFound(f"no alias {repo_name}@{alias}")
    return _state_json(row, alias)


def history(session: Session, repo_name: str, alias: str) -> list[dict[str, Any]]:
    repo = get_repo(session, repo_name)
    row = _alias_row(session, repo, alias)
    if row is None:
        raise NotFound(f"no alias {repo_name}@{alias}")
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
    rows = session.execute(
        select(Principal.id, Principal.name)
        .join(Approval, Approval.principal_id == Principal.id)
        .where(
            Approval.bundle_id == bundle_id,
            Approval.alias == alias,
            Principal.role.in_(("reviewer", "admin")),
        )
    ).all()
    return sorted({name for pid, name in rows if pid not in exclude})


def _evidence_signers(
    session: Session, policy: Policy, interested: set[int]
) -> Callable[[Signer], bool]:
    """Who may vouch for a determinism baseline or a replay result: a serving worker (reader)
    or an admin by a registered key or identity, or a signer the policy names — never the
    bundle's publisher or the principal moving the alias (``interested``), whose own keys
    and identities are excluded even when a policy also names them."""
    eligible = {
        registered_signer_name(name)
        for pid, name in session.execute(
            select(Principal.id, Principal.name).where(Principal.role.in_(("reader", "admin")))
        ).all()
        if pid not in interested
    }
    own_keys = set(
        session.execute(
            select(SigningKey.keyid).where(SigningKey.principal_id.in_(interested))
        ).scalars()
    )
    own_identities = {
        f"{i.identity} ({i.issuer})"
        for i in session.execute(
            select(Identity).where(Identity.principal_id.in_(interested))
        ).scalars()
    }
    policy_names = set(policy.signers.names())
    excluded = own_keys | own_identities

    def counts(signer: Signer) -> bool:
        if signer.name in eligible:
            return True
        return signer.name in policy_names and signer.detail not in excluded

    return counts


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
) -> dict[str, Any]:
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
            raise Forbidden(f"no alias rule in {repo_name}'s policy matches {alias!r}")
        by_role = caller.role in rule.roles and (
            caller.role != "publisher" or may_publish(session, repo, caller)
        )
        if caller.name not in rule.principals and not by_role:
            raise Forbidden(
                f"{caller.name} ({caller.role}) may not move {repo_name}@{alias}",
                detail={"pattern": rule.pattern},
            )
        # (2): a live, unquarantined bundle of this repository.
        bundle = live_bundle(session, repo, digest)
        if bundle.quarantined:
            raise BundleQuarantined(f"bundle {digest} is quarantined: {bundle.quarantine_reason}")
        # (3): the current policy still allows it (judged below, outside the transaction).
        manifest = parse_manifest(bundle.manifest)
        stored = [a.data for a in session.execute(live_attestations(bundle.id)).scalars()]
        trust = verdict.trust_for(session, repo, policy, state)
        publisher_id = bundle.created_by
        approvers = _approvers(session, bundle.id, alias, {publisher_id, caller.id})
        vouches = _evidence_signers(session, policy, {publisher_id, caller.id})
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
    # (4): protected-alias requirements.
    if rule.protected:
        if len(approvers) < rule.approvals:
            raise Forbidden(
                f"{repo_name}@{alias} needs {rule.approvals} approval(s) by reviewers other "
                f"than the publisher; {digest} has {len(approvers)}",
                detail={"have": approvers, "need": rule.approvals},
                code="approvals_required",
            )
        # Baselines and replay results are a serving worker's evidence: only statements a
        # signer other than the publisher and the mover vouched for count.
        by_type = {
            t: [
                s
                for s in trusted.statements
                if s.predicate_type == t and any(vouches(signer) for signer in s.signers)
            ]
            for t in (PredicateType.BASELINE, PredicateType.REPLAY)
        }
        reference = current_digest  # the bundle on the alias now (None: the alias is new)
        replays = [s for s in by_type[PredicateType.REPLAY] if _against(s) == reference]
        if rule.require_baseline and not by_type[PredicateType.BASELINE]:
            raise Refused(
                f"{repo_name}@{alias} needs a trusted determinism baseline for {digest}",
                code="baseline_required",
            )
        if rule.replay is not None and not _replay_ok(
            replays, rule.replay.min_consecutive, rule.replay.max_divergences
        ):
            against = f"against {reference}" if reference else "against no bundle"
            raise Refused(
                f"{repo_name}@{alias} needs a trusted replay result {against} (the bundle "
                f"on the alias now) with at least {rule.replay.min_consecutive} consecutive "
                f"matches and at most {rule.replay.max_divergences} divergences",
                code="replay_required",
            )
    if rollback and digest not in earlier:
        raise BadRequest(
            f"{digest} was never an earlier target of {repo_name}@{alias}", code="not_a_rollback"
        )
    is_rollback = rollback or digest in earlier
    # (5): compare-and-swap, history and audit in one transaction.
    return _swap(
        state=state,
        repo_name=repo_name,
        alias=alias,
        digest=digest,
        expected=expected_version,
        reason=reason,
        rollback=is_rollback,
        caller=caller,
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
    caller: Caller,
) -> dict[str, Any]:
    now = datetime.now(UTC)
    with state.db.write() as session:
        repo = get_repo(session, repo_name)
        bundle = live_bundle(session, repo, digest)
        if bundle.quarantined:
            raise BundleQuarantined(f"bundle {digest} is quarantined: {bundle.quarantine_reason}")
        current = _alias_row(session, repo, alias)
        if expected == 0:
            if current is not None:
                raise _stale(current, alias, expected)
            row = Alias(repo_id=repo.id, name=alias, digest=digest, version=1, updated_at=now)
            session.add(row)
            session.flush()
            from_digest = None
        else:
            result = session.execute(
                update(Alias)
                .where(Alias.repo_id == repo.id, Alias.name == alias, Alias.version == expected)
                .values(digest=digest, version=Alias.version + 1, updated_at=now)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise _stale(current, alias, expected)
            assert current is not None  # noqa: S101 - the UPDATE matched a row
            from_digest = current.digest
            session.expire(current)
            row = current
        session.add(
            AliasHistory(
                alias_id=row.id,
                version=row.version,
                from_digest=from_digest,
                to_digest=digest,
                actor=caller.name,
                at=now,
                reason=reason,
                rollback=rollback,
            )
        )
        append(
            session,
            actor=caller.name,
            action="alias.rollback" if rollback else "alias.set",
            subject=f"{repo_name}@{alias}",
            details={"from": from_digest, "to": digest, "version": row.version, "reason": reason},
        )
        return _state_json(row, alias)


def _stale(current: Alias | None, alias: str, expected: int) -> StaleVersion:
    state = _state_json(current, alias)
    return StaleVersion(
        f"alias {alias} is at version {state['version']}, not {expected}: re-read and retry",
        detail=state,
    )


def approve(
    session: Session, *, repo_name: str, digest: str, alias: str, caller: Caller
) -> list[str]:
    """Record the caller's approval of ``digest`` for ``alias``; returns every approver."""
    if caller.role not in ("reviewer", "admin"):
        raise Forbidden("only reviewers and admins may approve")
    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    repo = get_repo(session, repo_name)
    bundle = live_bundle(session, repo, digest)
    if bundle.created_by == caller.id:
        raise Forbidden("the publisher of a bundle may not approve it (two-person rule)")
    if bundle.quarantined:
        raise BundleQuarantined(f"bundle {digest} is quarantined: {bundle.quarantine_reason}")
    exists = session.execute(
        select(Approval.id).where(
            Approval.bundle_id == bundle.id,
            Approval.alias == alias,
            Approval.principal_id == caller.id,
        )
    ).first()
    if exists is None:
        session.add(Approval(bundle_id=bundle.id, alias=alias, principal_id=caller.id))
        session.flush()
    append(
        session,
        actor=caller.name,
        action="bundle.approve",
        subject=f"{repo_name}@{digest}",
        details={"alias": alias},
    )
    return _approvers(session, bundle.id, alias, {bundle.created_by})
