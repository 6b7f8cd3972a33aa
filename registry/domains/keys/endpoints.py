"""``/v1/keys`` and ``/v1/identities``."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State
from modelward.registry.domains._who_may_sign import register_change, who_may_sign
from modelward.registry.domains.auth.deps import AnyCaller, KeyHolder, Publisher
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.keys import service
from modelward.registry.domains.signing.online import row_seals
from modelward.registry.domains.signing.revocation import key_revoked

router = domain_router(prefix="/v1", tags=["keys"])


class KeyIn(BaseModel):
    public_key_pem: str = Field(max_length=16384)
    principal: str | None = Field(default=None, max_length=200)


class IdentityIn(BaseModel):
    identity: str = Field(max_length=500)
    issuer: str = Field(max_length=500)
    principal: str | None = Field(default=None, max_length=200)


# reviewers register keys too: their signatures on TUF proposals are the approvals


@router.post("/keys", status_code=201)
def register_key(body: KeyIn, caller: KeyHolder, state: State) -> dict[str, Any]:
    seals = row_seals(state)
    with state.db.write() as session:
        kid = service.register_key(
            session, pem=body.public_key_pem, principal=body.principal, caller=caller, seals=seals
        )
    return {"keyid": kid}


@router.get("/keys")
def list_keys(caller: AnyCaller, state: State) -> list[dict[str, Any]]:
    with state.db.read() as session:
        return service.list_keys(session, caller)


@router.delete("/keys/{keyid}", status_code=204)
def revoke_key(keyid: str, caller: KeyHolder, state: State, force: bool = False) -> Response:
    """Revoke a key (its owner, admins; audited ``key.revoke``). Refused with 409
    ``signers_would_be_short`` when it would leave a live signed alias, rollout plan or
    the quarantine short of its threshold, naming each (docs/tuf.md#previews); ``force``
    revokes it anyway (audited ``tuf.unsigning.forced``)."""
    seals = row_seals(state)
    with state.db.write() as session:
        with who_may_sign(session, state, change=f"revoke key {keyid}", caller=caller, force=force):
            service.revoke_key(session, kid=keyid, caller=caller, seals=seals)
        # one transaction: the key's signatures stop counting and it leaves the delegations
        key_revoked(session, state, keyid, caller=caller)
    return Response(status_code=204)


@router.post("/identities", status_code=201)
def register_identity(body: IdentityIn, caller: Publisher, state: State) -> dict[str, Any]:
    with state.db.write() as session:
        ident_id = service.register_identity(
            session,
            identity=body.identity,
            issuer=body.issuer,
            principal=body.principal,
            caller=caller,
        )
    return {"id": ident_id, "identity": body.identity, "issuer": body.issuer}


@router.get("/identities")
def list_identities(caller: AnyCaller, state: State) -> list[dict[str, Any]]:
    with state.db.read() as session:
        return service.list_identities(session)


def _preview_revoke(
    session: Session, state: AppState, caller: Caller, args: dict[str, str]
) -> None:
    """``POST /v1/tuf/impact`` change ``revoke_key`` {keyid}: the revocation as above."""
    service.revoke_key(session, kid=args["keyid"], caller=caller, seals=row_seals(state))


register_change("revoke_key", ("keyid",), _preview_revoke)
