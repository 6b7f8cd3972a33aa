"""``/v1/orgs``: orgs, their owners and their policy floor (docs/registry.md#orgs)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Response
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from modelward.attest.policy import PolicyFloor
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State, iso
from modelward.registry.domains._who_may_sign import register_change, who_may_sign
from modelward.registry.domains.auth.deps import Admin, AnyCaller
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.orgs import members, service
from modelward.registry.models import Org

router = domain_router(prefix="/v1/orgs", tags=["orgs"])

OrgName = Annotated[str, Path(max_length=100)]
PrincipalName = Annotated[str, Path(max_length=200)]


class OrgIn(BaseModel):
    """Fields left out keep their value; ``floor: null`` removes the floor."""

    owners: list[Annotated[str, Field(max_length=200)]] | None = Field(
        default=None, max_length=100, description="replaces the owners (publishers or admins)"
    )
    floor: PolicyFloor | None = Field(
        default=None, description="the least every repository policy in the org requires"
    )


class OwnerIn(BaseModel):
    principal: str = Field(max_length=200)


class MemberIn(BaseModel):
    principal: str = Field(max_length=200)


class PrivateDefaultIn(BaseModel):
    private_by_default: bool


def _out(session: Session, org: Org, caller: Caller) -> dict[str, Any]:
    return {**service.org_summary(session, org, caller), "created_at": iso(org.created_at)}


@router.put(
    "/{org}",
    status_code=201,
    responses={
        200: {"description": "the org existed and was updated"},
        409: {"description": "policy_below_floor: repositories of the org would fall below it"},
    },
)
def put_org(
    org: OrgName, body: OrgIn, caller: Admin, state: State, response: Response
) -> dict[str, Any]:
    """Create an org or update its owners and floor (admins)."""
    with state.db.write() as session:
        row, created = service.put_org(
            session,
            name=org,
            owner_names=body.owners,
            floor=body.floor if "floor" in body.model_fields_set else service.UNSET,
            caller=caller,
            default_policy_yaml=state.default_policy_yaml,
        )
        out = _out(session, row, caller)
    if not created:
        response.status_code = 200
    return out


@router.get("")
def list_orgs(caller: AnyCaller, state: State) -> list[dict[str, Any]]:
    with state.db.read() as session:
        return [_out(session, org, caller) for org in service.list_orgs(session)]


@router.get("/{org}")
def get_org(org: OrgName, caller: AnyCaller, state: State) -> dict[str, Any]:
    with state.db.read() as session:
        return _out(session, service.get_org(session, org), caller)


@router.post("/{org}/owners", status_code=201)
def add_owner(org: OrgName, body: OwnerIn, caller: Admin, state: State) -> dict[str, Any]:
    with state.db.write() as session:
        row = service.add_owner(session, name=org, principal=body.principal, caller=caller)
        return _out(session, row, caller)


@router.delete("/{org}/owners/{principal}")
def remove_owner(
    org: OrgName, principal: PrincipalName, caller: Admin, state: State
) -> dict[str, Any]:
    with state.db.write() as session:
        row = service.remove_owner(session, name=org, principal=principal, caller=caller)
        return _out(session, row, caller)


@router.get("/{org}/members")
def list_members(org: OrgName, caller: AnyCaller, state: State) -> dict[str, Any]:
    """The org's members (they read its private repositories; so do its owners): its
    owners and admins."""
    with state.db.read() as session:
        row = members.managed_org(session, org, caller)
        return {
            "org": row.name,
            "owners": service.owners(session, row),
            "members": members.members(session, row),
        }


@router.post("/{org}/members", status_code=201)
def add_member(org: OrgName, body: MemberIn, caller: AnyCaller, state: State) -> dict[str, Any]:
    """Make a principal a member (the org's owners and admins; idempotent; audited
    ``org.member.add``); returns the members."""
    with state.db.write() as session:
        row = members.add_member(session, name=org, principal=body.principal, caller=caller)
        return {
            "org": row.name,
            "owners": service.owners(session, row),
            "members": members.members(session, row),
        }


@router.delete("/{org}/members/{principal}")
def remove_member(
    org: OrgName, principal: PrincipalName, caller: AnyCaller, state: State, force: bool = False
) -> dict[str, Any]:
    """Take a principal off the members (the org's owners and admins; audited
    ``org.member.remove``); 404 when it is not one. A change of who may sign like any
    other: 409 ``signers_would_be_short`` if it would leave a signed target short of its
    threshold (membership names no signer today, so it never does), ``force`` to go on."""
    change = f"remove member {principal} from org {org}"
    with state.db.write() as session:
        with who_may_sign(session, state, change=change, caller=caller, force=force):
            row = members.remove_member(session, name=org, principal=principal, caller=caller)
        return {
            "org": row.name,
            "owners": service.owners(session, row),
            "members": members.members(session, row),
        }


@router.put("/{org}/private-by-default")
def set_private_by_default(
    org: OrgName, body: PrivateDefaultIn, caller: AnyCaller, state: State
) -> dict[str, Any]:
    """Whether the org's new repositories are private (the org's owners and admins; audited
    ``org.update``); returns the org."""
    with state.db.write() as session:
        row = members.set_private_by_default(
            session, name=org, private=body.private_by_default, caller=caller
        )
        return _out(session, row, caller)


def _preview_remove_member(
    session: Session, state: AppState, caller: Caller, args: dict[str, str]
) -> None:
    """``POST /v1/tuf/impact`` change ``remove_member`` {org, principal}."""
    members.remove_member(session, name=args["org"], principal=args["principal"], caller=caller)


register_change("remove_member", ("org", "principal"), _preview_remove_member)
