"""Proposals: the next version of a delegated role, signed where its keys are
(docs/tuf.md#proposals).

A change to an alias or to the quarantine becomes a proposal: the role's next version with
the change applied, unsigned (``propose_target``). Its signers fetch the payload, sign it on
their own machines and send the signature back (``add_signature``), which checks, in order:

1. the proposal is still pending;
2. it is still the next version of its role (otherwise it is stale: propose again);
3. the key is one the role's delegation names, and is not a key of the principal who made
   the proposal (two-person rule; the delegation alone cannot say who proposed);
4. the signature verifies over the payload's canonical signed bytes.

Once the signatures meet the delegation's threshold the proposal is published with
``MetadataRepository.publish_delegated``, which checks the threshold again with python-tuf,
exactly as a worker will, before anything is kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from securesystemslib.exceptions import UnverifiedSignatureError
from securesystemslib.signer import Signature
from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.metadata import DelegatedRole, Metadata, TargetFile, Targets

from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound
from modelward.registry.models import SigningKey, TufProposal, utcnow
from modelward.registry.tuf.repository import MetadataRepository, StaleProposal

__all__ = [
    "Added",
    "ProposalStale",
    "SignatureRefused",
    "add_signature",
    "delegated_role_for",
    "propose_target",
]

MAX_SIGNATURE_HEX = 2048


class ProposalStale(Conflict):
    """The proposal's role moved on; propose again from its current version."""

    code = "proposal_stale"


class SignatureRefused(Forbidden):
    """A signature that does not count for this proposal (named key, reason)."""

    code = "signature_refused"


@dataclass(frozen=True)
class Added:
    """What ``add_signature`` did: signatures collected, threshold, and whether it published."""

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
) -> TufProposal:
    """A pending proposal setting ``path`` to ``data`` (removing it when None)."""
    role = delegated_role or delegated_role_for(repo, path)

    def change(targets: Targets) -> None:
        if data is None:
            targets.targets.pop(path, None)
        else:
            targets.targets[path] = TargetFile.from_data(path, data, ["sha256"])

    md = repo.propose(role.name, change)
    proposal = TufProposal(
        role=role.name,
        version=md.signed.version,
        payload=md.to_bytes(),
        signatures="[]",
        target=path,
        from_digest=from_digest,
        to_digest=to_digest,
        reason=reason,
        state="pending",
        created_by=proposer_id,
    )
    session.add(proposal)
    session.flush()
    return proposal


def add_signature(
    session: Session,
    repo: MetadataRepository,
    proposal: TufProposal,
    *,
    keyid: str,
    signature_hex: str,
    before_publish: Callable[[TufProposal], None] | None = None,
) -> Added:
    """Check one signature on ``proposal`` (steps 1-4) and publish at threshold.

    ``before_publish`` runs the registry's own gates (baseline, replay) right before
    publishing and may raise to keep the proposal pending. Raises ProposalStale,
    SignatureRefused, BadRequest.
    """
    # (1) only a pending proposal takes signatures
    if proposal.state != "pending":
        raise Conflict(f"proposal {proposal.id} is {proposal.state}, not pending")
    # (2) compare-and-swap: the role must still be at the version it was proposed from
    current = repo.store.latest_versions().get(proposal.role, 0)
    if proposal.version != current + 1:
        raise ProposalStale(
            f"proposal {proposal.id} made {proposal.role} version {proposal.version}, but the "
            f"role is at version {current} now: propose again",
            detail={"role": proposal.role, "proposed": proposal.version, "current": current},
        )
    md = Metadata[Targets].from_bytes(proposal.payload)
    role = delegated_role_for(repo, proposal.target)
    # (3) a key the delegation names, not the proposer's own
    if keyid not in role.keyids:
        raise SignatureRefused(
            f"key {keyid} is not one of the keys role {role.name} is delegated to",
            detail={"role": role.name, "keyid": keyid},
        )
    owner = session.scalar(select(SigningKey.principal_id).where(SigningKey.keyid == keyid))
    if owner is not None and owner == proposal.created_by:
        raise SignatureRefused(
            f"key {keyid} belongs to the principal who proposed this change; another "
            "signer must approve it",
            detail={"role": role.name, "keyid": keyid},
        )
    # (4) the signature over the canonical signed bytes
    if len(signature_hex) > MAX_SIGNATURE_HEX:
        raise BadRequest(f"signature of key {keyid} is longer than {MAX_SIGNATURE_HEX} hex")
    key = repo.targets().get_key(keyid)
    try:
        key.verify_signature(Signature(keyid, signature_hex), md.signed_bytes)
    except UnverifiedSignatureError as exc:
        raise SignatureRefused(
            f"the signature of key {keyid} does not verify over proposal {proposal.id}",
            detail={"role": role.name, "keyid": keyid},
        ) from exc
    collected = {s["keyid"]: s["sig"] for s in json.loads(proposal.signatures)}
    collected[keyid] = signature_hex
    proposal.signatures = json.dumps(
        [{"keyid": k, "sig": v} for k, v in sorted(collected.items())]
    )
    session.flush()
    if len(collected) < role.threshold:
        return Added(len(collected), role.threshold, published=False)
    if before_publish is not None:
        before_publish(proposal)
    for k, v in collected.items():
        md.signatures[k] = Signature(k, v)
    try:
        repo.publish_delegated(role.name, md)
    except StaleProposal as exc:  # pragma: no cover - step 2 ran in this transaction
        raise ProposalStale(str(exc)) from exc
    proposal.state, proposal.decided_at = "published", utcnow()
    session.flush()
    return Added(len(collected), role.threshold, published=True)
