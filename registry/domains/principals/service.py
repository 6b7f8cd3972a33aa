"""Principals and their tokens (admin only; also used by the ``modelward admin`` commands)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import ROLES
from modelward.registry.domains.auth.service import issue_token
from modelward.registry.errors import BadRequest, Conflict, NotFound
from modelward.registry.models import Principal, Token
from modelward.registry.tuf.seals import RowSeals

__all__ = ["bootstrap_admin", "create_principal", "create_token", "list_principals", "revoke_token"]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,199}$")


def create_principal(
    session: Session, *, name: str, role: str, actor: str, seals: RowSeals | None = None
) -> Principal:
    """A new principal, sealed with ``seals`` (registry.tuf.seals). ``None``: unsealed, as
    straight on the database without the registry's keys directory: it can log in, but a
    reviewer made so is in no TUF delegation (docs/tuf.md#keys)."""
    if not NAME_RE.fullmatch(name):
        raise BadRequest(f"invalid principal name {name!r} (letters, digits, . _ @ -)")
    if role not in ROLES:
        raise BadRequest(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    if session.execute(select(Principal.id).where(Principal.name == name)).first():
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
    # that exist when the row key is made (registry.tuf.seals)
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
