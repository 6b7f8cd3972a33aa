"""Proposals: the next version of a delegated role, signed where its keys are
(docs/tuf.md#proposals).

A change to an alias or to the quarantine becomes a proposal: the role's next version with
the change applied, unsigned (``propose_target``). Its signers fetch the payload, sign it on
their own machines and send the signature back (``add_signature``), which checks, in order:

1. the proposal is still pending;
2. it is still the next version of its role (otherwise it is stale: propose again);
3. the key is one the role's delegation names (for top-level ``targets``: one root names),
   it is not revoked, its owner is not excluded by the caller (the two-person rule of
   protected aliases: not the proposer, not the bundle's publisher; the delegation alone
   cannot say who proposed), and its owner has not signed this proposal with another key;
4. the signature verifies over the payload's canonical signed bytes;
5. the signatures that count: those collected before, less any whose key the delegation
   no longer names or that was revoked since (``withdraw_signatures`` already took out a
   withdrawn approval's and a revoked key's), with this one; the threshold counts their
   *owners* (principals), not their keys: a reviewer with two keys is one approval.

Once the owners of the signatures that count meet the delegation's threshold the proposal
is published
with ``MetadataRepository.publish_delegated`` (``publish_targets`` for top-level targets),
which checks the threshold again with python-tuf, exactly as a worker will, before anything
is kept; a role that does not verify there is refused for this proposal (``RoleUnverified``,
409), never an error of the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from securesystemslib.exceptions import UnverifiedSignatureError
from securesystemslib.signer import Key, Signature
from sqlalchemy import or_, select
from sqlalchemy.orm import Session
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import DelegatedRole, Delegations, Metadata, TargetFile, Targets

from modelward.attest.errors import StaleProposal
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.tables import TufProposal
from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound, StaleVersion
from modelward.registry.models import Principal, SigningKey, utcnow

__all__ = [
    "RESIGN_TARGET",
    "Added",
    "NextDelegation",
    "RoleUnverified",
    "SignatureRefused",
    "add_signature",
    "delegated_role_for",
    "propose_changes",
    "propose_target",
    "propose_targets",
    "signing_role",
    "withdraw_signatures",
]

TARGETS_ROLE = Targets.type
DELEGATIONS_TARGET = "delegations"  # what a top-level targets proposal changes
ADOPT_TARGET = "adopt"  # a proposal signing several aliases the registry recorded unsigned
RESIGN_TARGET = "resign"  # a role's targets as they are, signed again by its signers' new keys

MAX_SIGNATURE_HEX = 2048


class RoleUnverified(Conflict):
    """The signatures that count do not verify under the role's current delegation."""

    code = "role_unverified"


class SignatureRefused(Forbidden):
    """A signature that does not count for this proposal (named key, reason)."""

    code = "signature_refused"


@dataclass(frozen=True)
class NextDelegation:
    """What a re-signing proposal is checked against and published with: ``role`` as the
    database asks for it now (its signers' newest keys), and the top-level delegations
    with it (``registry.domains.signing.tuf.rotation``)."""

    role: DelegatedRole
    delegations: Delegations


@dataclass(frozen=True)
class Added:
    """What ``add_signature`` did: distinct signers (principals) that count, threshold, and
    whether it published."""

    signatures: int
    threshold: int
    published: bool


def delegated_role_for(repo: MetadataRepository, path: str) -> DelegatedRole:
    """The delegated role that decides ``path``: the first whose patterns match it."""
    targets = repo.targets()
    delegations = targets.delegations
    if delegations is not None:
        for name, _terminating in delegations.get_roles_for_target(path):
            role = (delegations.roles or {}).get(name)
            if role is not None:
                return role
    raise NotFound(f"no TUF role is delegated the target {path} (docs/tuf.md#roles)")


def propose_target(
    session: Session,
    repo: MetadataRepository,
    *,
    path: str,
    data: bytes | None,
    proposer_id: int,
    reason: str | None,
    from_digest: str | None,
    to_digest: str | None,
    delegated_role: DelegatedRole | None = None,
    custom: Mapping[str, Any] | None = None,
) -> TufProposal:
    """A pending proposal setting ``path`` to ``data`` (removing it when None); ``custom``:
    the target's signed ``custom`` field (the quarantine's reason), when given."""
    role = delegated_role or delegated_role_for(repo, path)
    return propose_changes(
        session,
        repo,
        role.name,
        {path: data},
        proposer_id=proposer_id,
        reason=reason,
        label=path,
        from_digest=from_digest,
        to_digest=to_digest,
        custom=custom,
    )


