"""Authorization as data: the one place that says what a principal may do.

Every (role, action) pair is in ``GRANTS`` below; the domains ask this module, never a role
name of their own. ``may(session, caller, action, repo)`` answers for one repository;
``may_clause(caller, action)`` is the same rule as a SQL condition over ``Repository``, for
queries that return only what the caller may act on (authorization in the query);
``allows(role, action)`` answers for a role, wherever it acts (the route dependencies,
auth.deps). The table:

=====================  ===========================================================
action                 who
=====================  ===========================================================
``ADMINISTER``         admins: principals, tokens, quotas, orgs, GC, a repository's
                       publishers, lifting what only an admin may
``PUBLISH``            admins anywhere; publishers in the repositories that list them
                       (``repo add-publisher``): push, alias moves, provenance, and a
                       rollout's start, advance, abort and ``rollout analyze`` (the
                       registry signs the step its judge gives)
``OWN``                publishers and admins: may create repositories, own orgs, be
                       listed as a repository's publisher
``HOLD_KEYS``          admins, publishers and reviewers: register signing keys
``REVIEW``             reviewers and admins: approve and sign protected moves, attach
                       approvals and evaluations, the forensic view (quarantined bytes,
                       retracted attestations)
``REPORT``             readers (serving workers) and admins: boots, baselines, replay
                       results
``READ``               a public repository: every authenticated principal; a private
                       one: admins, reviewers (registry-wide: they review and quarantine
                       everywhere), its org's owners and members, its publishers and the
                       principals granted read on it (``repo grant``). Everything a
                       repository holds is read through it (docs/registry.md#private-
                       repositories); unreadable answers exactly as missing (404)
=====================  ===========================================================

Who may attach a statement is the action of its predicate type (``attach_action``; docs/
registry.md#who-may-attach-what): an unknown type fails closed to ``PUBLISH``. The
two-person rule of a protected move (not the publisher of the bundle, not the mover) is the
alias decision's (attest.alias_decision), not a role's.

Raises ``Forbidden`` (403, audited as ``denied`` by the app's one error handler).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, Final, Protocol

from sqlalchemy import ColumnElement, and_, false, or_, select, true
from sqlalchemy.orm import Session

from modelward.attest.statement import PredicateType
from modelward.attest.verify import OMS_PREDICATE_PREFIX
from modelward.registry.errors import Forbidden
from modelward.registry.models import (
    Attestation,
    OrgMember,
    OrgOwner,
    RepoPublisher,
    RepoReader,
    Repository,
)
from modelward.registry.models import Principal as PrincipalRow

__all__ = [
    "ADMIN",
    "APPROVER_ROLES",
    "GRANTS",
    "PUBLISHER",
    "PUBLISHER_ROLES",
    "READER",
    "REVIEWER",
    "ROLES",
    "Action",
    "Grant",
    "allows",
    "attach_action",
    "may",
    "may_attach",
    "may_clause",
    "principal_may_clause",
    "require_may_attach",
    "require_may_attach_some",
    "require_may_retract",
    "require_may_see_retracted",
    "roles_for",
]

ADMIN: Final = "admin"
PUBLISHER: Final = "publisher"
REVIEWER: Final = "reviewer"
READER: Final = "reader"
ROLES: Final = (ADMIN, PUBLISHER, REVIEWER, READER)


class Principal(Protocol):
    """What a decision needs of a caller (``auth.service.Caller`` is one)."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...


class Action(Enum):
    ADMINISTER = "administer"
    PUBLISH = "publish"
    OWN = "own"
    HOLD_KEYS = "hold_keys"
    REVIEW = "review"
    REPORT = "report"
    READ = "read"


@dataclass(frozen=True)
class Grant:
    """Who may do one action: ``roles`` anywhere, plus the publishers a repository lists
    when ``listed_publishers``, plus (``public_or_granted``) everybody in a public
    repository and, in a private one, its org's owners and members, its publishers and its
    granted readers. ``who`` names them in messages and the docs."""

    who: str
    roles: frozenset[str]
    listed_publishers: bool = False
    public_or_granted: bool = False


