"""Orgs: who may create repositories ``org/*``, and the floor their policies must meet.

Authorization is in the query: ``creatable_org`` returns an org only to its owners and to
admins. An org that does not exist yet is created implicitly, owned by nobody and with no
floor, only when an admin creates a repository in it; a publisher is refused (403) — nobody
gets an org by being first. Every change is audited in the same transaction (``org.create``,
``org.update``, ``org.owner.add``, ``org.owner.remove``), floors by hash.

A floor is raised only when every repository already in the org meets it (else 409
``policy_below_floor`` listing them): the invariant "every repository of an org meets its
floor" holds after every write, and ``registry.policy.repo_policy`` still checks it at use.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from modelward.attest.policy import PolicyFloor, floor_shortfalls
from modelward.registry.domains._principals import principal_named
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import Action, allows, may_clause
from modelward.registry.domains.auth.service import Caller
from modelward.registry.errors import BadRequest, Forbidden, NotFound
from modelward.registry.models import Org, OrgOwner, Principal, Repository
from modelward.registry.policy import (
    FloorNotMet,
    dump_floor,
    effective_policy,
    load_floor,
)

__all__ = [
    "ORG_RE",
    "UNSET",
    "add_owner",
    "check_org_name",
    "creatable_org",
    "get_org",
    "list_orgs",
    "org_summary",
    "owners",
    "put_org",
    "remove_owner",
]

ORG_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")  # the org of NAME_RE in repos.service
MAX_LISTED = 50  # repositories named in a refused floor raise
UNSET: Any = object()  # "leave as it is" for put_org's optional fields


def check_org_name(name: str) -> str:
    if not ORG_RE.fullmatch(name):
        raise BadRequest(
            f"invalid org name {name!r}: lowercase letters, digits, . _ -", code="invalid_name"
        )
    return name


def get_org(session: Session, name: str) -> Org:
    org = session.execute(select(Org).where(Org.name == name)).scalar_one_or_none()
    if org is None:
        raise NotFound(f"no org {name}")
    return org


def list_orgs(session: Session) -> list[Org]:
    return list(session.execute(select(Org).order_by(Org.name)).scalars())


def owners(session: Session, org: Org) -> list[str]:
    return list(
        session.execute(
            select(Principal.name)
            .join(OrgOwner, OrgOwner.principal_id == Principal.id)
            .where(OrgOwner.org_id == org.id)
            .order_by(Principal.name)
        ).scalars()
    )


def org_summary(session: Session, org: Org, caller: Caller) -> dict[str, Any]:
    """The org as ``GET /v1/orgs/{org}`` shows it; ``repositories`` counts those ``caller``
    may read (``auth.authz`` ``READ``: a private one he may not read is not counted)."""
    floor = load_floor(org.floor)
    count = session.execute(
        select(func.count())
        .select_from(Repository)
        .where(Repository.org_id == org.id, may_clause(caller, Action.READ))
    ).scalar_one()
    return {
        "name": org.name,
        "owners": owners(session, org),
        "floor": None if floor is None else floor.model_dump(mode="json"),
        "repositories": count,
        "private_by_default": org.private_by_default,
    }


def _sha(text: str | None) -> str | None:
    return None if text is None else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _create(
    session: Session,
    name: str,
    caller: Caller,
    *,
    implicit: bool,
    owner_rows: list[Principal],
    floor: PolicyFloor | None,
) -> Org:
    org = Org(name=name, floor=dump_floor(floor), created_by=caller.id)
    session.add(org)
    session.flush()
    for row in owner_rows:
        session.add(OrgOwner(org_id=org.id, principal_id=row.id))
    append(
        session,
        actor=caller.name,
        action="org.create",
        subject=name,
        details={
            "implicit": implicit,
            "owners": sorted(r.name for r in owner_rows),
            "floor_sha256": _sha(org.floor),
        },
    )
    return org


def creatable_org(session: Session, name: str, caller: Caller) -> Org:
    """The org ``caller`` may create a repository in; Forbidden otherwise.

    Owners (publishers) may create in their orgs; admins in any org, and an org that does
    not exist yet is then created owned by nobody, with no floor (audited ``org.create``,
    ``implicit: true``). A publisher is refused an org it does not own, existing or not.
    """
    check_org_name(name)
    query = select(Org).where(Org.name == name)
    if not caller.is_admin:
        owned = select(OrgOwner.org_id).where(
            OrgOwner.org_id == Org.id, OrgOwner.principal_id == caller.id
        )
        query = query.where(owned.exists())
    org = session.execute(query).scalar_one_or_none()
    if org is not None:
        return org
    if not caller.is_admin:
        raise Forbidden(
            f"{caller.name} does not own the org {name}: only its owners and admins create "
            f"repositories in it (an admin names owners: PUT /v1/orgs/{name})",
            detail={"org": name},
        )
    return _create(session, name, caller, implicit=True, owner_rows=[], floor=None)


def _principals(session: Session, names: list[str]) -> list[Principal]:
    rows = []
    for name in dict.fromkeys(names):
        row = principal_named(session, name)
        if not allows(row.role, Action.OWN):
            raise BadRequest(
                f"{name} has role {row.role!r}; only publishers (and admins) create repositories",
                detail={"principal": name, "role": row.role},
            )
        rows.append(row)
    return rows


def _repos_below(
    session: Session, org: Org, floor: PolicyFloor, default_policy_yaml: str | None
) -> list[dict[str, Any]]:
    below = []
    repos = session.execute(
        select(Repository).where(Repository.org_id == org.id).order_by(Repository.name)
    ).scalars()
    for repo in repos:
        policy = effective_policy(
            repo.policy_yaml, default_policy_yaml, f"{repo.name} policy", repo.name
        )
        shortfalls = floor_shortfalls(policy, floor)
        if shortfalls:
            below.append({"repository": repo.name, "shortfalls": [str(s) for s in shortfalls]})
    return below


def put_org(
    session: Session,
    *,
    name: str,
    owner_names: list[str] | None,
    floor: PolicyFloor | None,
    caller: Caller,
    default_policy_yaml: str | None,
) -> tuple[Org, bool]:
    """Create the org, or update it (admins only); ``(org, created)``.

    ``owner_names`` replaces the owners (None: keep them; on creation, none); ``floor``
    replaces the floor (``UNSET``: keep it; None: no floor). Raises Forbidden, NotFound (an
    unknown owner), BadRequest, and FloorNotMet when a repository of the org would fall
    below the new floor (each listed with what it lacks).
    """
    if not caller.is_admin:
        raise Forbidden("only an admin may create or change an org")
    check_org_name(name)
    owner_rows = None if owner_names is None else _principals(session, owner_names)
    org = session.execute(select(Org).where(Org.name == name)).scalar_one_or_none()
    if org is None:
        return _create(
            session,
            name,
            caller,
            implicit=False,
            owner_rows=owner_rows or [],
            floor=None if floor is UNSET else floor,
        ), True
    details: dict[str, Any] = {}
    if floor is not UNSET and dump_floor(floor) != org.floor:
        if floor is not None:
            below = _repos_below(session, org, floor, default_policy_yaml)
            if below:
                raise FloorNotMet(
                    f"{len(below)} repository(ies) of {name} would fall below the new floor, "
                    f"first {below[0]['repository']}: {below[0]['shortfalls'][0]}; replace "
                    "their policies first",
                    detail={"repositories": below[:MAX_LISTED]},
                )
        new = dump_floor(floor)
        details.update(floor_from_sha256=_sha(org.floor), floor_to_sha256=_sha(new))
        org.floor = new
    if owner_rows is not None:
        before = set(owners(session, org))
        after = {r.name for r in owner_rows}
        for old in session.execute(select(OrgOwner).where(OrgOwner.org_id == org.id)).scalars():
            session.delete(old)
        session.flush()
        for principal in owner_rows:
            session.add(OrgOwner(org_id=org.id, principal_id=principal.id))
        if before != after:
            details.update(
                owners_added=sorted(after - before), owners_removed=sorted(before - after)
            )
    if details:
        append(session, actor=caller.name, action="org.update", subject=name, details=details)
    return org, False


def add_owner(session: Session, *, name: str, principal: str, caller: Caller) -> Org:
    """Make ``principal`` (a publisher or admin) an owner (admins only; idempotent)."""
    if not caller.is_admin:
        raise Forbidden("only an admin may name an org's owners")
    org = get_org(session, name)
    (row,) = _principals(session, [principal])
    if session.get(OrgOwner, (org.id, row.id)) is None:
        session.add(OrgOwner(org_id=org.id, principal_id=row.id))
    append(
        session,
        actor=caller.name,
        action="org.owner.add",
        subject=name,
        details={"principal": principal},
    )
    return org


def remove_owner(session: Session, *, name: str, principal: str, caller: Caller) -> Org:
    """Remove an owner (admins only); NotFound when ``principal`` is not one. The
    repositories it created stay, and it stays their publisher."""
    if not caller.is_admin:
        raise Forbidden("only an admin may remove an org's owners")
    org = get_org(session, name)
    row = session.execute(
        select(OrgOwner)
        .join(Principal, Principal.id == OrgOwner.principal_id)
        .where(OrgOwner.org_id == org.id, Principal.name == principal)
    ).scalar_one_or_none()
    if row is None:
        raise NotFound(f"{principal!r} is not an owner of {name}")
    session.delete(row)
    append(
        session,
        actor=caller.name,
        action="org.owner.remove",
        subject=name,
        details={"principal": principal},
    )
    return org