def propose_changes(
    session: Session,
    repo: MetadataRepository,
    role: str,
    changes: Mapping[str, bytes | None],
    *,
    proposer_id: int,
    reason: str | None,
    label: str,
    from_digest: str | None = None,
    to_digest: str | None = None,
    custom: Mapping[str, Any] | None = None,
) -> TufProposal:
    """A pending proposal of ``role``'s next version with every target path in ``changes``
    set to its bytes (removed when None), each with ``custom`` as its signed ``custom``
    field when given; ``label`` is its ``target`` (the one path, or ``ADOPT_TARGET`` for
    several). Made from the role's newest version that verifies under its current
    delegation (``MetadataRepository.propose``); raises RoleUnverified (409) when none of
    the newest ``max_unverified`` does."""

    def change(targets: Targets) -> None:
        for path, data in changes.items():
            if data is None:
                targets.targets.pop(path, None)
            else:
                target = TargetFile.from_data(path, data, ["sha256"])
                if custom is not None:
                    target.unrecognized_fields["custom"] = dict(custom)
                targets.targets[path] = target

    try:
        md = repo.propose(role, change)
    except UnsignedMetadataError as exc:
        raise RoleUnverified(
            f"role {role}: none of its newest {repo.max_unverified} stored versions verifies "
            "under its current delegation, so there is no signed version to make the next "
            f"one from ({exc}); the metadata store was written around the registry",
            detail={"role": role},
        ) from exc
    return _pending(
        session,
        role,
        md,
        label=label,
        proposer_id=proposer_id,
        reason=reason,
        from_digest=from_digest,
        to_digest=to_digest,
    )


def _pending(
    session: Session,
    role: str,
    md: Metadata[Targets],
    *,
    label: str,
    proposer_id: int,
    reason: str | None = None,
    from_digest: str | None = None,
    to_digest: str | None = None,
) -> TufProposal:
    """Keep ``md`` (unsigned) as a pending proposal of ``role``."""
    proposal = TufProposal(
        role=role,
        version=md.signed.version,
        payload=md.to_bytes(),
        signatures="[]",
        target=label,
        from_digest=from_digest,
        to_digest=to_digest,
        reason=reason,
        state="pending",
        created_by=proposer_id,
    )
    session.add(proposal)
    session.flush()
    return proposal


def propose_targets(
    session: Session, repo: MetadataRepository, delegations: Delegations, *, proposer_id: int
) -> TufProposal:
    """A pending proposal of the next top-level targets with ``delegations``, for the admins
    to sign offline; an identical pending one is returned instead of a second."""
    md = repo.next_targets(delegations)
    for pending in session.scalars(
        select(TufProposal).where(TufProposal.role == TARGETS_ROLE, TufProposal.state == "pending")
    ):
        old = Metadata[Targets].from_bytes(pending.payload).signed
        same = old.delegations is not None and old.delegations.to_dict() == delegations.to_dict()
        if same and pending.version == md.signed.version:
            return pending
        pending.state, pending.decided_at = "superseded", utcnow()
    return _pending(session, TARGETS_ROLE, md, label=DELEGATIONS_TARGET, proposer_id=proposer_id)


def signing_role(repo: MetadataRepository, proposal: TufProposal) -> tuple[str, list[str], int]:
    """Who signs ``proposal``: (role name, the keyids that count, threshold)."""
    if proposal.role == TARGETS_ROLE:
        role = repo.root().roles[TARGETS_ROLE]
        return TARGETS_ROLE, list(role.keyids), role.threshold
    delegations = repo.targets().delegations
    delegated = (delegations.roles or {}).get(proposal.role) if delegations else None
    if delegated is None:
        raise NotFound(f"role {proposal.role} is no longer delegated: propose again")
    return delegated.name, list(delegated.keyids), delegated.threshold


def _who_signs(
    repo: MetadataRepository, proposal: TufProposal, next_delegation: NextDelegation | None
) -> tuple[str, list[str], int]:
    if next_delegation is None:
        return signing_role(repo, proposal)
    role = next_delegation.role
    return role.name, list(role.keyids), role.threshold


def _key_of(
    repo: MetadataRepository, role: str, keyid: str, next_delegation: NextDelegation | None
) -> Key:
    if next_delegation is not None:
        return (next_delegation.delegations.keys or {})[keyid]
    delegator = repo.root() if role == TARGETS_ROLE else repo.targets()
    return delegator.get_key(keyid)


