"""Signing keys and Sigstore identities bound to principals (publishers their own, admins
anyone's); every change audited.

A key registered here is a database row the registry seals (``signing.tuf.seals``: an HMAC
with a key on the registry's disk over keyid, owner, key and revocation); the delegations
are made from sealed rows only, so a row a database writer inserts or edits signs nothing
(docs/tuf.md#keys). Revoking one also takes it out of the TUF delegations and its
signatures off pending proposals, in the same transaction (``trust.service.key_revoked``,
called by the endpoint)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._principals import principal_named
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import Action, allows
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.signing.tuf.seals import RowSeals
from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound
from modelward.registry.models import Identity, Principal, SigningKey

__all__ = ["list_identities", "list_keys", "register_identity", "register_key", "revoke_key"]


def _owner(session: Session, caller: Caller, principal: str | None) -> Principal:
    name = principal or caller.name
    if name != caller.name and not caller.is_admin:
        raise Forbidden("only an admin may register keys or identities for another principal")
    if not allows(caller.role, Action.HOLD_KEYS):
        raise Forbidden(f"role {caller.role!r} may not register signing keys or identities")
    return principal_named(session, name)


def register_key(
    session: Session, *, pem: str, principal: str | None, caller: Caller, seals: RowSeals
) -> str:
    from modelward.attest.errors import KeyError_
    from modelward.attest.keys import keyid, load_public_key

    owner = _owner(session, caller, principal)
    try:
        key = load_public_key(pem.encode(), "public_key_pem")
    except KeyError_ as exc:
        raise BadRequest(f"public_key_pem: {exc}", code="invalid_key") from exc
    kid = keyid(key)
    existing = session.get(SigningKey, kid)
    if existing is not None and existing.revoked_at is None:
        raise Conflict(f"key {kid} is already registered", detail={"keyid": kid})
    if existing is not None:
        raise Conflict(f"key {kid} was revoked and cannot be registered again")
    row = SigningKey(keyid=kid, principal_id=owner.id, public_key_pem=pem)
    row.seal = seals.signing_key(row)
    session.add(row)
    append(
        session,
        actor=caller.name,
        action="key.register",
        subject=kid,
        details={"principal": owner.name},
    )
    return kid


def list_keys(session: Session, caller: Caller) -> list[dict[str, object]]:
    query = select(SigningKey, Principal.name).join(
        Principal, Principal.id == SigningKey.principal_id
    )
    rows = session.execute(query.order_by(SigningKey.created_at)).all()
    return [
        {
            "keyid": k.keyid,
            "principal": name,
            "public_key_pem": k.public_key_pem,
            "revoked": k.revoked_at is not None,
        }
        for k, name in rows
    ]


def revoke_key(session: Session, *, kid: str, caller: Caller, seals: RowSeals) -> None:
    query = select(SigningKey).where(SigningKey.keyid == kid)
    if not caller.is_admin:
        query = query.where(SigningKey.principal_id == caller.id)
    key = session.execute(query).scalar_one_or_none()
    if key is None:
        if session.get(SigningKey, kid) is not None:
            raise Forbidden(f"{caller.name} may not revoke key {kid}")
        raise NotFound(f"no key {kid}")
    if key.revoked_at is None:
        key.revoked_at = datetime.now(UTC)
        key.seal = seals.signing_key(key)  # sealed as revoked: un-revoking it breaks the seal
    append(session, actor=caller.name, action="key.revoke", subject=kid, details={})


def register_identity(
    session: Session, *, identity: str, issuer: str, principal: str | None, caller: Caller
) -> int:
    owner = _owner(session, caller, principal)
    if not identity.strip() or not issuer.strip():
        raise BadRequest("identity and issuer must not be empty")
    clash = session.execute(
        select(Identity.id).where(
            Identity.identity == identity, Identity.issuer == issuer, Identity.revoked_at.is_(None)
        )
    ).first()
    if clash is not None:
        raise Conflict(f"identity {identity} ({issuer}) is already registered")
    row = Identity(principal_id=owner.id, identity=identity, issuer=issuer)
    session.add(row)
    session.flush()
    append(
        session,
        actor=caller.name,
        action="identity.register",
        subject=identity,
        details={"issuer": issuer, "principal": owner.name, "id": row.id},
    )
    return row.id


def list_identities(session: Session) -> list[dict[str, object]]:
    rows = session.execute(
        select(Identity, Principal.name)
        .join(Principal, Principal.id == Identity.principal_id)
        .order_by(Identity.id)
    ).all()
    return [
        {
            "id": i.id,
            "identity": i.identity,
            "issuer": i.issuer,
            "principal": name,
            "revoked": i.revoked_at is not None,
        }
        for i, name in rows
    ]
