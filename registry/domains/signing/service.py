"""Signed decisions: the registry's side of its TUF repository (docs/tuf.md).

Every alias move and every quarantine the registry records is also proposed as the next
version of the TUF role that decides it (``registry.domains.signing.tuf.proposals``). Who signs it:

- the registry's online alias key, for ``online: true`` alias rules: published at once;
- the repository's publishers (``alias set --key``), threshold 1;
- reviewers (``approve --key``), threshold = the rule's approvals, never the proposer or the
  bundle's publisher: their signatures *are* the approvals;
- reviewers, threshold 1, for the quarantine (``quarantine --key``).

A proposal that reaches its threshold is published (role, snapshot, timestamp) and, for an
alias, the alias row follows the signed decision in the same transaction. A move recorded
on the registry's word alone stays *unsigned* until then; ``signed_aliases`` is how every
listing shows it. Delegation changes (repositories, policies, keys) re-make top-level
targets: signed at once with an online targets key (the embedded default), else left as a
proposal for the admins (``modelward trust sign``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Delegations, Metadata, Root, Targets
from tuf.api.serialization import DeserializationError

from modelward.attest.alias_decision import MoveRequest
from modelward.attest.rollout.paths import rollout_path
from modelward.attest.tuf import (
    QUARANTINE_ROLE,
    alias_path,
    online_role,
    open_role,
    proposal_changes,
    quarantine_path,
)
from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.moves.service import (
    decide_again,
    record_move,
    require_move_allowed,
)
from modelward.registry.domains.signing.tuf.bootstrap import (
    bootstrap_embedded,
    delegated_as_wanted,
    open_repository,
    refresh_health,
    sync_delegations,
)
from modelward.registry.domains.signing.tuf.bootstrap import row_seals as tuf_row_seals
from modelward.registry.domains.signing.tuf.keys import (
    ALIAS_KEY,
    ONLINE_ROLES,
    OnlineKeys,
    TufKeyUnavailable,
    next_role,
    tuf_keys,
)
from modelward.registry.domains.signing.tuf.proposals import (
    ADOPT_TARGET,
    RESIGN_TARGET,
    TARGETS_ROLE,
    Added,
    NextDelegation,
    add_signature,
    delegated_role_for,
    propose_changes,
    propose_target,
    signing_role,
    withdraw_signatures,
)
from modelward.registry.domains.signing.tuf.repository import (
    Expiries,
    MetadataRepository,
    MetadataRowRefused,
    row_refusal,
)
from modelward.registry.domains.signing.tuf.rotation import (
    short_of_threshold,
    signed_version,
    wanted_delegations,
)
from modelward.registry.domains.signing.tuf.seals import RowSeals
from modelward.registry.domains.signing.tuf.store import SessionStore, beyond_refusal
from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound, RegistryError
from modelward.registry.models import Principal, SigningKey, TufProposal, utcnow
from modelward.registry.settings import Settings

__all__ = [
    "DB_WRITER_OFFLINE",
    "DB_WRITER_ONLINE",
    "NotRefreshed",
    "Refreshed",
    "RevocationFailed",
    "Trust",
    "adopt",
    "ensure_root",
    "key_revoked",
    "list_proposals",
    "proposal_json",
    "propose_alias",
    "propose_quarantine",
    "propose_resign",
    "refresh",
    "row_seals",
    "sign_proposal",
    "signed_aliases",
    "signers_left",
    "status",
    "trust_of",
    "withdraw_approval_signatures",
]

log = logging.getLogger("modelward.registry")
PROPOSAL_PAGE = 200

# What the registry says about someone who can write its database (docs/tuf.md#keys), in
# ``serve``'s start-up and ``trust status``.
DB_WRITER_ONLINE = (
    "the TUF targets key is ONLINE (the embedded default): the registry signs the "
    "delegations itself, from database rows it sealed with its row key (principals, "
    "signing_keys, publishers, policies), so a database writer cannot add a key that signs "
    "aliases; anyone who can read the registry's keys directory can sign every alias "
    "decision until `modelward trust init` takes the root and targets keys offline "
    "(docs/tuf.md#keys)"
)
DB_WRITER_OFFLINE = (
    "the TUF targets key is offline: a delegation change (a key, a reviewer, a publisher, "
    "a policy) waits as a targets proposal until the admins sign it (`modelward trust "
    "sign`), and a row the registry did not seal counts for nothing, so a database writer "
    "cannot add a key to any role (docs/tuf.md#keys)"
)


@dataclass(frozen=True)
class Trust:
    """The registry's TUF keys and lifetimes (from the settings)."""

    keys: OnlineKeys
    expiries: Expiries


