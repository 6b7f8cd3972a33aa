"""Private repositories: a repository's visibility and the principals granted read on it
(docs/registry.md#private-repositories).

Who *reads* is ``auth.authz``'s ``READ``, applied in the query by
``repos.listing.readable_repos``; this module changes what it reads. Who may change it: the
owners of the repository's org and admins (``managed_repo``, in the query). Every change is
audited in the same transaction: ``repo.visibility`` (``{"private": …}``), ``repo.grant``
and ``repo.revoke`` (``{"principal": …}``). A caller who may not read the repository is
answered exactly as for a missing one (404); a reader who does not own its org gets 403.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._principals import principal_named
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos.listing import readable_repo
from modelward.registry.errors import Forbidden, NotFound
from modelward.registry.models import OrgOwner, Principal, RepoReader, Repository

__all__ = ["grant_read", "managed_repo", "readers", "revoke_read", "set_visibility"]


def managed_repo(session: Session, name: str, caller: Caller) -> Repository:
    """The repository ``name`` if ``caller`` may change who reads it: admins, and the owners
    of its org. NotFound when it is missing or unreadable, Forbidden for another reader."""
    repo = readable_repo(session, name, caller)
    if caller.is_admin:
        return repo
    owner = session.get(OrgOwner, (repo.org_id, caller.id))
    if owner is None:
        raise Forbidden(
            f"{caller.name} does not own the org of {name}: only its owners and admins "
            "change who reads it",
            detail={"repository": name, "principal": caller.name},
        )
    return repo


def readers(session: Session, repo: Repository) -> list[str]:
    """The principals granted read on ``repo`` (``repo grant``), by name."""
    return list(
        session.execute(
            select(Principal.name)
            .join(RepoReader, RepoReader.principal_id == Principal.id)
            .where(RepoReader.repo_id == repo.id)
            .order_by(Principal.name)
        ).scalars()
    )


def set_visibility(session: Session, *, name: str, private: bool, caller: Caller) -> Repository:
    """Make ``name`` private or public; audited ``repo.visibility`` (also when unchanged: an
    idempotent success, ``changed`` false)."""
    repo = managed_repo(session, name, caller)
    changed = repo.private != private
    repo.private = private
    append(
        session,
        actor=caller.name,
        action="repo.visibility",
        subject=repo.name,
        details={"private": private, "changed": changed},
    )
    return repo


def grant_read(session: Session, *, name: str, principal: str, caller: Caller) -> Repository:
    """Grant ``principal`` read on ``name`` (idempotent); audited ``repo.grant``."""
    repo = managed_repo(session, name, caller)
    row = principal_named(session, principal)
    if session.get(RepoReader, (repo.id, row.id)) is None:
        session.add(RepoReader(repo_id=repo.id, principal_id=row.id))
        session.flush()
    append(
        session,
        actor=caller.name,
        action="repo.grant",
        subject=repo.name,
        details={"principal": principal},
    )
    return repo


def revoke_read(session: Session, *, name: str, principal: str, caller: Caller) -> Repository:
    """Take back ``principal``'s read on ``name``; audited ``repo.revoke``. NotFound when it
    holds no grant (its org membership or publisher row, if any, still lets it read)."""
    repo = managed_repo(session, name, caller)
    row = principal_named(session, principal)
    grant = session.get(RepoReader, (repo.id, row.id))
    if grant is None:
        raise NotFound(
            f"{principal} holds no read grant on {repo.name}",
            detail={"repository": repo.name, "principal": principal},
        )
    session.delete(grant)
    session.flush()
    append(
        session,
        actor=caller.name,
        action="repo.revoke",
        subject=repo.name,
        details={"principal": principal},
    )
    return repo
