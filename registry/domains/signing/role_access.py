"""Who is served a repository's delegated TUF role files (docs/tuf.md#private-repositories).

A role that signs one repository's aliases is named ``ORG:NAME@…`` (attest.tuf
``protected_role``, ``online_role``, ``open_role``); its files ``N.ORG:NAME@….json`` list the
repository's alias targets and digests. Those of a private repository are served only to
the callers who may read it (``auth.authz`` ``READ`` through ``repos.listing.readable_repos``),
and answered as a missing file (the same 404) to everyone else; with ``tuf_public`` and no
token, only public repositories' roles are served. The top-level roles (root, timestamp,
snapshot, targets, quarantine) stay readable by every reader: docs/tuf.md says what their
role names and delegation paths reveal.

``/tuf/`` fast path (domains/signing/fast_path.py) never answers a repository's role from
memory: it hands them to the route, which asks ``may_read_role``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.tuf import QUARANTINE_ROLE
from modelward.registry.domains._state import AppState
from modelward.registry.domains.auth.authz import Action, allows
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.quarantine.service import held_where_readable
from modelward.registry.domains.repos.listing import readable_repos
from modelward.registry.models import Repository

__all__ = ["may_read_role", "proposals_readable", "repository_of_role"]


def repository_of_role(role: str) -> str | None:
    """``ORG/NAME`` for a role ``ORG:NAME@…`` that signs one repository's aliases; None for
    every other role (the top-level ones, ``quarantine``)."""
    prefix, at, _ = role.partition("@")
    org, colon, name = prefix.partition(":")
    if not at or not colon or not org or not name:
        return None
    return f"{org}/{name}"


def may_read_role(state: AppState, role: str, caller: Caller | None) -> bool:
    """Whether ``caller`` (None: anonymous, ``tuf_public``) is served ``role``'s files: every
    role but a private repository's, and those only to its readers. One query whether the
    repository is missing, private or public."""
    repo = repository_of_role(role)
    if repo is None:
        return True
    if caller is None:
        query = select(Repository.id).where(Repository.name == repo, Repository.private.is_(False))
    else:
        query = (
            readable_repos(caller).with_only_columns(Repository.id).where(Repository.name == repo)
        )
    with state.db.read() as session:
        return session.execute(query).first() is not None


def proposals_readable(
    session: Session, caller: Caller, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Those of the proposals (``trust.service.proposal_json``) whose repository (their
    ``repository``, or their role's) ``caller`` may read, and quarantine proposals whose
    digest a repository he may read holds: a private repository's proposals are not
    listed, and one asked for by id is answered as missing. Also the roles of
    ``/v1/tuf/status`` (items with a ``role``): a private repository's, only to its readers."""
    named = {
        name
        for item in items
        for name in (item.get("repository"), repository_of_role(str(item.get("role", ""))))
        if isinstance(name, str)
    }
    readable = set(
        session.execute(
            readable_repos(caller)
            .with_only_columns(Repository.name)
            .where(Repository.name.in_(named))
        ).scalars()
    )
    return [
        item
        for item in items
        if all(
            name in readable
            for name in (item.get("repository"), repository_of_role(str(item.get("role", ""))))
            if isinstance(name, str)
        )
        and _quarantine_readable(session, caller, item)
    ]


def _quarantine_readable(session: Session, caller: Caller, item: dict[str, Any]) -> bool:
    """A quarantine proposal (or its lift) names no repository, only a digest: listed to a
    caller who may read a repository that holds the digest (admins and reviewers: every
    one), so a private-only digest and its reason are not (issue 38 item 4)."""
    if item.get("role") != QUARANTINE_ROLE or allows(caller.role, Action.REVIEW):
        return True
    digests = [d for d in (item.get("to_digest"), item.get("from_digest")) if isinstance(d, str)]
    return all(held_where_readable(session, digest, caller) for digest in digests)