def trust_of(settings: Settings) -> Trust:
    return Trust(
        keys=tuf_keys(settings),
        expiries=Expiries(
            timestamp=timedelta(seconds=settings.tuf_timestamp_expiry_seconds),
            snapshot=timedelta(seconds=settings.tuf_snapshot_expiry_seconds),
        ),
    )


def repository(session: Session, state: AppState) -> MetadataRepository:
    """The TUF repository in ``session``'s transaction. Raises TufKeyUnavailable (503) when
    the online snapshot and timestamp keys are missing: a replica that does not share the
    first one's ``tuf_keys_dir`` must sign nothing (docs/tuf.md#serving)."""
    trust = trust_of(state.settings)
    missing = [role for role in ONLINE_ROLES if not trust.keys.has(role)]
    if missing:
        raise TufKeyUnavailable(
            f"the TUF {' and '.join(missing)} keys are not in {trust.keys.directory}: every "
            "replica of a registry must share one tuf_keys_dir (docs/tuf.md#serving)"
        )
    return open_repository(session, trust.keys, trust.expiries)


def ensure_root(state: AppState) -> bool:
    """Publish the embedded root if the database has none (True if this call did), and
    make the row seal key if the registry has none (``row_seals``)."""
    trust = trust_of(state.settings)
    try:
        with state.db.write() as session:
            made = bootstrap_embedded(
                session, trust.keys, state.default_policy_yaml, trust.expiries
            )
    except IntegrityError:  # another replica bootstrapped first: theirs is the root
        made = False
    row_seals(state)
    return made


def row_seals(state: AppState) -> RowSeals:
    """The registry's row seals (``registry.domains.signing.tuf.bootstrap.row_seals``)."""
    return tuf_row_seals(state.db, trust_of(state.settings).keys)


@dataclass(frozen=True)
class NotRefreshed:
    """One step of a refresh that failed: ``step`` (``delegations``: re-making top-level
    targets from the database; ``snapshot and timestamp``: re-signing them), the error's
    ``code`` and message and, for a stored row the registry refuses, its ``role`` and
    ``version``."""

    step: str
    code: str
    message: str
    role: str | None = None
    version: int | None = None

    @classmethod
    def of(cls, step: str, exc: BaseException) -> NotRefreshed:
        if isinstance(exc, MetadataRowRefused):
            return cls(step, exc.code, exc.message, exc.role, exc.version)
        code = exc.code if isinstance(exc, RegistryError) else type(exc).__name__
        return cls(step, code, str(exc)[:500])

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "code": self.code,
            "message": self.message,
            "role": self.role,
            "version": self.version,
        }


@dataclass(frozen=True)
class Refreshed:
    """What ``refresh`` did: whether anything new was signed or proposed, and every step
    it could not do (``failed``; empty when all went well)."""

    changed: bool
    failed: tuple[NotRefreshed, ...] = ()


class _Abandoned(Exception):  # noqa: N818 - control flow: roll the refresh back
    """Raised inside the refresh's transaction so that nothing of a failed one is kept."""


