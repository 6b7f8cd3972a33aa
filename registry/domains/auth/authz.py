"""Authorization as data: the one place that says what a principal may do to a repository.

``may(session, caller, action, repo)`` answers for one repository; ``may_clause(caller,
action)`` is the same rule as a SQL condition over ``Repository``, for queries that return
only what the caller may act on (authorization in the query). The rules:

- ``PUBLISH``: an admin, anywhere; a publisher, in the repositories that list it
  (``repo add-publisher``); nobody else;
- ``APPROVE``: a reviewer or an admin (the two-person rule, not the publisher of the bundle
  and not the mover, is the alias decision's: attest.alias_decision).

``PUBLISHER_ROLES`` and ``APPROVER_ROLES`` are the role sets these rules and the route
dependencies (auth.deps) read.
"""

from __future__ import annotations

from enum import Enum

from sqlalchemy import ColumnElement, false, select, true
from sqlalchemy.orm import Session

from modelward.registry.domains.auth.service import Caller
from modelward.registry.models import RepoPublisher, Repository

__all__ = ["APPROVER_ROLES", "PUBLISHER_ROLES", "Action", "may", "may_clause"]

PUBLISHER_ROLES = ("admin", "publisher")
APPROVER_ROLES = ("admin", "reviewer")


class Action(Enum):
    PUBLISH = "publish"
    APPROVE = "approve"


def may_clause(caller: Caller, action: Action) -> ColumnElement[bool]:
    """``caller`` may do ``action`` to the ``Repository`` row, as a SQL condition."""
    if action is Action.APPROVE:
        return true() if caller.role in APPROVER_ROLES else false()
    if caller.is_admin:
        return true()
    if caller.role != "publisher":
        return false()
    return (
        select(RepoPublisher.repo_id)
        .where(RepoPublisher.repo_id == Repository.id, RepoPublisher.principal_id == caller.id)
        .exists()
    )


def may(session: Session, caller: Caller, action: Action, repo: Repository) -> bool:
    """Whether ``caller`` may do ``action`` to ``repo`` (module doc)."""
    query = select(Repository.id).where(Repository.id == repo.id, may_clause(caller, action))
    return session.execute(query).first() is not None
