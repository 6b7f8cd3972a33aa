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

from modelward.attest.alias_decision import decide_move_result
from modelward.attest.audit.checkpoint import open_checkpoint
from modelward.attest.bundle_diff import diff_bundles
from modelward.attest.errors import AttestError
from modelward.attest.evaluation import GatesJudgement, gate_label
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
from modelward.registry.domains.moves.refusals import report_json
from modelward.registry.domains.moves.service import read_move
from modelward.registry.domains.quarantine.service import require_readable
from modelward.registry.domains.repos import listing
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.trust import service as trust
from modelward.registry.domains.trust.role_access import proposals_readable
from modelward.registry.errors import NotFound, RegistryError
from modelward.registry.models import Principal, SigningKey
from modelward.registry.policy import repo_policy
from modelward.registry.ui.bundle_view import (
    file_views,
    parsed_manifest,
    pinned_inputs,
    read_text,
)

__all__ = [
    "AUDIT_WINDOW",
    "alias_page",
    "attestations_page",
    "audit_view",
    "bundle_page",
    "home",
    "proposal_page",
    "repo_page",
]

AUDIT_WINDOW = 2000  # the newest events the audit page filters (all: `modelward audit log`)


def home(state: AppState, caller: Caller) -> dict[str, Any]:
    with state.db.read() as session:
        repos = listing.list_repos(
            session, caller, limit=listing.MAX_PAGE, cursor=None, org=None, publishable=False
        )
        pending = trust.list_proposals(
            session, state, pending_only=True, repo_name=None, alias=None
        )
        pending = proposals_readable(session, caller, pending)  # a private repository's: not
    return {"repos": repos.items, "pending": [p for p in pending if p["repository"]]}


def repo_page(state: AppState, caller: Caller, repo_name: str) -> dict[str, Any]:
    with state.db.read() as session:
        names = aliases.list_aliases(session, caller, repo_name, limit=listing.MAX_PAGE)
        listed = bundles.list_bundles(session, caller, repo_name, limit=listing.MAX_PAGE)
        pending = trust.list_proposals(
            session, state, pending_only=True, repo_name=repo_name, alias=None
        )
    return {
        "repository": repo_name,
        "aliases": names.items,
        "bundles": listed.items,
        "pending": pending,
        "rollouts": None,  # issue 26: rollouts in progress, once that work has landed
    }


def _signers_of_moves(proposals: list[dict[str, Any]]) -> dict[tuple[Any, Any], list[str]]:
    out: dict[tuple[Any, Any], list[str]] = {}
    for p in proposals:
        if p["state"] == "published":
            names = [s["signer"] or s["keyid"][:12] for s in p["signatures"]]
            out.setdefault((p["from_digest"], p["to_digest"]), names)
    return out


