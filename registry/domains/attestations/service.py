"""Attestations attached to a stored bundle: verified on attach, stored verbatim, listed,
retracted (docs/registry.md#attestations).

``attach`` runs, in order:
  (1) the attestation is within ``max_attestation_bytes``;
  (2) the caller may attach something in this repository (authz.require_may_attach_some): a
      publisher of another repository is refused before anything is verified;
  (3) the bundle is live and its digest is not quarantined, in any repository;
  (4) the same bytes, already attached and not retracted, are answered as they are (200) if
      the caller may attach the stored statement's type;
  (5) the attestation verifies against the repository's trust and is about this bundle;
  (6) the caller may attach the VERIFIED statement's predicate type (authz.require_may_attach);
  (7) the row and an ``attestation.attach`` audit event are recorded in one transaction.

``retract``: by the principal that attached it or an admin (authz.require_may_retract), with
a reason. The row and its bytes stay, marked who, when and why; an ``attestation.retract``
audit event is recorded in the same transaction. A retracted attestation counts nowhere
(repository.live_attestations) and is left out of the default listing. The same bytes may be
attached again afterwards: a new row and a new audit event.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.attestations.repository import (
    all_attestations,
    attestation_in_bundle,
    live_attestations,
)
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth import authz
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.bundles.service import attestation_row, find_bundle, live_bundle
from modelward.registry.domains.quarantine.service import require_not_quarantined
from modelward.registry.domains.repos.service import get_repo, repo_policy
from modelward.registry.errors import (
    BadRequest,
    Conflict,
    NotFound,
    PayloadTooLarge,
)
from modelward.registry.models import Attestation, Bundle, Principal

__all__ = ["attach", "list_for_bundle", "retract"]


def attach(
    state: AppState, *, repo_name: str, digest: str, data: bytes, caller: Caller
) -> tuple[dict[str, Any], bool]:
    """Verify and store one attestation; returns (its summary, created).

    Raises PayloadTooLarge, Forbidden (the caller may not attach it), NotFound, Gone,
    Quarantined, Refused (``attestation_untrusted``, ``attestation_rejected``)."""
    from modelward.attest.manifest import parse_manifest

    # (1): size.
    if len(data) > state.settings.max_attestation_bytes:
        raise PayloadTooLarge(
            f"attestation larger than {state.settings.max_attestation_bytes} bytes"
        )
    sha = "sha256:" + hashlib.sha256(data).hexdigest()
    with state.db.read() as session:
        repo = get_repo(session, repo_name, caller)
        # (2): the caller may attach something here at all.
        authz.require_may_attach_some(session, repo, caller)
        # (3): a live bundle, its digest quarantined in no repository.
        bundle = live_bundle(session, repo, digest)
        require_not_quarantined(session, digest, caller)
        # (4): already attached.
        same = _live_with_sha(session, bundle, sha)
        if same is not None:
            authz.require_may_attach(session, repo, caller, same.predicate_type, same.kind)
            return _summary(same, _names(session, [same])), False
        manifest = parse_manifest(bundle.manifest)
        policy = repo_policy(repo, state.default_policy_yaml)
        trust = verdict.trust_for(session, repo, policy, state)
    # (5): verify, bound to this bundle.
    stmt = verdict.verify_attachment(state, manifest=manifest, data=data, trust=trust).statement
    with state.db.write() as session:
        repo = get_repo(session, repo_name, caller)
        # (6): who may attach what, from the verified statement.
        authz.require_may_attach(session, repo, caller, stmt.predicate_type, stmt.kind)
        bundle = live_bundle(session, repo, digest)
        require_not_quarantined(session, digest, caller)  # (3) again: quarantined meanwhile
        same = _live_with_sha(session, bundle, sha)  # attached meanwhile by another request
        if same is not None:
            return _summary(same, _names(session, [same])), False
        # (7): record.
        row = attestation_row(bundle, data, stmt, caller)
        session.add(row)
        session.flush()
        append(
            session,
            actor=caller.name,
            action="attestation.attach",
            subject=f"{repo_name}@{digest}",
            details={
                "id": row.id,
                "kind": row.kind,
                "predicate_type": row.predicate_type,
                "sha256": sha,
                "signers": [s.name for s in stmt.signers],
            },
        )
        return _summary(row, {caller.id: caller.name}), True


def list_for_bundle(
    state: AppState, *, repo_name: str, digest: str, caller: Caller, include_retracted: bool
) -> list[dict[str, Any]]:
    """The bundle's attestations (with their bytes, base64), oldest first; retracted ones
    only when ``include_retracted`` (reviewers and admins; else Forbidden). Raises NotFound."""
    if include_retracted:
        authz.require_may_see_retracted(caller)
    with state.db.read() as session:
        bundle = find_bundle(session, get_repo(session, repo_name, caller), digest)
        query = all_attestations(bundle.id) if include_retracted else live_attestations(bundle.id)
        rows = list(session.execute(query).scalars())
        names = _names(session, rows)
        return [{**_summary(r, names), "data": base64.b64encode(r.data).decode()} for r in rows]


def retract(
    state: AppState,
    *,
    repo_name: str,
    digest: str,
    attestation_id: int,
    reason: str,
    caller: Caller,
) -> dict[str, Any]:
    """Retract one attestation of a bundle (tombstoned and quarantined bundles included);
    returns its summary. Raises NotFound, Forbidden (neither its attacher nor an admin),
    BadRequest (blank reason), Conflict (already retracted)."""
    with state.db.write() as session:
        repo = get_repo(session, repo_name, caller)
        bundle = find_bundle(session, repo, digest)
        row = session.execute(attestation_in_bundle(bundle, attestation_id)).scalar_one_or_none()
        if row is None:
            raise NotFound(f"no attestation {attestation_id} on {repo_name}@{digest}")
        names = _names(session, [row])
        authz.require_may_retract(caller, row, names.get(row.created_by, "?"))
        if not reason.strip():
            raise BadRequest("a retraction needs a reason")
        if row.retracted_at is not None:
            raise Conflict(
                f"attestation {row.id} was already retracted by "
                f"{names.get(row.retracted_by or 0, '?')} at {iso(row.retracted_at)}",
                detail=_retraction(row, names),
            )
        row.retracted_at = datetime.now(UTC)
        row.retracted_by = caller.id
        row.retraction_reason = reason
        append(
            session,
            actor=caller.name,
            action="attestation.retract",
            subject=f"{repo_name}@{digest}",
            details={
                "id": row.id,
                "kind": row.kind,
                "predicate_type": row.predicate_type,
                "sha256": row.sha256,
                "attached_by": names.get(row.created_by),
                "reason": reason,
            },
        )
        return _summary(row, {**names, caller.id: caller.name})


def _live_with_sha(session: Session, bundle: Bundle, sha: str) -> Attestation | None:
    query = live_attestations(bundle.id).where(Attestation.sha256 == sha)
    return session.execute(query).scalars().first()


def _names(session: Session, rows: Sequence[Attestation]) -> dict[int, str]:
    """The names of the principals that attached or retracted ``rows``."""
    ids = {r.created_by for r in rows} | {r.retracted_by for r in rows if r.retracted_by}
    if not ids:
        return {}
    found = session.execute(select(Principal.id, Principal.name).where(Principal.id.in_(ids)))
    return dict(found.all())


def _retraction(row: Attestation, names: Mapping[int, str]) -> dict[str, Any]:
    return {
        "retracted": row.retracted_at is not None,
        "retracted_by": names.get(row.retracted_by) if row.retracted_by else None,
        "retracted_at": iso(row.retracted_at),
        "retraction_reason": row.retraction_reason,
    }


def _summary(row: Attestation, names: Mapping[int, str]) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "predicate_type": row.predicate_type,
        "sha256": row.sha256,
        "signers": json.loads(row.signers),
        "attached_by": names.get(row.created_by),
        "attached_at": iso(row.created_at),
        **_retraction(row, names),
    }
