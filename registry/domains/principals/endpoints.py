"""``/v1/whoami`` and ``/v1/admin/...``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State, iso
from modelward.registry.domains._who_may_sign import admin_only, register_change, who_may_sign
from modelward.registry.domains.auth.deps import Admin, AnyCaller
from modelward.registry.domains.auth.service import MAX_TOKEN_LIFETIME, Caller
from modelward.registry.domains.principals import service
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.publish import sync
from modelward.registry.domains.signing.revocation import signers_left
from modelward.registry.domains.signing.tuf.bootstrap import row_seals
from modelward.registry.domains.signing.tuf.keys import tuf_keys
from modelward.registry.models import SigningKey

router = domain_router(prefix="/v1", tags=["principals"])


class PrincipalIn(BaseModel):
    name: str = Field(max_length=200)
    role: str = Field(max_length=20)


class RoleIn(BaseModel):
    role: str = Field(max_length=20)


class TokenIn(BaseModel):
    expires_in_seconds: int | None = Field(default=None, gt=0, le=MAX_TOKEN_LIFETIME)


@router.get("/whoami")
def whoami(caller: AnyCaller) -> dict[str, Any]:
    return {"principal": caller.name, "role": caller.role}


@router.post("/admin/principals", status_code=201)
def create_principal(body: PrincipalIn, caller: Admin, state: State) -> dict[str, Any]:
    seals = row_seals(state.db, tuf_keys(state.settings))
    with state.db.write() as session:
        p = service.create_principal(
            session, name=body.name, role=body.role, actor=caller.name, seals=seals
        )
        return {"name": p.name, "role": p.role, "created_at": iso(p.created_at)}


@router.get("/admin/principals")
def list_principals(caller: Admin, state: State) -> list[dict[str, Any]]:
    """Every principal: name, role, created_at, disabled, disabled_at."""
    with state.db.read() as session:
        return [service.principal_json(p) for p in service.list_principals(session)]


@router.put("/admin/principals/{name}/role")
def set_role(
    name: str, body: RoleIn, caller: Admin, state: State, force: bool = False
) -> dict[str, Any]:
    """Change a principal's role (audited ``principal.role``); the TUF delegations follow
    (a reviewer's keys leave, or join, the roles reviewers sign). Refused with 409
    ``signers_would_be_short`` when that would leave a live signed alias, rollout plan or
    the quarantine short of its threshold, naming each; ``force`` does it anyway (audited
    ``tuf.unsigning.forced``; docs/operations.md#changing-who-may-sign)."""
    seals = row_seals(state.db, tuf_keys(state.settings))
    change = f"set role of {name} to {body.role}"
    with state.db.write() as session:
        with who_may_sign(session, state, change=change, caller=caller, force=force):
            p = service.set_role(session, name=name, role=body.role, actor=caller.name, seals=seals)
        sync(session, state, repository(session, state), proposer_id=caller.id)
        return service.principal_json(p)


@router.post("/admin/principals/{name}/disable")
def disable_principal(
    name: str, caller: Admin, state: State, force: bool = False
) -> dict[str, Any]:
    """Disable a principal: every API token, ``/v2`` bearer and console session it holds is
    refused from its next request on, and its keys count in no delegation: its signatures
    come off pending proposals and the delegations are re-made without them, in this
    transaction, as a key's revocation does (audited ``principal.disable``). 409 for the
    last enabled admin; 409 ``signers_would_be_short`` when it would leave a live signed
    alias, rollout plan or the quarantine short of its threshold, naming each (``force``
    does it anyway, audited ``tuf.unsigning.forced``)."""
    seals = row_seals(state.db, tuf_keys(state.settings))
    with state.db.write() as session:
        with who_may_sign(
            session, state, change=f"disable principal {name}", caller=caller, force=force
        ):
            p = service.set_disabled(
                session, name=name, disabled=True, actor=caller.name, seals=seals
            )
        keyids = list(
            session.scalars(select(SigningKey.keyid).where(SigningKey.principal_id == p.id))
        )
        signers_left(
            session,
            state,
            keyids,
            why=f"principal {name} disabled",
            refused=f"principal {name} was not disabled",
            caller=caller,
        )
        return service.principal_json(p)


@router.post("/admin/principals/{name}/enable")
def enable_principal(name: str, caller: Admin, state: State) -> dict[str, Any]:
    """Enable a disabled principal again: its unrevoked, unexpired tokens work again and
    its active keys join the delegations again (audited ``principal.enable``)."""
    seals = row_seals(state.db, tuf_keys(state.settings))
    with state.db.write() as session:
        p = service.set_disabled(session, name=name, disabled=False, actor=caller.name, seals=seals)
        sync(session, state, repository(session, state), proposer_id=caller.id)
        return service.principal_json(p)


@router.get("/admin/tokens")
def list_tokens(
    caller: Admin,
    state: State,
    principal: Annotated[str | None, Query(max_length=200)] = None,
) -> list[dict[str, Any]]:
    """Every API token (of ``principal`` when given), oldest first: id, principal,
    created_at, expires_at, revoked_at; never the secret or its hash."""
    with state.db.read() as session:
        return service.list_tokens(session, principal=principal)


@router.post("/admin/principals/{name}/tokens", status_code=201)
def create_token(
    name: str, caller: Admin, state: State, body: TokenIn | None = None
) -> dict[str, Any]:
    with state.db.write() as session:
        token_id, token = service.create_token(
            session,
            name=name,
            expires_in=body.expires_in_seconds if body else None,
            actor=caller.name,
        )
    return {"id": token_id, "token": token}


@router.delete("/admin/tokens/{token_id}", status_code=204)
def revoke_token(token_id: str, caller: Admin, state: State) -> Response:
    with state.db.write() as session:
        service.revoke_token(session, token_id=token_id, actor=caller.name)
    return Response(status_code=204)


def _preview_set_role(
    session: Session, state: AppState, caller: Caller, args: dict[str, str]
) -> None:
    """``POST /v1/tuf/impact`` change ``set_role`` {principal, role}."""
    admin_only(caller, "a role change")
    service.set_role(
        session,
        name=args["principal"],
        role=args["role"],
        actor=caller.name,
        seals=row_seals(state.db, tuf_keys(state.settings)),
    )


def _preview_disable(
    session: Session, state: AppState, caller: Caller, args: dict[str, str]
) -> None:
    """``POST /v1/tuf/impact`` change ``disable_principal`` {principal}."""
    admin_only(caller, "disabling a principal")
    service.set_disabled(
        session,
        name=args["principal"],
        disabled=True,
        actor=caller.name,
        seals=row_seals(state.db, tuf_keys(state.settings)),
    )


register_change("set_role", ("principal", "role"), _preview_set_role)
register_change("disable_principal", ("principal",), _preview_disable)
