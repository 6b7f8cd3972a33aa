"""An org's members: principals who read its private repositories (docs/registry.md#
private-repositories). Its owners read them too, without a member row.

Who may change them: the org's owners and admins. Audited ``org.member.add`` and
``org.member.remove`` (``{"principal": …}``); ``org.update`` records a change of
``private_by_default`` (the ``private`` of the org's new repositories).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._principals import principal_named
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.orgs.service import get_org
from modelward.registry.errors import Forbidden, NotFound
from modelward.registry.models import Org, OrgMember, OrgOwner, Principal

__all__ = ["add_member", "managed_org", "members", "remove_member", "set_private_by_default"]


def managed_org(session: Session, name: str, caller: Caller) -> Org:
    """The org ``name`` if ``caller`` may change its members: admins and its owners."""
    org = get_org(session, name)
    if caller.is_admin or session.get(OrgOwner, (org.id, caller.id)) is not None:
        return org
    raise Forbidden(
        f"{caller.name} does not own the org {name}: only its owners and admins manage its members",
        detail={"org": name, "principal": caller.name},
    )


def members(session: Session, org: Org) -> list[str]:
    return list(
        session.execute(
            select(Principal.name)
            .join(OrgMember, OrgMember.principal_id == Principal.id)
            .where(OrgMember.org_id == org.id)
            .order_by(Principal.name)
        ).scalars()
    )


def add_member(session: Session, *, name: str, principal: str, caller: Caller) -> Org:
    """Make ``principal`` a member of the org (idempotent); audited ``org.member.add``."""
    org = managed_org(session, name, caller)
    row = principal_named(session, principal)
    if session.get(OrgMember, (org.id, row.id)) is None:
        session.add(OrgMember(org_id=org.id, principal_id=row.id))
        session.flush()
    append(
        session,
        actor=caller.name,
        action="org.member.add",
        subject=org.name,
        details={"principal": principal},
    )
    return org


def remove_member(session: Session, *, name: str, principal: str, caller: Caller) -> Org:
    """Take ``principal`` off the org's members; audited ``org.member.remove``. NotFound
    when it is not one."""
    org = managed_org(session, name, caller)
    row = principal_named(session, principal)
    member = session.get(OrgMember, (org.id, row.id))
    if member is None:
        raise NotFound(
            f"{principal} is not a member of {org.name}",
            detail={"org": org.name, "principal": principal},
        )
    session.delete(member)
    session.flush()
    append(
        session,
        actor=caller.name,
        action="org.member.remove",
        subject=org.name,
        details={"principal": principal},
    )
    return org


def set_private_by_default(session: Session, *, name: str, private: bool, caller: Caller) -> Org:
    """Whether the org's new repositories are private; audited ``org.update``."""
    org = managed_org(session, name, caller)
    if org.private_by_default != private:
        org.private_by_default = private
        append(
            session,
            actor=caller.name,
            action="org.update",
            subject=org.name,
            details={"private_by_default": private},
        )
    return org