def refresh(state: AppState) -> Refreshed:
    """Re-sign snapshot and timestamp past half-life (and over a newer stored row that does
    not verify), and bring the delegations in line with the database. Every step that
    fails is reported (``Refreshed.failed``: which step, why, the stored row at fault),
    logged (``tuf_refresh_failed``), counted (``modelward_tuf_refresh_failures_total``) and
    shown by ``trust status``; a failed re-signing keeps nothing of this refresh. Raises
    TufKeyUnavailable (503) when this replica holds no online keys."""
    failed: list[NotRefreshed] = []
    changed = False
    try:
        with state.db.write() as session:
            repo = repository(session, state)
            synced = sync(session, state, repo, proposer_id=None, failed=failed)
            try:
                changed = repo.refresh() or synced is not False
            except (TufKeyUnavailable, IntegrityError):
                raise
            except Exception as exc:  # any other failure: reported, nothing kept
                failed.append(NotRefreshed.of("snapshot and timestamp", exc))
                _log_failure("tuf_refresh_failed", exc)
                raise _Abandoned from exc
    except _Abandoned as abandoned:
        changed = False
        refresh_health(error=abandoned.__cause__, record=True)
        return Refreshed(changed, tuple(failed))
    except IntegrityError:  # another replica signed the same versions first
        refresh_health(record=True)
        return Refreshed(False, tuple(failed))
    except Exception as exc:
        refresh_health(error=exc, record=True)
        _log_failure("tuf_refresh_failed", exc)
        raise
    refresh_health(record=True)  # snapshot and timestamp: re-signed as due
    return Refreshed(changed, tuple(failed))


def _log_failure(event: str, exc: BaseException) -> None:
    log.error(
        json.dumps(
            {
                "event": event,
                "exception": type(exc).__name__,
                "message": str(exc)[:500],
            }
        )
    )


def sync(
    session: Session,
    state: AppState,
    repo: MetadataRepository,
    *,
    proposer_id: int | None,
    failed: list[NotRefreshed] | None = None,
) -> bool | TufProposal:
    """``sync_delegations``; a failure leaves the delegations as they are (a proposal is
    then checked against the published ones, never against none): it is logged
    (``tuf_sync_failed``) and, when ``failed`` is given, added to it for the caller to
    report (``refresh``, ``POST /v1/tuf/sync``)."""
    try:
        return sync_delegations(
            session,
            repo,
            trust_of(state.settings).keys,
            state.default_policy_yaml,
            proposer_id=proposer_id,
        )
    except Exception as exc:  # noqa: BLE001 - any failure: keep the published delegations
        _log_failure("tuf_sync_failed", exc)
        if failed is not None:
            failed.append(NotRefreshed.of("delegations", exc))
        return False


def _supersede(session: Session, target: str) -> None:
    for old in session.scalars(
        select(TufProposal).where(TufProposal.target == target, TufProposal.state == "pending")
    ):
        old.state, old.decided_at = "superseded", utcnow()


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
    _supersede(session, path)
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
        signer = trust_of(state.settings).keys.signer(ALIAS_KEY)
        md = Metadata[Targets].from_bytes(proposal.payload)
        signature = signer.sign(md.signed_bytes)
        add_signature(
            session, repo, proposal, keyid=signature.keyid, signature_hex=signature.signature
        )
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
    """Propose adding ``digest`` to the quarantine role (reviewers sign, threshold 1); the
    target's signed ``custom`` carries ``{"reason": reason}`` for workers to show."""
    repo = repository(session, state)
    sync(session, state, repo, proposer_id=caller.id)
    path = quarantine_path(digest)
    _supersede(session, path)
    return propose_target(
        session,
        repo,
        path=path,
        data=manifest,
        proposer_id=caller.id,
        reason=reason,
        from_digest=None,
        to_digest=digest,
        custom={"reason": reason},
    )