def alias_page(state: AppState, caller: Caller, repo_name: str, alias: str) -> dict[str, Any]:
    with state.db.read() as session:
        listing.readable_repo(session, repo_name, caller)
        current = aliases.get_alias(session, repo_name, alias, caller)
        history = aliases.history(session, repo_name, alias, caller)
        proposals = trust.list_proposals(
            session, state, pending_only=False, repo_name=repo_name, alias=alias
        )
        record = None
        if current.get("digest"):
            row = bundles.find_bundle(
                session, get_repo(session, repo_name, caller), current["digest"]
            )
            record = bundles.bundle_json(session, row, caller)
    signers = _signers_of_moves(proposals)
    for move in history:
        move["signers"] = signers.get((move["from_digest"], move["to_digest"]), [])
    return {
        "repository": repo_name,
        "alias": alias,
        "current": current,
        "bundle": record,
        "history": list(reversed(history)),
        "pending": [p for p in proposals if p["state"] == "pending"],
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
    """The envelope's statement for display: DSSE payload decoded; other formats as JSON."""
    try:
        doc = json.loads(data)
    except ValueError:
        return {"raw": f"({len(data)} bytes, not JSON)"}
    if isinstance(doc, dict) and "payload" in doc and "payloadType" in doc:
        try:
            statement = json.loads(base64.b64decode(str(doc["payload"]), validate=True))
        except ValueError:
            return {"raw": json.dumps(doc, indent=2)[:200_000]}
        return {"raw": json.dumps(statement, indent=2, sort_keys=True)[:200_000]}
    return {"raw": json.dumps(doc, indent=2)[:200_000]}


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
        out.append(
            {
                **{k: v for k, v in item.items() if k != "data"},
                "signers": signers,
                "subjects": subjects,
                "verdict": verdict,
                **_decoded(data),
            }
        )
    return {"repository": repo_name, "digest": digest, "attestations": out}


def _gates_json(judged: GatesJudgement | None) -> dict[str, Any] | None:
    """The release gates' judgement with its evidence: every gate's figures (observed, its
    interval, the bound) per slice, the evaluations counted and those set aside, and why."""
    if judged is None:
        return None
    return {
        "verdict": judged.verdict,
        "gates": [{**g.to_json(), "label": gate_label(g)} for g in judged.gates],
        "evaluations": [e.to_json() for e in judged.evaluations],
        "not_counted": [n.to_json() for n in judged.not_counted],
    }


def _caller_named(session: Session, name: str | None) -> Caller | None:
    row = session.execute(select(Principal).where(Principal.name == name)).scalar_one_or_none()
    return None if row is None else Caller(id=row.id, name=row.name, role=row.role)


def proposal_page(state: AppState, caller: Caller, proposal_id: int) -> dict[str, Any]:
    """The decision: the diff against the alias's current target, every check of the move
    (gates with their evidence, replay, baseline, approvals), who signed and who still must,
    and the command that signs it offline."""
    with state.db.read() as session:
        proposal = trust.get_proposal(session, state, proposal_id)
        if not proposals_readable(session, caller, [proposal]):  # as a missing proposal
            raise NotFound(f"no TUF proposal {proposal_id}")
        proposal.pop("payload", None)
        repo_name, alias = proposal["repository"], proposal["alias"]
        if repo_name is None:
            return {"proposal": proposal, "diff": None, "checks": None, "gates": None, "still": []}
        repo = listing.readable_repo(session, repo_name, caller)
        new = parsed_manifest(bundles.find_bundle(session, repo, proposal["to_digest"]).manifest)
        old = None
        if proposal["from_digest"]:
            old = parsed_manifest(
                bundles.find_bundle(session, repo, proposal["from_digest"]).manifest
            )
        proposer = _caller_named(session, proposal["proposed_by"])
        holders = dict(
            session.execute(
                select(SigningKey.keyid, Principal.name).join(
                    Principal, Principal.id == SigningKey.principal_id
                )
            ).all()
        )
    diff = diff_bundles(old, new, lambda m, p: read_text(state, m, p))
    signed = {s["keyid"] for s in proposal["signatures"]}
    still = sorted({holders.get(k, k[:16]) for k in proposal["keyids"] if k not in signed})
    checks: dict[str, Any] | None
    gates: dict[str, Any] | None
    try:
        # every check as the registry judges the move at its threshold: the proposer's
        request, _ = read_move(
            state,
            repo_name=repo_name,
            alias=alias,
            digest=proposal["to_digest"],
            rollback=False,
            caller=proposer or caller,
            every_check=True,
        )
        report = decide_move_result(request)
        checks = report_json(report)
        gates = _gates_json(report.gates)
    except (RegistryError, AttestError) as exc:
        checks, gates = {"error": str(exc)[:1000]}, None
    command = f"modelward approve {repo_name}@{proposal['to_digest']} --alias {alias} --key KEY"
    return {
        "proposal": proposal,
        "diff": diff.to_json(),
        "checks": checks,
        "gates": gates,
        "still": still,
        "command": command,
    }


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
        if action and e.action != action:
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
