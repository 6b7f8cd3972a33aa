"""API tokens: ``mwt_<id>_<secret>``, secret from secrets.token_urlsafe(32) (256 bits).

Only sha256(token) is stored; ``id`` is the public handle used to list and revoke. A presented
token is looked up by its hash; expired or revoked tokens authenticate nobody.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.domains._principals import principal_named
from modelward.registry.domains.auth.authz import Action, allows
from modelward.registry.errors import BadRequest, NotAuthenticated
from modelward.registry.models import Principal, Token

__all__ = [
    "MAX_TOKEN_LIFETIME",
    "Caller",
    "authenticate",
    "authenticate_until",
    "hash_token",
    "issue_token",
    "new_token",
    "store_token",
]

MIN_TOKEN_CHARS = 32
MAX_TOKEN_LIFETIME = 10 * 366 * 86400  # seconds: ten years


@dataclass(frozen=True)
class Caller:
    """The authenticated principal behind a request."""

    id: int
    name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return allows(self.role, Action.ADMINISTER)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh ``(id, token)``."""
    token_id = secrets.token_hex(8)
    return token_id, f"mwt_{token_id}_{secrets.token_urlsafe(32)}"


def store_token(
    session: Session, principal: Principal, token: str, token_id: str, expires_in: int | None
) -> Token:
    if len(token) < MIN_TOKEN_CHARS:
        raise BadRequest(f"a token must have at least {MIN_TOKEN_CHARS} characters")
    if expires_in is not None and not 0 < expires_in <= MAX_TOKEN_LIFETIME:
        raise BadRequest(f"expires_in_seconds must be between 1 and {MAX_TOKEN_LIFETIME}")
    now = datetime.now(UTC)
    row = Token(
        id=token_id,
        principal_id=principal.id,
        secret_hash=hash_token(token),
        created_at=now,
        expires_at=None if expires_in is None else now + timedelta(seconds=expires_in),
    )
    session.add(row)
    session.flush()
    return row


def issue_token(session: Session, principal_name: str, expires_in: int | None) -> tuple[str, str]:
    """Create a token for the named principal; returns ``(id, token)``. Raises NotFound."""
    principal = principal_named(session, principal_name)
    token_id, token = new_token()
    store_token(session, principal, token, token_id, expires_in)
    return token_id, token


def authenticate(session: Session, token: str) -> Caller:
    """The caller a bearer token stands for; raises NotAuthenticated.

    Looked up on every request (no cache), so a revocation or a disabled principal takes
    effect on the next request;
    only ``/tuf/`` reads remember a success for a few seconds (docs/tuf.md#serving).
    """
    return authenticate_until(session, token)[0]


def authenticate_until(
    session: Session, token: str | None = None, *, token_id: str | None = None, via: str = ""
) -> tuple[Caller, datetime | None]:
    """``authenticate``, and when the token expires (None: never); raises
    NotAuthenticated.

    The one authentication of the registry: ``/v1``, ``/tuf`` (behind its documented
    token cache), ``/v2`` (a bearer from the token endpoint names the API token it was
    issued against: ``token_id``) and the console (a session names the API token it was
    exchanged for: ``token_id``) all end here, so a revoked or expired token and a disabled
    principal stop every one of them at the next request. ``via`` names what was presented
    in the error (``"the console session's "``).

    (1) the token's row, by the hash of the secret (or by ``token_id``); (2) not revoked;
    (3) its principal not disabled; (4) not expired."""
    if (token is None) == (token_id is None):
        raise ValueError("authenticate_until: name a token or a token_id, not both")
    # (1): the row and its principal, read now (no copy of them anywhere)
    query = select(
        Token.id,
        Token.revoked_at,
        Token.expires_at,
        Principal.id,
        Principal.name,
        Principal.role,
        Principal.disabled_at,
    ).join(Principal, Principal.id == Token.principal_id)
    if token is not None:
        query = query.where(Token.secret_hash == hash_token(token))
    else:
        query = query.where(Token.id == token_id)
    row = session.execute(query).first()
    if row is None:
        raise NotAuthenticated("unknown token")
    found_id, revoked_at, expires_at, principal_id, name, role, disabled_at = row.tuple()
    # (2): revoked
    if revoked_at is not None:
        raise NotAuthenticated(f"{via}token {found_id} was revoked")
    # (3): its principal disabled (admin principal disable)
    if disabled_at is not None:
        raise NotAuthenticated(f"{via}token {found_id}: principal {name} is disabled")
    # (4): expired
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise NotAuthenticated(f"{via}token {found_id} has expired")
    return Caller(id=principal_id, name=name, role=role), expires_at