def adopt(state: AppState, *, caller: Caller) -> list[dict[str, Any]]:
    """The migration step (docs/tuf.md#migration): one proposal per role holding every alias
    the registry recorded on its word alone (no signed version names its digest), for the
    role's signers to sign (``modelward trust sign``); online roles are signed at once.
    Aliases already proposed as they are now are left to those proposals. An alias row
    whose bundle is quarantined, deleted or missing (a database writer's edit, or a bundle
    withdrawn since) is not proposed: it is skipped, and the audit event ``tuf.adopt``
    names it with why. Each adopted alias is still decided when its proposal is signed
    (``sign_proposal``); one an online role holds, which the registry signs here, is
    decided here, and skipped when refused."""
    from modelward.registry.models import Alias, Bundle, QuarantinedDigest, Repository

    with state.db.write() as session:
        repo = repository(session, state)
        sync(session, state, repo, proposer_id=caller.id)
        pending = {
            (p.target, p.to_digest)
            for p in session.scalars(select(TufProposal).where(TufProposal.state == "pending"))
        }
        by_role: dict[str, dict[str, bytes | None]] = {}
        online_roles: set[str] = set()
        rows = session.execute(
            select(
                Repository.name,
                Alias.name,
                Alias.digest,
                Bundle.manifest,
                Bundle.tombstoned,
                QuarantinedDigest.digest,
            )
            .join(Alias, Alias.repo_id == Repository.id)
            .outerjoin(Bundle, (Bundle.repo_id == Alias.repo_id) & (Bundle.digest == Alias.digest))
            .outerjoin(QuarantinedDigest, QuarantinedDigest.digest == Alias.digest)
            .order_by(Repository.name, Alias.name)
        ).all()
        signed: dict[str, dict[str, str]] = {}
        skipped: list[dict[str, str]] = []
        for repo_name, alias, digest, manifest, tombstoned, held in rows:
            why = (
                "no such bundle in the repository"
                if manifest is None
                else "the bundle was deleted"
                if tombstoned
                else "the bundle is quarantined"
                if held is not None
                else None
            )
            if why is not None:
                skipped.append({"alias": f"{repo_name}@{alias}", "digest": digest, "why": why})
                continue
            if repo_name not in signed:
                signed[repo_name] = signed_aliases(session, repo_name)
            path = alias_path(repo_name, alias)
            if signed[repo_name].get(alias) == digest or (path, digest) in pending:
                continue
            try:
                deciding = delegated_role_for(repo, path)
            except NotFound:
                continue
            if deciding.name == online_role(repo_name):
                # the registry's own key signs this role below, at once: the move is decided
                # first (steps (1)-(5), the adopter the mover) as ``sign_proposal`` decides
                # the others, its quarantine read again in this transaction
                try:
                    request = require_move_allowed(
                        state, repo_name=repo_name, alias=alias, digest=digest, mover=caller
                    )
                    decide_again(session, request, mover=caller)
                except RegistryError as exc:
                    why = f"{exc.code}: {exc.message}"[:500]
                    skipped.append({"alias": f"{repo_name}@{alias}", "digest": digest, "why": why})
                    continue
                online_roles.add(deciding.name)
            by_role.setdefault(deciding.name, {})[path] = bytes(manifest)
        made = []
        for role, changes in sorted(by_role.items()):
            proposal = propose_changes(
                session,
                repo,
                role,
                changes,
                proposer_id=caller.id,
                label=ADOPT_TARGET,
                reason=f"adopt {len(changes)} alias(es) the registry recorded unsigned",
            )
            if role in online_roles:
                signer = trust_of(state.settings).keys.signer(ALIAS_KEY)
                signature = signer.sign(Metadata[Targets].from_bytes(proposal.payload).signed_bytes)
                add_signature(
                    session,
                    repo,
                    proposal,
                    keyid=signature.keyid,
                    signature_hex=signature.signature,
                )
            made.append(proposal)
        append(
            session,
            actor=caller.name,
            action="tuf.adopt",
            subject="aliases",
            details={
                "proposals": [p.id for p in made],
                "aliases": sum(len(c) for c in by_role.values()),
                "skipped": skipped,
            },
        )
        return [proposal_json(session, repo, p) for p in made]


