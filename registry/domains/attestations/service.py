"""Attestations attached to a stored bundle: verified on attach, stored verbatim, listed."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from sqlalchemy import select

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import verdict
from modelward.registry.domains.bundles.service import attestation_row, find_bundle, live_bundle
from modelward.registry.domains.repos.service import get_repo, may_publish, repo_policy
from modelward.registry.errors import BundleQuarantined, Forbidden, PayloadTooLarge, Refused
from modelward.registry.models import Attestation

__all__ = ["attach", "list_for_bundle"]


def attach(
    state: AppState, *, repo_name: str, digest: str, data: bytes, caller: Caller
) -> tuple[dict[str, Any], bool]:
    """Verify and store one attestation; returns (its summary, created)."""
    from modelward.attest.manifest import parse_manifest

    if len(data) > state.settings.max_attestation_bytes:
        raise PayloadTooLarge(
            f"attestation larger than {state.settings.max_attestation_bytes} bytes"
        )
    sha = "sha256:" + hashlib.sha256(data).hexdigest()
    with state.db.read() as session:
        repo = get_repo(session, repo_name)
        # Workers (readers) attach signed baselines and replay results, reviewers their
        # evaluations; a publisher only to repositories it may publish to.
        if caller.role == "publisher" and not may_publish(session, repo, caller):
            raise Forbidden(f"{caller.name} may not attach attestations in {repo_name}")
        bundle = live_bundle(session, repo, digest)
        if bundle.quarantined:
            raise BundleQuarantined(
                f"bundle {digest} is quarantined: {bundle.quarantine_reason}",
                detail={"reason": bundle.quarantine_reason},
            )
        same = session.execute(
            select(Attestation).where(Attestation.bundle_id == bundle.id, Attestation.sha256 == sha)
        ).scalar_one_or_none()
        if same is not None:
            return _summary(same), False
        manifest = parse_manifest(bundle.manifest)
        policy = repo_policy(repo, state.default_policy_yaml)
        trust = verdict.trust_for(session, repo, policy, state)
    verified = verdict.verify_all(state, manifest, [data], trust.verify)
    if verified.rejected:
        raise Refused(
            f"attestation rejected: {verified.rejected[0]}",
            detail={"reasons": list(verified.rejected)},
            code="attestation_rejected",
        )
    _, stmt = verified.accepted[0]
    with state.db.write() as session:
        bundle = live_bundle(session, get_repo(session, repo_name), digest)
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
        return _summary(row), True


def _summary(row: Attestation) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "predicate_type": row.predicate_type,
        "signers": json.loads(row.signers),
    }


def list_for_bundle(state: AppState, *, repo_name: str, digest: str) -> list[dict[str, Any]]:
    with state.db.read() as session:
        bundle = find_bundle(session, get_repo(session, repo_name), digest)
        rows = session.execute(
            select(Attestation).where(Attestation.bundle_id == bundle.id).order_by(Attestation.id)
        ).scalars()
        return [{**_summary(r), "data": base64.b64encode(r.data).decode()} for r in rows]