def add_signature(
    session: Session,
    repo: MetadataRepository,
    proposal: TufProposal,
    *,
    keyid: str,
    signature_hex: str,
    excluded: Mapping[int, str] | None = None,
    before_publish: Callable[[TufProposal], None] | None = None,
    next_delegation: NextDelegation | None = None,
) -> Added:
    """Check one signature on ``proposal`` (steps 1-4) and publish at threshold.

    ``excluded``: principals whose keys may not sign this proposal, each with the reason
    (the two-person rule). ``before_publish`` runs the registry's own gates (baseline,
    replay) right before publishing and may raise to keep the proposal pending.
    ``next_delegation``: a re-signing proposal (``RESIGN_TARGET``) is checked against the
    role as it is to be delegated, and published with those delegations. Raises
    StaleVersion (``proposal_stale``: the role moved on), SignatureRefused (among others: a
    principal signing a second time with another key), BadRequest, RoleUnverified.
    """
    # (1) only a pending proposal takes signatures
    if proposal.state == "stale":
        raise StaleVersion(
            f"proposal {proposal.id} is stale: {proposal.role} moved on since it was made; "
            "propose again",
            detail={"role": proposal.role, "proposed": proposal.version},
            code="proposal_stale",
        )
    if proposal.state != "pending":
        raise Conflict(f"proposal {proposal.id} is {proposal.state}, not pending")
    # (2) compare-and-swap: the role must still be at the version it was proposed from
    current = repo.store.latest_versions().get(proposal.role, 0)
    if proposal.version != current + 1:
        raise StaleVersion(
            f"proposal {proposal.id} made {proposal.role} version {proposal.version}, but the "
            f"role is at version {current} now: propose again",
            detail={"role": proposal.role, "proposed": proposal.version, "current": current},
            code="proposal_stale",
        )
    md = Metadata[Targets].from_bytes(proposal.payload)
    role_name, keyids, threshold = _who_signs(repo, proposal, next_delegation)
    # (3) a key the delegation names, its owner not excluded (two-person rule)
    if keyid not in keyids:
        raise SignatureRefused(
            f"key {keyid} is not one of the keys role {role_name} is delegated to",
            detail={"role": role_name, "keyid": keyid, "keyids": keyids},
        )
    row = session.get(SigningKey, keyid)
    if row is not None and row.revoked_at is not None:
        raise SignatureRefused(
            f"key {keyid} was revoked; its signatures no longer count",
            detail={"role": role_name, "keyid": keyid},
        )
    owner = row.principal_id if row is not None else None
    if owner is not None and owner in (excluded or {}):
        raise SignatureRefused(
            f"key {keyid} belongs to {(excluded or {})[owner]}; another signer must "
            "approve it (two-person rule)",
            detail={"role": role_name, "keyid": keyid},
        )
    collected, owners = _others(session, proposal, role_name, keyids, keyid)
    # (4) the signature over the canonical signed bytes
    if len(signature_hex) > MAX_SIGNATURE_HEX:
        raise BadRequest(f"signature of key {keyid} is longer than {MAX_SIGNATURE_HEX} hex")
    key = _key_of(repo, role_name, keyid, next_delegation)
    try:
        key.verify_signature(Signature(keyid, signature_hex), md.signed_bytes)
    except UnverifiedSignatureError as exc:
        raise SignatureRefused(
            f"the signature of key {keyid} does not verify over proposal {proposal.id}",
            detail={"role": role_name, "keyid": keyid},
        ) from exc
    # (5) the signatures that count (keys the delegation names now, none revoked since),
    # counted by owner: the threshold is a number of principals, not of keys
    collected[keyid] = signature_hex
    _keep(proposal, collected)
    session.flush()
    signers = len({owners[k] for k in collected})
    if signers < threshold:
        return Added(signers, threshold, published=False)
    if before_publish is not None:
        before_publish(proposal)
    for k, v in collected.items():
        md.signatures[k] = Signature(k, v)
    try:
        if role_name == TARGETS_ROLE:
            repo.publish_targets(md)
        elif next_delegation is not None:
            repo.publish_delegated(role_name, md, delegations=next_delegation.delegations)
        else:
            repo.publish_delegated(role_name, md)
    except StaleProposal as exc:  # pragma: no cover - step 2 ran in this transaction
        raise StaleVersion(str(exc), code="proposal_stale") from exc
    except UnsignedMetadataError as exc:
        raise RoleUnverified(
            f"proposal {proposal.id}: its signatures do not meet the threshold of role "
            f"{role_name} as it is delegated now ({exc}); it stays pending for the signers "
            "the role names now",
            detail={"role": role_name, "keyids": keyids, "threshold": threshold},
        ) from exc
    proposal.state, proposal.decided_at = "published", utcnow()
    # every other pending proposal of this role was made from the version just replaced
    for other in session.scalars(
        select(TufProposal).where(
            TufProposal.role == proposal.role,
            TufProposal.state == "pending",
            TufProposal.id != proposal.id,
        )
    ):
        other.state, other.decided_at = "stale", utcnow()
    session.flush()
    return Added(signers, threshold, published=True)