def key_revoked(session: Session, state: AppState, keyid: str, *, caller: Caller) -> None:
    """In the revocation's own transaction: take ``keyid``'s signatures off every pending
    proposal (they stop counting at once) and bring the delegations in line (the key leaves
    every role: signed at once with an online targets key, else a targets proposal for the
    admins; until they sign it the registry refuses the key's signatures itself). Audited
    as ``tuf.signature.withdraw`` when a proposal lost a signature.

    A revocation the delegations cannot follow is refused, never half done: RevocationFailed
    (409 ``revocation_failed``, the reason) when they cannot be re-made, TufKeyUnavailable
    (503) when this replica holds no TUF keys; the caller's transaction then keeps nothing.
    """
    signers_left(
        session,
        state,
        [keyid],
        why="key revoked",
        refused=f"key {keyid} was not revoked",
        caller=caller,
    )


def signers_left(
    session: Session,
    state: AppState,
    keyids: list[str],
    *,
    why: str,
    refused: str,
    caller: Caller,
) -> None:
    """``key_revoked`` for every key of ``keyids`` at once (a revocation, a principal
    disabled): their signatures come off pending proposals (audited as
    ``tuf.signature.withdraw``, with ``why``) and the delegations are re-made without them,
    in the caller's transaction. Raises RevocationFailed (``refused``: what was not done)
    or TufKeyUnavailable."""
    unsigned = withdraw_signatures(session, keyids)
    if unsigned:
        append(
            session,
            actor=caller.name,
            action="tuf.signature.withdraw",
            subject=", ".join(keyids)[:500],
            details={"proposals": [p.id for p in unsigned], "why": why},
        )
    repo = repository(session, state)
    try:
        sync_delegations(
            session,
            repo,
            trust_of(state.settings).keys,
            state.default_policy_yaml,
            proposer_id=caller.id,
        )
    except (RegistryError, ValueError, RepositoryError) as exc:
        raise RevocationFailed(
            f"{refused}: the TUF delegations could not be re-made without "
            f"{'it' if len(keyids) == 1 else 'its keys'} ({type(exc).__name__}: "
            f"{str(exc)[:500]}); nothing was changed",
            detail={"keyids": keyids, "reason": type(exc).__name__},
        ) from exc


class RevocationFailed(Conflict):
    """409: a key's revocation refused because the delegations could not follow it."""

    code = "revocation_failed"


def withdraw_approval_signatures(
    session: Session, *, repo_name: str, alias: str, digest: str, caller: Caller
) -> list[int]:
    """``caller`` withdraws the approval of ``repo_name@alias`` -> ``digest``: the signatures
    of every key ``caller`` registered come off the pending proposals making that move, in
    the withdrawal's transaction. The proposals' ids; audited as ``tuf.signature.withdraw``.
    """
    keyids = list(
        session.scalars(select(SigningKey.keyid).where(SigningKey.principal_id == caller.id))
    )
    unsigned = withdraw_signatures(
        session, keyids, target=alias_path(repo_name, alias), to_digest=digest
    )
    if unsigned:
        append(
            session,
            actor=caller.name,
            action="tuf.signature.withdraw",
            subject=f"{repo_name}@{alias}",
            details={"proposals": [p.id for p in unsigned], "to": digest, "why": "withdrawn"},
        )
    return [p.id for p in unsigned]


def _alias_of(proposal: TufProposal) -> tuple[str, str] | None:
    """(repository, alias) of a proposal that moves one alias; None for any other (an
    adoption's target is ``ADOPT_TARGET``: ``_moves_of`` reads its aliases)."""
    repo, sep, alias = proposal.target.partition("/aliases/")
    return (repo, alias) if sep and proposal.role != TARGETS_ROLE else None


