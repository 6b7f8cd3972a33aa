"""The data of each console page, read through the same service functions and the same
authorization the API uses for that principal (never a wider query): a page refuses what
the matching endpoint refuses, with the same error.

Rollouts (issue 26) and private repositories (issue 31) add their reads here when they land:
the repository page's ``rollouts`` and ``repos.listing.readable_repo`` respectively.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.audit.checkpoint import open_checkpoint
from modelward.attest.errors import AttestError
from modelward.attest.provenance import DEFAULT_BUILDER_ID
from modelward.registry.domains._state import AppState
from modelward.registry.domains.aliases import service as aliases
from modelward.registry.domains.attestations import service as attestations
from modelward.registry.domains.audit.checkpoints import current_checkpoint
from modelward.registry.domains.audit.keyfile import checkpoint_signer
from modelward.registry.domains.audit.service import page as audit_page
from modelward.registry.domains.auth.authz import Action
from modelward.registry.domains.auth.deps import require
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import service as bundles
from modelward.registry.domains.bundles.verdict import trust_for, verify_attachment
from modelward.registry.domains.quarantine.service import require_readable
from modelward.registry.domains.repos import listing
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.signing.proposals import list_proposals
from modelward.registry.domains.signing.role_access import proposals_readable
from modelward.registry.errors import RegistryError
from modelward.registry.models import Principal, SigningKey
from modelward.registry.policy import repo_policy
from modelward.registry.ui.bundle_view import (
    file_views,
    parsed_manifest,
    pinned_inputs,
)
from modelward.registry.ui.proposal_view import subject_of
from modelward.registry.ui.rollout_view import rollouts_of
from modelward.registry.ui.vouch import alias_signature, quarantine_signature

__all__ = [
    "AUDIT_WINDOW",
    "alias_page",
    "attestations_page",
    "audit_view",
    "bundle_page",
    "home",
    "repo_page",
]

AUDIT_WINDOW = 2000  # the newest events the audit page filters (all: `modelward audit log`)


def home(state: AppState, caller: Caller) -> dict[str, Any]:
    with state.db.read() as session:
        repos = listing.list_repos(
            session, caller, limit=listing.MAX_PAGE, cursor=None, org=None, publishable=False
        )
        pending = _pending(session, state, caller, repo_name=None)
    return {"repos": repos.items, "pending": pending}


def _pending(
    session: Session, state: AppState, caller: Caller, *, repo_name: str | None
) -> list[dict[str, Any]]:
    """The pending alias moves and rollout plans (``proposal_view.subject_of``) the caller
    may read, of one repository or all."""
    listed = list_proposals(session, state, pending_only=True, repo_name=None, alias=None)
    readable = proposals_readable(session, caller, listed)  # a private repository's: not
    subjects = [subject_of(p) for p in readable]
    return [p for p in subjects if p["subject"] != "other" and repo_name in (None, p["repository"])]


def repo_page(state: AppState, caller: Caller, repo_name: str) -> dict[str, Any]:
    with state.db.read() as session:
        names = aliases.list_aliases(
            session, caller, repo_name, limit=listing.MAX_PAGE, view=state.signed
        )
        listed = bundles.list_bundles(session, caller, repo_name, limit=listing.MAX_PAGE)
        pending = _pending(session, state, caller, repo_name=repo_name)
        rollouts = rollouts_of(session, listing.readable_repo(session, repo_name, caller).id, None)
    return {
        "rollouts": rollouts,
        "repository": repo_name,
        "aliases": names.items,
        "bundles": listed.items,
        "pending": pending,
    }


def _signers_of_moves(proposals: list[dict[str, Any]]) -> dict[tuple[Any, Any], list[str]]:
    """(from, to) -> the signers of the published alias move (not a rollout plan's)."""
    out: dict[tuple[Any, Any], list[str]] = {}
    for p in proposals:
        if p["state"] == "published" and subject_of(p)["subject"] == "move":
            names = [s["signer"] or s["keyid"][:12] for s in p["signatures"]]
            out.setdefault((p["from_digest"], p["to_digest"]), names)
    return out


def alias_page(state: AppState, caller: Caller, repo_name: str, alias: str) -> dict[str, Any]:
    with state.db.read() as session:
        listing.readable_repo(session, repo_name, caller)
        current = aliases.get_alias(session, repo_name, alias, caller, view=state.signed)
        history = aliases.history(session, repo_name, alias, caller)
        proposals = list_proposals(
            session, state, pending_only=False, repo_name=repo_name, alias=alias
        )
        record, held = None, None
        repo_row = get_repo(session, repo_name, caller)
        if current.get("digest"):
            row = bundles.find_bundle(session, repo_row, current["digest"])
            record = bundles.bundle_json(session, row, caller)
            if record["quarantined"]:
                held = quarantine_signature(session, state, current["digest"])
        signature = alias_signature(session, state, repo_name, alias)
        pending = _pending(session, state, caller, repo_name=repo_name)
        rollouts = rollouts_of(session, repo_row.id, alias)
    signers = _signers_of_moves(proposals)
    for move in history:
        move["signers"] = signers.get((move["from_digest"], move["to_digest"]), [])
    return {
        "repository": repo_name,
        "alias": alias,
        "current": current,
        "bundle": record,
        "history": list(reversed(history)),
        "pending": [p for p in pending if p["alias"] == alias],
        "signature": signature,
        "quarantine_signature": held,
        "rollouts": rollouts,
    }


def bundle_page(state: AppState, caller: Caller, repo_name: str, digest: str) -> dict[str, Any]:
    with state.db.read() as session:
        repo = listing.readable_repo(session, repo_name, caller)
        row = bundles.find_bundle(session, repo, digest)
        record = bundles.bundle_json(session, row, caller)
        manifest_bytes = row.manifest if record["manifest"] is not None else None
    files = None
    spec = None
    if manifest_bytes is not None:
        manifest = parsed_manifest(manifest_bytes)
        files = file_views(state, manifest)
        spec = pinned_inputs(state, manifest)
    return {"repository": repo_name, "bundle": record, "files": files, "spec": spec}


def _decoded(data: bytes) -> dict[str, Any]:
    """The envelope's statement for display (``raw``; ``statement``: the decoded DSSE
    payload, when it is one); other formats as JSON."""
    try:
        doc = json.loads(data)
    except ValueError:
        return {"raw": f"({len(data)} bytes, not JSON)"}
    if isinstance(doc, dict) and "payload" in doc and "payloadType" in doc:
        try:
            statement = json.loads(base64.b64decode(str(doc["payload"]), validate=True))
        except ValueError:
            return {"raw": json.dumps(doc, indent=2)[:200_000]}
        raw = json.dumps(statement, indent=2, sort_keys=True)[:200_000]
        return {"raw": raw, "statement": statement}
    return {"raw": json.dumps(doc, indent=2)[:200_000]}


def _builder(statement: Any) -> dict[str, Any] | None:
    """The SLSA provenance's builder id and what it proves (docs/console.md#provenance):
    ``self_asserted`` for a local build (``attest.provenance.DEFAULT_BUILDER_ID``), where
    the publisher's own machine says it built the bundle; None when it names no builder."""
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    run = predicate.get("runDetails") if isinstance(predicate, dict) else None
    builder = run.get("builder") if isinstance(run, dict) else None
    ident = builder.get("id") if isinstance(builder, dict) else None
    if not isinstance(ident, str):
        return None
    return {"id": ident, "self_asserted": ident == DEFAULT_BUILDER_ID}


def attestations_page(
    state: AppState, caller: Caller, repo_name: str, digest: str
) -> dict[str, Any]:
    """Each attestation decoded, with the one verifier's verdict now (the attach check)."""
    items = attestations.list_for_bundle(
        state, repo_name=repo_name, digest=digest, caller=caller, include_retracted=False
    )
    with state.db.read() as session:
        repo = listing.readable_repo(session, repo_name, caller)
        row = bundles.live_bundle(session, repo, digest)
        require_readable(session, digest, caller)
        manifest = parsed_manifest(row.manifest)
        policy = repo_policy(repo, state.default_policy_yaml)
        trusted = trust_for(session, repo, policy, state)
        owners = dict(
            session.execute(
                select(SigningKey.keyid, Principal.name).join(
                    Principal, Principal.id == SigningKey.principal_id
                )
            ).all()
        )
    out = []
    for item in items:
        data = base64.b64decode(item["data"])
        try:
            verified = verify_attachment(state, manifest=manifest, data=data, trust=trusted)
        except RegistryError as exc:
            verdict = {"ok": False, "why": exc.message}
            subjects: list[str] = []
        else:
            stmt = verified.statement
            verdict = {
                "ok": True,
                "why": "signature verified by "
                + ", ".join(s.name for s in stmt.signers)
                + f"; its subject is this bundle ({digest})",
            }
            subjects = [
                s.name + " " + ", ".join(f"{k}:{v}" for k, v in s.digest.items())
                for s in stmt.subjects
            ]
        signers = [{**s, "principal": owners.get(str(s.get("detail")))} for s in item["signers"]]
        decoded = _decoded(data)
        out.append(
            {
                **{k: v for k, v in item.items() if k != "data"},
                "signers": signers,
                "subjects": subjects,
                "verdict": verdict,
                "builder": _builder(decoded.get("statement")),
                "raw": decoded["raw"],
            }
        )
    return {"repository": repo_name, "digest": digest, "attestations": out}


def audit_view(
    state: AppState, caller: Caller, *, action: str, principal: str, repository: str
) -> dict[str, Any]:
    """The newest AUDIT_WINDOW events, filtered; the API's rule: reviewers and admins."""
    require(Action.REVIEW)(caller)
    signer = checkpoint_signer(state.settings)
    checkpoint = current_checkpoint(state.db, signer)
    with state.db.read() as session:
        after = max(0, checkpoint.size - AUDIT_WINDOW)
        events = audit_page(session, after=after, limit=AUDIT_WINDOW)
    try:
        opened = open_checkpoint(checkpoint.note.encode(), signer.verifier)
        verified = {"ok": True, "size": opened.size, "why": f"signed by {signer.name}"}
    except AttestError as exc:
        verified = {"ok": False, "size": checkpoint.size, "why": str(exc)}
    rows = []
    for e in reversed(events):
        if action and not (e.action == action or e.action.startswith(action.rstrip(".") + ".")):
            continue
        if principal and e.actor != principal:
            continue
        if repository and repository not in e.subject:
            continue
        rows.append(
            {
                "seq": e.seq,
                "at": e.at,
                "actor": e.actor,
                "action": e.action,
                "subject": e.subject,
                "details": json.dumps(e.details, sort_keys=True)[:2000],
            }
        )
    return {
        "events": rows,
        "checkpoint": verified,
        "verifier_key": signer.verifier.key_string,
        "filters": {"action": action, "principal": principal, "repository": repository},
    }