def _others(
    session: Session, proposal: TufProposal, role: str, keyids: list[str], keyid: str
) -> tuple[dict[str, str], dict[str, int | str]]:
    """The other signatures on ``proposal`` that still count (keys the delegation names
    now, none revoked since) and who each key, ``keyid`` among them, counts as (``_owners``).
    Raises SignatureRefused when ``keyid``'s owner already signed with another key: each
    principal counts once toward a threshold."""
    collected = {
        k: v
        for k, v in _signatures(proposal).items()
        if k in keyids and k != keyid and k not in _revoked(session, [k])
    }
    owners = _owners(session, [*collected, keyid])
    owner = owners[keyid]
    if isinstance(owner, int) and owner in {owners[k] for k in collected}:
        name = session.scalar(select(Principal.name).where(Principal.id == owner))
        raise SignatureRefused(
            f"{name} already signed proposal {proposal.id} with another key; each principal "
            "counts once toward the threshold: another signer must approve it",
            detail={"role": role, "keyid": keyid, "principal": name},
        )
    return collected, owners


def _signatures(proposal: TufProposal) -> dict[str, str]:
    return {s["keyid"]: s["sig"] for s in json.loads(proposal.signatures)}


def _keep(proposal: TufProposal, signatures: Mapping[str, str]) -> None:
    proposal.signatures = json.dumps(
        [{"keyid": k, "sig": v} for k, v in sorted(signatures.items())]
    )


def _owners(session: Session, keyids: list[str]) -> dict[str, int | str]:
    """Who each of ``keyids`` counts as toward a threshold: its registered owner's id, or
    the keyid itself for a key no principal registered (the online alias key, a root-listed
    admin key)."""
    rows = session.execute(
        select(SigningKey.keyid, SigningKey.principal_id).where(SigningKey.keyid.in_(keyids))
    )
    registered: dict[str, int] = dict(rows.all())
    return {k: registered.get(k, k) for k in keyids}


def _revoked(session: Session, keyids: list[str]) -> set[str]:
    """Those of ``keyids`` that count nowhere: revoked, or their owner disabled."""
    return set(
        session.scalars(
            select(SigningKey.keyid)
            .join(Principal, Principal.id == SigningKey.principal_id)
            .where(
                SigningKey.keyid.in_(keyids),
                or_(SigningKey.revoked_at.is_not(None), Principal.disabled_at.is_not(None)),
            )
        )
    )


def withdraw_signatures(
    session: Session,
    keyids: list[str],
    *,
    target: str | None = None,
    to_digest: str | None = None,
) -> list[TufProposal]:
    """Take the signatures of ``keyids`` off every pending proposal (only those whose
    payload sets ``target`` to ``to_digest`` when given, whatever the proposal is labelled:
    a one-alias move or an adoption of many): a withdrawn approval or a revoked key stops
    counting at once. Returns the proposals that lost a signature."""
    if not keyids:
        return []
    query = select(TufProposal).where(TufProposal.state == "pending")
    changed = []
    for proposal in session.scalars(query.order_by(TufProposal.id)):
        signatures = _signatures(proposal)
        kept = {k: v for k, v in signatures.items() if k not in keyids}
        if len(kept) == len(signatures):
            continue
        if target is not None and not _sets(proposal, target, to_digest):
            continue
        _keep(proposal, kept)
        changed.append(proposal)
    session.flush()
    return changed


def _sets(proposal: TufProposal, path: str, digest: str | None) -> bool:
    """Whether ``proposal``'s payload (the bytes its signers sign) sets ``path`` to the
    bundle ``digest`` (``sha256:HEX``); a top-level targets proposal sets no alias."""
    if proposal.role == TARGETS_ROLE:
        return False
    target = Metadata[Targets].from_bytes(proposal.payload).signed.targets.get(path)
    if target is None:
        return digest is None
    return digest is not None and f"sha256:{target.hashes.get('sha256', '')}" == digest
