"""Principals and their tokens (admin only; also used by the ``modelward admin`` commands)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._principals import find_principal, principal_named
from modelward.registry.domains._state import iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import ADMIN, ROLES
from modelward.registry.domains.auth.service import issue_token
from modelward.registry.domains.signing.tuf.seals import RowSeals
from modelward.registry.errors import BadRequest, Conflict, NotFound
from modelward.registry.models import Principal, Token

__all__ = [
    "bootstrap_admin",
    "create_principal",
    "create_token",
    "list_principals",
    "list_tokens",
    "principal_json",
    "revoke_token",
    "set_disabled",
    "set_role",
    "token_json",
]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,199}$")


def create_principal(
    session: Session, *, name: str, role: str, actor: str, seals: RowSeals | None = None
) -> Principal:
    """A new principal, sealed with ``seals`` (signing.tuf.seals). ``None``: unsealed, as
    straight on the database without the registry's keys directory: it can log in, but a
    reviewer made so is in no TUF delegation (docs/tuf.md#keys)."""
    if not NAME_RE.fullmatch(name):
        raise BadRequest(f"invalid principal name {name!r} (letters, digits, . _ @ -)")
    if role not in ROLES:
        raise BadRequest(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    if find_principal(session, name) is not None:
        raise Conflict(f"principal {name!r} already exists")
    principal = Principal(name=name, role=role, created_at=datetime.now(UTC))
    session.add(principal)
    session.flush()
    if seals is not None:
        principal.seal = seals.principal(principal)
    append(session, actor=actor, action="principal.create", subject=name, details={"role": role})
    return principal


def list_principals(session: Session) -> list[Principal]:
    return list(session.execute(select(Principal).order_by(Principal.name)).scalars())


def principal_json(p: Principal) -> dict[str, Any]:
    """``{name, role, created_at, disabled, disabled_at}``."""
    return {
        "name": p.name,
        "role": p.role,
        "created_at": iso(p.created_at),
        "disabled": p.disabled_at is not None,
        "disabled_at": iso(p.disabled_at) if p.disabled_at is not None else None,
    }


def _other_enabled_admins(session: Session, principal: Principal) -> int:
    return len(
        session.execute(
            select(Principal.id).where(
                Principal.role == ADMIN,
                Principal.disabled_at.is_(None),
                Principal.id != principal.id,
            )
        ).all()
    )


def _require_an_admin_remains(session: Session, principal: Principal, change: str) -> None:
    """Raise Conflict when ``change`` would leave the registry with no enabled admin."""
    alone = principal.role == ADMIN and principal.disabled_at is None
    if alone and _other_enabled_admins(session, principal) == 0:
        raise Conflict(
            f"{change} would leave the registry with no enabled admin: {principal.name} is "
            "the last one; create or enable another admin first",
            detail={"principal": principal.name},
        )


def set_role(
    session: Session, *, name: str, role: str, actor: str, seals: RowSeals | None = None
) -> Principal:
    """Change ``name``'s role to ``role`` (one of ``authz.ROLES``), resealed with ``seals``
    (``None``: left unsealed, as ``create_principal``); audited ``principal.role``.

    Raises BadRequest (unknown role), NotFound (no such principal), Conflict (the last
    enabled admin would lose its role)."""
    if role not in ROLES:
        raise BadRequest(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    principal = principal_named(session, name)
    before = principal.role
    if role not in (before, ADMIN):
        _require_an_admin_remains(session, principal, f"making {name} a {role}")
    principal.role = role
    principal.seal = seals.principal(principal) if seals is not None else None
    session.flush()
    append(
        session,
        actor=actor,
        action="principal.role",
        subject=name,
        details={"from": before, "to": role},
    )
    return principal


def set_disabled(
    session: Session, *, name: str, disabled: bool, actor: str, seals: RowSeals | None = None
) -> Principal:
    """Disable ``name`` (every token, ``/v2`` bearer and console session it holds is
    refused on its next request, its tokens kept for when it is enabled again; its keys
    count in no delegation) or enable it; audited ``principal.disable`` /
    ``principal.enable`` (also when nothing changed, with ``changed`` false). Resealed with
    ``seals`` (signing.tuf.seals: the seal covers the disable) when the registry sealed
    the row before; a row it did not seal stays unsealed.

    Raises NotFound (no such principal), Conflict (the last enabled admin)."""
    principal = principal_named(session, name)
    changed = (principal.disabled_at is None) == disabled
    sealed = seals is not None and seals.principal_sealed_either_way(principal)
    if disabled and changed:
        _require_an_admin_remains(session, principal, f"disabling {name}")
        principal.disabled_at = datetime.now(UTC)
    elif not disabled:
        principal.disabled_at = None
    if seals is not None and sealed:
        principal.seal = seals.principal(principal)
    session.flush()
    append(
        session,
        actor=actor,
        action="principal.disable" if disabled else "principal.enable",
        subject=name,
        details={"changed": changed},
    )
    return principal


def create_token(
    session: Session, *, name: str, expires_in: int | None, actor: str
) -> tuple[str, str]:
    token_id, token = issue_token(session, name, expires_in)
    append(
        session,
        actor=actor,
        action="token.create",
        subject=name,
        details={"token_id": token_id, "expires_in_seconds": expires_in},
    )
    return token_id, token


def token_json(row: Token, principal: str) -> dict[str, Any]:
    """A token as admins see it: never its secret nor the secret's hash. When it was last
    used is not recorded (authentication writes nothing)."""
    return {
        "id": row.id,
        "principal": principal,
        "created_at": iso(row.created_at),
        "expires_at": iso(row.expires_at) if row.expires_at is not None else None,
        "revoked_at": iso(row.revoked_at) if row.revoked_at is not None else None,
    }


def list_tokens(session: Session, *, principal: str | None = None) -> list[dict[str, Any]]:
    """Every token (of ``principal`` when given), oldest first (``token_json``). Raises
    NotFound for a principal that does not exist."""
    query = select(Token, Principal.name).join(Principal, Principal.id == Token.principal_id)
    if principal is not None:
        query = query.where(Principal.id == principal_named(session, principal).id)
    rows = session.execute(query.order_by(Token.created_at, Token.id)).tuples()
    return [token_json(row, name) for row, name in rows]


def revoke_token(session: Session, *, token_id: str, actor: str) -> None:
    row = session.get(Token, token_id)
    if row is None:
        raise NotFound(f"no token with id {token_id!r}")
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
    append(session, actor=actor, action="token.revoke", subject=token_id, details={})


def bootstrap_admin(
    session: Session, token: str | None, seals: RowSeals | None = None
) -> tuple[str, bool] | None:
    """On an empty registry, create principal ``admin`` with a token.

    ``token`` (from MODELWARD_BOOTSTRAP_TOKEN) is used when given; otherwise one is generated.
    Returns ``(token, generated)`` when it created the admin, None when principals exist.
    """
    from modelward.registry.domains.auth.service import new_token, store_token

    if session.execute(select(Principal.id).limit(1)).first() is not None:
        return None
    # an admin is in no delegation; unsealed (``seals`` None) it is sealed with the rows
    # that exist when the row key is made (registry.domains.signing.tuf.seals)
    admin = create_principal(session, name="admin", role="admin", actor="bootstrap", seals=seals)
    token_id, generated = new_token()
    store_token(session, admin, token or generated, token_id, None)
    append(
        session,
        actor="bootstrap",
        action="token.create",
        subject="admin",
        details={"token_id": token_id, "source": "environment" if token else "generated"},
    )
    return (token or generated, token is None)