GRANTS: Final[Mapping[Action, Grant]] = MappingProxyType(
    {
        Action.ADMINISTER: Grant("admins", frozenset({ADMIN})),
        Action.PUBLISH: Grant(
            "publishers of the repository and admins", frozenset({ADMIN}), listed_publishers=True
        ),
        Action.OWN: Grant("publishers and admins", frozenset({ADMIN, PUBLISHER})),
        Action.HOLD_KEYS: Grant(
            "admins, publishers and reviewers", frozenset({ADMIN, PUBLISHER, REVIEWER})
        ),
        Action.REVIEW: Grant("reviewers and admins", frozenset({ADMIN, REVIEWER})),
        Action.REPORT: Grant("readers (serving workers) and admins", frozenset({ADMIN, READER})),
        Action.READ: Grant(
            "everybody in a public repository; in a private one admins, reviewers, its org's "
            "owners and members, its publishers and the principals granted read",
            frozenset({ADMIN, REVIEWER}),
            public_or_granted=True,
        ),
    }
)

# The statements a principal may attach, by predicate type (module doc).
_ATTACH: Final[Mapping[str, Action]] = MappingProxyType(
    {
        PredicateType.PROVENANCE: Action.PUBLISH,
        PredicateType.BASELINE: Action.REPORT,
        PredicateType.REPLAY: Action.REPORT,
        PredicateType.APPROVAL: Action.REVIEW,
        PredicateType.EVALUATION: Action.REVIEW,
    }
)
_OMS_SIGNATURES: Final = Action.PUBLISH
_OTHER_PREDICATES: Final = Action.PUBLISH  # fail closed: an unknown type is a publisher's claim


def roles_for(action: Action) -> tuple[str, ...]:
    """The roles that may do ``action`` somewhere, sorted (for messages and role filters)."""
    grant = GRANTS[action]
    if grant.public_or_granted:
        return tuple(sorted(ROLES))
    return tuple(sorted(grant.roles | ({PUBLISHER} if grant.listed_publishers else set())))


def allows(role: str, action: Action) -> bool:
    """Whether ``role`` may do ``action`` somewhere (for a repository, see ``may``)."""
    return role in roles_for(action)


# The role sets the route dependencies and the approvers' query read (auth.deps, aliases).
PUBLISHER_ROLES: Final = roles_for(Action.PUBLISH)
APPROVER_ROLES: Final = roles_for(Action.REVIEW)


def may_clause(caller: Principal, action: Action) -> ColumnElement[bool]:
    """``caller`` may do ``action`` to the ``Repository`` row, as a SQL condition."""
    grant = GRANTS[action]
    if caller.role in grant.roles:
        return true()
    if grant.public_or_granted:
        return _public_or_granted(caller.id)
    if not (grant.listed_publishers and caller.role == PUBLISHER):
        return false()
    return (
        select(RepoPublisher.repo_id)
        .where(RepoPublisher.repo_id == Repository.id, RepoPublisher.principal_id == caller.id)
        .exists()
    )


def _public_or_granted(principal_id: int) -> ColumnElement[bool]:
    """The ``Repository`` row is public, or ``principal_id`` owns or is a member of its org,
    publishes to it or was granted read on it (``READ``'s per-repository part)."""
    member = select(OrgMember.org_id).where(
        OrgMember.org_id == Repository.org_id, OrgMember.principal_id == principal_id
    )
    owner = select(OrgOwner.org_id).where(
        OrgOwner.org_id == Repository.org_id, OrgOwner.principal_id == principal_id
    )
    publisher = select(RepoPublisher.repo_id).where(
        RepoPublisher.repo_id == Repository.id, RepoPublisher.principal_id == principal_id
    )
    reader = select(RepoReader.repo_id).where(
        RepoReader.repo_id == Repository.id, RepoReader.principal_id == principal_id
    )
    return or_(
        Repository.private.is_(False),
        member.exists(),
        owner.exists(),
        publisher.exists(),
        reader.exists(),
    )