def _moves_of(repo: MetadataRepository, proposal: TufProposal) -> list[tuple[str, str, str]]:
    """(repository, alias, digest) of every alias move publishing ``proposal`` makes: its
    one alias, or for an adoption every target its payload sets against the role version
    it was made from (its newest that verifies), read from the bytes to be signed
    (attest.tuf.proposal_changes).
    Raises Conflict for an adoption that changes anything but alias targets."""
    target = _alias_of(proposal)
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
def _naming(
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


def _is_protected(role: str, repo_name: str) -> bool:
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
    target = _alias_of(p)
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
            adopted = _moves_of(repo, p)
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
    row = session.get(TufProposal, proposal_id)
    if row is None:
        raise NotFound(f"no TUF proposal {proposal_id}")
    return proposal_json(session, repository(session, state), row, payload=True)


def _excluded(
    session: Session,
    p: TufProposal,
    moves: list[tuple[str, str, str]],
    default_policy_yaml: str | None,
) -> dict[int, str]:
    """The two-person rule of protected aliases: not the proposer, not the publisher of a
    bundle the proposal moves an alias to (for an adoption: of any adopted bundle)."""
    from modelward.registry.models import Bundle, Repository

    target = _alias_of(p)
    repos = {m[0] for m in moves} | ({target[0]} if target is not None else set())
    if not any(_is_protected(p.role, r) for r in repos):
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
        row = session.get(TufProposal, proposal_id)
        if row is None:
            raise NotFound(f"no TUF proposal {proposal_id}")
        target = _alias_of(row)
        proposer = session.get(Principal, row.created_by)
        # only the signature that meets the threshold publishes: the gates (a re-scan of
        # the bundle among them) are checked for that one, not for every signature
        collected = {s["keyid"] for s in json.loads(row.signatures)} | {keyid}
        tuf = repository(session, state)
        try:
            threshold = signing_role(tuf, row)[2]
        except NotFound:
            threshold = 0
        moves = _moves_of(tuf, row) if row.state == "pending" else []
    mover = Caller(id=proposer.id, name=proposer.name, role=proposer.role) if proposer else None
    decided: list[tuple[MoveRequest, Caller]] = []
    if moves and mover is not None and len(collected) >= threshold:
        # the registry's own gates, checked again before it publishes anything
        for repo_name, alias, digest in moves:
            with _naming(row, target, repo_name, alias):
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
            with _naming(proposal, target, request.repo, request.alias):
                decide_again(session, request, mover=by)

    with state.db.write() as session:
        row = session.get(TufProposal, proposal_id)
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
            next_delegation=_next_delegation(session, state, repo, row, keyid),
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


def _next_delegation(
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


_SIGNED_CACHE: OrderedDict[tuple[Any, ...], dict[str, str]] = OrderedDict()
_SIGNED_CACHE_SIZE = 1024
_SIGNED_LOCK = threading.Lock()


def signed_aliases(session: Session, repo_name: str) -> dict[str, str]:
    """alias -> digest as the repository's TUF roles sign them: each role at its newest
    version that verifies against its delegation (a forged row signs nothing).

    Kept per process by the exact bytes involved (top-level targets and the repository's
    newest role rows), so ``alias get`` (a hot path) costs one query until something
    changes."""
    from modelward.attest.tuf import protected_role

    prefix = protected_role(repo_name, "")
    store = SessionStore(session)
    rows = store.latest_rows(prefix)
    seal = hashlib.sha256()
    for role, (version, data) in sorted(rows.items()):
        seal.update(f"{role}\0{version}\0{len(data)}\0".encode())
        seal.update(data)
    key = (repo_name, seal.digest())
    with _SIGNED_LOCK:
        if key in _SIGNED_CACHE:
            _SIGNED_CACHE.move_to_end(key)
            return dict(_SIGNED_CACHE[key])
    roles = sorted(r for r in rows if r.startswith(prefix))
    signed = _signed_aliases(MetadataRepository(store, {}), repo_name, roles)
    with _SIGNED_LOCK:
        _SIGNED_CACHE[key] = signed
        while len(_SIGNED_CACHE) > _SIGNED_CACHE_SIZE:
            _SIGNED_CACHE.popitem(last=False)
    return dict(signed)


def _signed_aliases(repo: MetadataRepository, repo_name: str, roles: list[str]) -> dict[str, str]:
    from tuf.api.exceptions import UnsignedMetadataError

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


def status(session: Session, state: AppState) -> dict[str, Any]:
    """Every role's latest version and expiry, which expire soon, the keys held online, every
    delegated role short of its threshold now (``short_of_threshold``: role, threshold,
    valid_signers, keys, version, decides; ``signing.tuf.rotation``), any stored row refused
    (``MetadataRowRefused``: it does not parse, or snapshot/timestamp not
    signed by root's key), and how this process's re-signing went (``refresh``). Reads
    only: it answers even while a key file is unusable (what ``refresh`` then reports)."""
    store = SessionStore(session)
    repo = MetadataRepository(store, {}, expiries=trust_of(state.settings).expiries)
    now = repo.clock()
    chain = repo.root_chain()

    def shown(role: str, version: int, data: bytes) -> dict[str, Any]:
        md: Metadata[Any] = Metadata.from_bytes(data)
        left = md.signed.expires - now
        return {
            "role": role,
            "version": version,
            "expires": iso(md.signed.expires),
            "expires_soon": left <= repo.expiries.of(role) / 4,
            "expired": left.total_seconds() <= 0,
        }

    roles = []
    for role, version in sorted(repo.store.latest_versions().items()):
        data = repo.store.read(role, version)
        if data is None:  # pragma: no cover - listed versions exist
            continue
        refused = row_refusal(role, version, data)
        current: tuple[bytes | None, int | None] = (data, version)
        if role in ONLINE_ROLES:
            current = repo.current_row(role)
            if refused is None and current[1] != version:
                refused = MetadataRowRefused(role, version, "not signed by root's key for it")
        elif role == Root.type:
            current = (chain[-1], len(chain)) if chain else (None, None)
            if refused is None and version > len(chain):
                refused = MetadataRowRefused(role, version, "not signed as a rotation of the root")
        if refused is None:
            roles.append(shown(role, version, data))
            continue
        # the version the registry builds on and serves, then the newer row it refuses
        if role in (*ONLINE_ROLES, Root.type) and current[0] is not None and current[1]:
            roles.append(shown(role, current[1], current[0]))
        roles.append(
            {
                "role": role,
                "version": version,
                "expires": None,
                "expires_soon": False,
                "expired": False,
                "refused": str(refused),
            }
        )
    for role, version in sorted(store.beyond_versions().items()):  # no version can follow
        refusal = str(beyond_refusal(role, version))
        roles.append({"role": role, "version": version, "expires": None, "refused": refusal})
        roles[-1].update(expires_soon=False, expired=False)
    keys = trust_of(state.settings).keys
    held = [r for r in ("root", "targets", "snapshot", "timestamp", ALIAS_KEY) if keys.has(r)]
    pending = session.scalar(
        select(func.count()).select_from(TufProposal).where(TufProposal.state == "pending")
    )
    online_targets = "targets" in held
    health = refresh_health()
    try:
        short = [role.as_json() for role in short_of_threshold(repo)]
    except (RepositoryError, RegistryError) as exc:  # a refused row: named in ``roles``
        _log_failure("tuf_status_short_unknown", exc)
        short = []
    return {
        "roles": roles,
        "short_of_threshold": short,
        "online_keys": held,
        "embedded": "root" in held,
        "targets_key": "online" if online_targets else "offline",
        "protects_against_db_writer": True,
        "db_writer": DB_WRITER_ONLINE if online_targets else DB_WRITER_OFFLINE,
        "pending_proposals": int(pending or 0),
        "refresh": {
            "failing": health.failing,
            "failures": health.failures,
            "last_error": health.last_error,
            "last_failure": iso(health.last_failure),
            "last_success": iso(health.last_success),
        },
    }


def install_root(state: AppState, data: bytes, *, caller: Caller) -> dict[str, Any]:
    """Keep the next root version (``trust init``/``trust rotate``). When the registry holds
    the current root key online (the embedded default) it adds its signature, which is
    what the old root's threshold needs; root and targets keys the new root no longer
    lists are deleted from the registry. Audited as ``tuf.root``."""
    from securesystemslib.signer import Signature

    if len(data) > 1 << 20:
        raise BadRequest("root metadata larger than 1 MiB")
    try:
        md = Metadata[Root].from_bytes(data)
    except Exception as exc:
        raise BadRequest(f"not TUF root metadata: {type(exc).__name__}: {exc}") from exc
    keys = trust_of(state.settings).keys
    with state.db.write() as session:
        repo = repository(session, state)
        old_targets = list(repo.root().roles[Targets.type].keyids)
        if keys.has("root"):
            signer = keys.signer("root")
            if signer.public_key.keyid in repo.root().roles[Root.type].keyids:
                own: Signature = signer.sign(md.signed_bytes)
                md.signatures[own.keyid] = own
        try:
            repo.install_root(md.to_bytes())
        except Exception as exc:
            raise BadRequest(
                f"root version {md.signed.version} refused: {type(exc).__name__}: {exc}",
                code="root_refused",
            ) from exc
        offline = [
            role
            for role in ("root", "targets")
            if keys.has(role)
            and keys.signer(role).public_key.keyid not in md.signed.roles[role].keyids
        ]
        # online keys rotated (``trust rotate --online``): the new root names the next keys
        promoted = [
            role
            for role in ONLINE_ROLES
            if keys.has(next_role(role))
            and keys.signer(next_role(role)).public_key.keyid in md.signed.roles[role].keyids
        ]
        append(
            session,
            actor=caller.name,
            action="tuf.root",
            subject=f"root v{md.signed.version}",
            details={
                "root_keys": md.signed.roles[Root.type].keyids,
                "targets_keys": md.signed.roles[Targets.type].keyids,
                "now_offline": offline,
            },
        )
        # snapshot and timestamp are signed again under the new root right away; new targets
        # keys need a new targets version: signed here if the registry holds the key, else
        # a proposal for the admins (``trust init`` signs it with the new keys)
        repo.signers = {r: s for r, s in keys.signers().items() if r not in offline}
        for role in promoted:
            repo.signers = {**repo.signers, role: [keys.signer(next_role(role))]}
        if list(md.signed.roles[Targets.type].keyids) != old_targets:
            sync_delegations(
                session, repo, keys, state.default_policy_yaml, proposer_id=caller.id, force=True
            )
        repo.do_snapshot(force=True)
        repo.do_timestamp(force=True)
        held = sorted(repo.signers)
    for role in offline:  # only once the new root is committed
        keys.forget(role)
    for role in promoted:
        keys.promote(role)
    return {"version": md.signed.version, "online_keys": held, "rotated": promoted}


def next_online_keys(state: AppState, *, caller: Caller) -> dict[str, Any]:
    """New snapshot and timestamp keys for a rotation, kept as ``ROLE.next.key`` until a
    root naming them is installed (an existing next key is reused): their public halves,
    as TUF keys, for the admins to put in the next root. Audited as ``tuf.online_keys``."""
    keys = trust_of(state.settings).keys
    answer = {}
    for role in ONLINE_ROLES:
        keys.create(next_role(role))
        public = keys.signer(next_role(role)).public_key
        answer[role] = {"keyid": public.keyid, "key": public.to_dict()}
    with state.db.write() as session:
        append(
            session,
            actor=caller.name,
            action="tuf.online_keys",
            subject="next",
            details={role: a["keyid"] for role, a in answer.items()},
        )
    return answer
