"""The proposal page's data (docs/console.md#a-proposal): an alias move or a rollout plan,
the diff of its candidate against the bundle it replaces, every check of the move with the
release gates' evidence, who has signed and who may still sign (people, not keys: docs/tuf.md
"The threshold counts people"), the separation of duties, and the command that signs it.

Each fact carries who vouches for it: the proposal's TUF signatures and its published role
version are signed; its move, reason and proposer are the registry's rows; the diff, the
gates and the checks are recomputed by the page at render time.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session
from tuf.api.metadata import Metadata
from tuf.api.serialization import DeserializationError

from modelward.attest.alias_decision import decide_move_result
from modelward.attest.bundle_diff import diff_bundles
from modelward.attest.errors import AttestError
from modelward.attest.evaluation import GatesJudgement, gate_label
from modelward.attest.rollout import PlanInvalid, RolloutPlan
from modelward.attest.rollout.paths import rollout_path
from modelward.attest.rollout.signed import plan_in
from modelward.registry.domains._principals import find_principal
from modelward.registry.domains._state import AppState
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import service as bundles
from modelward.registry.domains.moves.refusals import report_json
from modelward.registry.domains.moves.service import read_move
from modelward.registry.domains.repos import listing
from modelward.registry.domains.signing.proposals import get_proposal
from modelward.registry.domains.signing.role_access import proposals_readable
from modelward.registry.errors import NotFound, RegistryError
from modelward.registry.models import Principal
from modelward.registry.ui.bundle_view import parsed_manifest, read_text
from modelward.registry.ui.vouch import holders

__all__ = ["plan_json", "plan_of", "proposal_page", "subject_of"]


def subject_of(proposal: dict[str, Any]) -> dict[str, Any]:
    """The proposal with ``subject``: ``plan`` for a rollout plan (target
    ``ORG/NAME/rollouts/ALIAS``), ``move`` for an alias move, ``other`` for anything else;
    a plan's ``repository`` and ``alias`` read from its target."""
    repo_name, sep, alias = str(proposal.get("target", "")).partition("/rollouts/")
    if sep and "/" in repo_name and alias and proposal.get("kind") != "delegations":
        return {**proposal, "subject": "plan", "repository": repo_name, "alias": alias}
    if proposal.get("repository") and proposal.get("kind", "move") == "move":
        return {**proposal, "subject": "move"}
    return {**proposal, "subject": "other"}


def plan_of(payload: bytes, repo_name: str, alias: str) -> RolloutPlan | None:
    """The rollout plan the proposal's payload (the bytes its signers sign) carries for
    ``repo_name@alias``; None when it carries none that parses."""
    try:
        md: Metadata[Any] = Metadata.from_bytes(payload)
    except (DeserializationError, ValueError):
        return None
    target = md.signed.targets.get(rollout_path(repo_name, alias))
    try:
        return plan_in(target, repo=repo_name, alias=alias)
    except PlanInvalid:
        return None


def plan_json(plan: RolloutPlan) -> dict[str, Any]:
    return {
        "rollout_id": plan.rollout_id,
        "stable": plan.stable,
        "candidate": plan.candidate,
        "steps": list(plan.steps),
        "window_seconds": plan.window_seconds,
        "min_samples": plan.min_samples,
        "analysis": plan.analysis,
        "sha256": plan.sha256,
    }


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


def _principal(session: Session, pk: int | None) -> Principal | None:
    return session.get(Principal, pk) if pk is not None else None