def principal_may_clause(action: Action, repo_id: Any) -> ColumnElement[bool]:
    """``may`` the other way round: the ``Principal`` row (models) may do ``action`` to the
    repository ``repo_id`` (a value or a column), as a SQL condition; e.g. the upload
    sessions a repository's quota is charged for are those of principals who may publish
    there (gc.quota)."""
    grant = GRANTS[action]
    anywhere = PrincipalRow.role.in_(sorted(grant.roles))
    if grant.public_or_granted:
        raise ValueError(f"principal_may_clause does not answer {action.name}: use may_clause")
    if not grant.listed_publishers:
        return anywhere
    listed = (
        select(RepoPublisher.repo_id)
        .where(RepoPublisher.repo_id == repo_id, RepoPublisher.principal_id == PrincipalRow.id)
        .exists()
    )
    return or_(anywhere, and_(PrincipalRow.role == PUBLISHER, listed))


def may(session: Session, caller: Principal, action: Action, repo: Repository) -> bool:
    """Whether ``caller`` may do ``action`` to ``repo`` (module doc)."""
    query = select(Repository.id).where(Repository.id == repo.id, may_clause(caller, action))
    return session.execute(query).first() is not None


def attach_action(predicate_type: str, kind: str) -> Action:
    """The action attaching a verified statement of this type and signature kind is."""
    if kind == "oms" or predicate_type.startswith(OMS_PREDICATE_PREFIX):
        return _OMS_SIGNATURES
    return _ATTACH.get(predicate_type, _OTHER_PREDICATES)


def may_attach(
    session: Session, repo: Repository, caller: Principal, predicate_type: str, kind: str
) -> bool:
    """Whether ``caller`` may attach a statement of this type to bundles of ``repo``."""
    return may(session, caller, attach_action(predicate_type, kind), repo)


def require_may_attach(
    session: Session, repo: Repository, caller: Principal, predicate_type: str, kind: str
) -> None:
    """Raise ``Forbidden`` unless ``caller`` may attach this statement to bundles of ``repo``.

    ``predicate_type`` and ``kind`` must be the verified statement's (``VerifiedStatement``),
    or a stored row's (recorded from one), never a field the client sent. The message names
    the caller, its role, the predicate type and who may attach it.
    """
    if may_attach(session, repo, caller, predicate_type, kind):
        return
    who = GRANTS[attach_action(predicate_type, kind)].who
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not attach {predicate_type} attestations "
        f"in {repo.name}: only {who} may",
        detail={
            "principal": caller.name,
            "role": caller.role,
            "predicate_type": predicate_type,
            "kind": kind,
            "allowed": who,
        },
    )


def require_may_attach_some(session: Session, repo: Repository, caller: Principal) -> None:
    """Raise ``Forbidden`` when ``caller`` may attach nothing at all to bundles of ``repo``.

    A cheap check before verifying (which may hash a whole model): a publisher of another
    repository is refused without the registry reading the bundle's files.
    """
    actions = {*_ATTACH.values(), _OMS_SIGNATURES, _OTHER_PREDICATES}
    if any(caller.role in GRANTS[action].roles for action in actions):
        return
    if any(GRANTS[a].listed_publishers and may(session, caller, a, repo) for a in actions):
        return
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not attach attestations in {repo.name}",
        detail={"principal": caller.name, "role": caller.role},
    )


def require_may_retract(caller: Principal, row: Attestation, attached_by: str) -> None:
    """Raise ``Forbidden`` unless ``caller`` attached ``row`` or is an admin."""
    if allows(caller.role, Action.ADMINISTER) or caller.id == row.created_by:
        return
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not retract attestation {row.id}: only "
        f"{attached_by}, who attached it, or an admin may",
        detail={"principal": caller.name, "role": caller.role, "attached_by": attached_by},
    )


def require_may_see_retracted(caller: Principal) -> None:
    """Raise ``Forbidden`` unless ``caller`` may list retracted attestations (forensics)."""
    if allows(caller.role, Action.REVIEW):
        return
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not list retracted attestations: only admins and "
        "reviewers may",
        detail={
            "principal": caller.name,
            "role": caller.role,
            "allowed": list(roles_for(Action.REVIEW)),
        },
    )
