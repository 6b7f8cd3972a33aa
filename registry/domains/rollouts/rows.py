"""Finding a rollout's row: the one under way for an alias, or its latest."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.models import Rollout

__all__ = ["ACTIVE", "active_rollout", "latest_rollout"]

ACTIVE = ("planned", "running", "paused")


def active_rollout(session: Session, repo_id: int, alias: str) -> Rollout | None:
    """The alias's rollout under way (planned, running or paused), if any."""
    return session.scalars(
        select(Rollout)
        .where(Rollout.repo_id == repo_id, Rollout.alias == alias, Rollout.state.in_(ACTIVE))
        .order_by(Rollout.id.desc())
        .limit(1)
    ).first()


def latest_rollout(session: Session, repo_id: int, alias: str) -> Rollout | None:
    """The alias's latest rollout, whatever its state."""
    return session.scalars(
        select(Rollout)
        .where(Rollout.repo_id == repo_id, Rollout.alias == alias)
        .order_by(Rollout.id.desc())
        .limit(1)
    ).first()