def _people(proposal: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Signatures counted as people: a reviewer who rotated a key and signed with either
    is one signer, and never also still to sign."""
    signed = sorted(
        {s["signer"] or names.get(s["keyid"], s["keyid"][:16]) for s in proposal["signatures"]}
    )
    may = {names.get(k, k[:16]) for k in proposal["keyids"]}
    still = sorted(may - set(signed))
    return {"signed": signed, "still": still, "more": max(0, proposal["threshold"] - len(signed))}


def _duties(people: dict[str, Any], roles: dict[str, set[str]]) -> list[dict[str, str]]:
    """The separation of duties: each signer, or person offered as one, who is also the
    evaluator whose evaluation opens the gates, the proposer or the candidate's publisher."""
    flags = []
    for name in [*people["signed"], *people["still"]]:
        held = [duty for duty, who in roles.items() if name in who]
        if held:
            flags.append(
                {
                    "name": name,
                    "as": "signed" if name in people["signed"] else "offered as an approver",
                    "duties": ", ".join(held),
                }
            )
    return flags


def proposal_page(state: AppState, caller: Caller, proposal_id: int) -> dict[str, Any]:
    """The decision: the diff against the bundle the proposal replaces, every check of the
    move (gates with their evidence, replay, baseline, approvals), who signed and who still
    must, the separation of duties, and, while pending, the command that signs it offline.

    A published proposal is judged as it was decided: against its ``from_digest`` (the alias
    names the candidate now, and a bundle compared with itself fails every gate)."""
    with state.db.read() as session:
        found = get_proposal(session, state, proposal_id)
        if not proposals_readable(session, caller, [found]):  # as a missing proposal
            raise NotFound(f"no TUF proposal {proposal_id}")
        payload = base64.b64decode(found.pop("payload", "") or b"")
        proposal = subject_of(found)
        names = holders(session)
        people = _people(proposal, names)
        base: dict[str, Any] = {"proposal": proposal, "people": people, "diff": None}
        base |= {"checks": None, "gates": None, "plan": None, "duties": [], "command": None}
        if proposal["subject"] == "other":
            return base
        repo_name, alias = proposal["repository"], proposal["alias"]
        repo = listing.readable_repo(session, repo_name, caller)
        plan = plan_of(payload, repo_name, alias) if proposal["subject"] == "plan" else None
        candidate = plan.candidate if plan is not None else proposal["to_digest"]
        replaced = plan.stable if plan is not None else proposal["from_digest"]
        if candidate is None:
            return base
        new_row = bundles.find_bundle(session, repo, candidate)
        new = parsed_manifest(new_row.manifest)
        old = None
        if replaced:
            old = parsed_manifest(bundles.find_bundle(session, repo, replaced).manifest)
        proposer_row = find_principal(session, proposal["proposed_by"])
        publisher = _principal(session, new_row.created_by)
    proposer = (
        Caller(id=proposer_row.id, name=proposer_row.name, role=proposer_row.role)
        if proposer_row is not None
        else None
    )
    diff = diff_bundles(old, new, lambda m, p: read_text(state, m, p))
    checks: dict[str, Any] | None
    gates: dict[str, Any] | None
    try:
        # every check as the registry judges the move at its threshold: the proposer's
        request, _ = read_move(
            state,
            repo_name=repo_name,
            alias=alias,
            digest=candidate,
            rollback=False,
            caller=proposer or caller,
            every_check=True,
        )
        if proposal["state"] != "pending":
            request = replace(request, current=replaced)
        report = decide_move_result(request)
        checks = report_json(report)
        gates = _gates_json(report.gates)
    except (RegistryError, AttestError) as exc:
        checks, gates = {"error": str(exc)[:1000]}, None
    evaluators = {
        s.removeprefix("@") for e in (gates or {}).get("evaluations", []) for s in e["signers"]
    }
    roles = {
        "the evaluator whose evaluation opens the gates": evaluators,
        "the proposer": {proposal["proposed_by"]} - {None},
        "the publisher of the candidate": {publisher.name} if publisher is not None else set(),
    }
    command = None
    if proposal["state"] == "pending":
        command = (
            f"modelward trust sign {proposal['id']} --key KEY"
            if plan is not None
            else f"modelward approve {repo_name}@{candidate} --alias {alias} --key KEY"
        )
    return base | {
        "diff": diff.to_json(),
        "checks": checks,
        "gates": gates,
        "plan": plan_json(plan) if plan is not None else None,
        "candidate": candidate,
        "replaced": replaced,
        "duties": _duties(people, roles),
        "command": command,
    }
