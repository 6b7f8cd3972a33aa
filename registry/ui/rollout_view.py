"""Rollouts in the console (docs/console.md#rollouts): the repository's and an alias's
rollouts, and one rollout's page, read through the registry's rollout view
(``rollouts.views.rollout_json``: plan, signed step, history with verdicts and analyses,
rollback figures, fleet). The plan is shown from the signed bytes when the alias's role
signs it now, and labelled the registry's word otherwise; verdicts, figures and the fleet
are the registry's rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.rollout.paths import rollout_path
from modelward.registry.domains._state import AppState
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos import listing
from modelward.registry.domains.rollouts.views import rollout_json
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.proposals import proposal_state
from modelward.registry.domains.signing.tuf.proposals import delegated_role_for
from modelward.registry.domains.signing.tuf.view import signed_plan
from modelward.registry.errors import NotFound
from modelward.registry.models import Rollout
from modelward.registry.ui.proposal_view import plan_json
from modelward.registry.ui.vouch import holders, signature_of

__all__ = ["rollout_page", "rollouts_of"]

LISTED = 50  # the newest rollouts a repository or alias page lists


def rollouts_of(session: Session, repo_id: int, alias: str | None) -> list[dict[str, Any]]:
    """The newest LISTED rollouts of the repository (of one alias), newest first: the
    registry's rows (alias, id, state, stable, candidate, step index, times)."""
    query = select(Rollout).where(Rollout.repo_id == repo_id)
    if alias is not None:
        query = query.where(Rollout.alias == alias)
    rows = session.scalars(query.order_by(Rollout.id.desc()).limit(LISTED)).all()
    return [
        {
            "alias": r.alias,
            "rollout_id": r.rollout_id,
            "state": r.state,
            "stable": r.stable,
            "candidate": r.candidate,
            "step_index": r.step_index,
            "created_at": r.created_at.isoformat(),
            "finished_at": r.finished_at.isoformat() if r.finished_at else None,
            "running": r.state in ("planned", "running", "paused"),
        }
        for r in rows
    ]


def rollout_page(
    state: AppState, caller: Caller, repo_name: str, alias: str, rollout_id: str
) -> dict[str, Any]:
    """One rollout as ``rollout status`` shows it, with the fleet, and the plan from the
    signed bytes when the alias's role signs this plan now."""
    with state.db.read() as session:
        repo_row = listing.readable_repo(session, repo_name, caller)
        row = session.execute(
            select(Rollout).where(
                Rollout.repo_id == repo_row.id,
                Rollout.alias == alias,
                Rollout.rollout_id == rollout_id,
            )
        ).scalar_one_or_none()
        if row is None:
            raise NotFound(f"{repo_name}@{alias} has no rollout {rollout_id}")
        repo = repository(session, state)
        shown = rollout_json(
            session,
            repo,
            repo_name,
            row,
            proposal_state(session, row.proposal_id),
            silent_after_seconds=state.settings.rollout_silent_after_seconds,
        )
        signed = signed_plan(repo, repo_name, alias)
        signature = None
        if signed is not None and signed.sha256 == row.plan_sha256:
            path = rollout_path(repo_name, alias)
            role = delegated_role_for(repo, path).name
            signature = signature_of(repo, role, path, holders(session))
    plan = plan_json(signed) if signature is not None and signed is not None else None
    steps = shown["plan"].get("steps", []) if isinstance(shown["plan"], dict) else []
    return {
        "repository": repo_name,
        "alias": alias,
        "rollout": shown,
        "signature": signature,
        "plan": plan or shown["plan"],
        "steps": steps,
    }
