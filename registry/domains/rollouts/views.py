"""What a rollout looks like from outside: the JSON ``start``/``advance``/``abort`` answer
and ``status`` shows (plan, signed step, history, rollback figures, fleet), the weights for
request-level routers, and every rollout of an alias (docs/rollouts.md). Read only: the
signed plan and step come from the TUF metadata (``signed``), never from the rows alone.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.rollout import StepRefused, parse_plan, verify_step
from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.rollouts.cohorts import cohorts_json
from modelward.registry.domains.rollouts.reports import fleet
from modelward.registry.domains.rollouts.rows import latest_rollout
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.view import signed_plan, signed_step
from modelward.registry.errors import NotFound
from modelward.registry.models import Rollout, RolloutStepRow, utcnow

__all__ = ["history", "rollout_json", "status", "weights"]


def _history(session: Session, row: Rollout) -> list[dict[str, Any]]:
    return [
        {
            "index": h.step_index,
            "weight": h.weight,
            "state": h.state,
            "reason": h.reason,
            "actor": h.actor,
            "tuf_version": h.tuf_version,
            "verdict": h.verdict,
            "analysis": json.loads(h.analysis) if h.analysis else None,
            "at": iso(h.at),
        }
        for h in session.scalars(
            select(RolloutStepRow)
            .where(RolloutStepRow.rollout_pk == row.id)
            .order_by(RolloutStepRow.seq)
        )
    ]


def _when(value: datetime | None) -> str | None:
    return iso(value) if value is not None else None


def _rollback(row: Rollout) -> dict[str, Any] | None:
    """The observable rollback of an aborted rollout the controller judged (its times and
    figures, docs/rollouts.md#rollback-figures); None before."""
    if row.figures is None and row.detected_at is None:
        return None
    return {
        "detected_at": _when(row.detected_at),
        "decided_at": _when(row.decided_at),
        "converged_at": _when(row.converged_at),
        "recovered_at": _when(row.recovered_at),
        **(json.loads(row.figures) if row.figures else {}),
    }


def rollout_json(
    session: Session,
    repo: MetadataRepository,
    repo_name: str,
    row: Rollout,
    proposal_state: str | None,
    *,
    silent_after_seconds: float | None = None,
) -> dict[str, Any]:
    plan = signed_plan(repo, repo_name, row.alias)
    plan_signed = plan is not None and plan.sha256 == row.plan_sha256
    current = signed_step(repo, repo_name, row.alias)
    step, fleet_step = None, None
    if current is not None and current[0].rollout_id == row.rollout_id and plan_signed:
        assert plan is not None  # noqa: S101 - plan_signed says so
        try:
            verified = fleet_step = verify_step(plan, current[0])
            step = {
                "index": verified.index,
                "weight": verified.weight,
                "state": verified.state,
                "reason": verified.reason,
                "tuf_version": current[1],
            }
        except StepRefused as exc:
            step = {"refused": str(exc)}
    answer: dict[str, Any] = {
        "repository": repo_name,
        "alias": row.alias,
        "rollout_id": row.rollout_id,
        "state": row.state,
        "plan": json.loads(row.plan_json),
        "plan_sha256": row.plan_sha256,
        "plan_signed": plan_signed,
        "proposal": row.proposal_id,
        "signed_step": step,
        "history": _history(session, row),
        "created_at": iso(row.created_at),
        "finished_at": _when(row.finished_at),
        "analysis": row.analysis_text,
        "rollback": _rollback(row),
    }
    parsed = parse_plan(row.plan_json)
    if parsed.fleet is not None:  # what each step means for the plan's fleet
        answer["cohorts"] = cohorts_json(parsed)
    if proposal_state is not None:
        answer["proposal_state"] = proposal_state
    if silent_after_seconds is not None:  # which workers run which digest (reports.fleet)
        answer["fleet"] = fleet(
            session,
            row,
            plan if plan_signed else None,
            fleet_step,
            now=utcnow(),
            silent_after_seconds=silent_after_seconds,
        )
    return answer


def status(state: AppState, *, repo_name: str, alias: str, caller: Caller) -> dict[str, Any]:
    """The alias's latest rollout: plan, whether it is signed, the signed step, history."""
    with state.db.read() as session:
        repo_row = get_repo(session, repo_name, caller)
        row = latest_rollout(session, repo_row.id, alias)
        if row is None:
            raise NotFound(f"{repo_name}@{alias} has never had a rollout")
        return rollout_json(
            session,
            repository(session, state),
            repo_name,
            row,
            None,
            silent_after_seconds=state.settings.rollout_silent_after_seconds,
        )


def weights(state: AppState, *, repo_name: str, alias: str, caller: Caller) -> dict[str, Any]:
    """The signed step's weights, for request-level routers (docs/rollouts.md#weights):
    ``backends``, each ``{digest, weight}`` summing to 100; the stable digest at 100 when no
    rollout is under way, before its first step and after an abort."""
    with state.db.read() as session:
        get_repo(session, repo_name, caller)
        stable = state.signed.aliases(session, repo_name).get(alias)
        repo = repository(session, state)
        plan = signed_plan(repo, repo_name, alias)
        current = signed_step(repo, repo_name, alias)
    answer: dict[str, Any] = {"repository": repo_name, "alias": alias, "rollout_id": None}
    weight, step_state, index = 0, None, None
    if plan is not None and plan.stable == stable:
        answer.update(rollout_id=plan.rollout_id, plan_sha256=plan.sha256)
        if current is not None and current[0].rollout_id == plan.rollout_id:
            try:
                step = verify_step(plan, current[0])
            except StepRefused:
                step = None
            if step is not None:
                weight, step_state, index = step.weight, step.state, step.index
        answer["backends"] = [
            {"digest": plan.stable, "weight": 100 - weight},
            {"digest": plan.candidate, "weight": weight},
        ]
    else:
        answer["backends"] = [{"digest": stable, "weight": 100}] if stable else []
    answer.update(state=step_state, index=index)
    return answer


def history(state: AppState, *, repo_name: str, alias: str, caller: Caller) -> dict[str, Any]:
    """Every rollout of the alias, oldest first, each as ``status`` shows one (what a
    release record gathers: docs/release.md#rollouts); ``rollouts`` is empty for an alias
    that never had one."""
    with state.db.read() as session:
        repo_row = get_repo(session, repo_name, caller)
        repo = repository(session, state)
        rows = session.scalars(
            select(Rollout)
            .where(Rollout.repo_id == repo_row.id, Rollout.alias == alias)
            .order_by(Rollout.id)
        ).all()
        return {
            "repository": repo_name,
            "alias": alias,
            "rollouts": [rollout_json(session, repo, repo_name, row, None) for row in rows],
        }
