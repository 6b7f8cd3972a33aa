"""The console's login sessions: a token exchanged once for a server-side session.

A session id is 256 random bits, sent to the browser only as the ``mw_session`` cookie;
only its sha256 is stored (``ui_sessions``, migration 0011), so a copy of the database
opens no session. Each session keeps the API token it was exchanged for: revoking that
token, or its expiry, ends the session too, since the caller is authenticated through the
token's row on every request (``auth.service``'s one authentication, never a copy of
it), and so does disabling its principal. A session
ends at ``ui_session_seconds`` after log in (never later than its token), or at log out.

Every form carries the session's CSRF token (a synchronizer token: random, per session,
compared in constant time), refused with 403 ``csrf_refused`` otherwise.

Raises ``NotAuthenticated`` (an unknown, ended or expired session; a bad token at log in)
and ``Forbidden`` (a CSRF token that is not the session's).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ForeignKey, String, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from modelward.registry.domains.auth.service import Caller, authenticate_until, hash_token
from modelward.registry.errors import Forbidden, NotAuthenticated
from modelward.registry.kit.utc import UtcDateTime
from modelward.registry.models import Base, Token

__all__ = [
    "COOKIE",
    "LoggedIn",
    "UiSession",
    "end_session",
    "open_session",
    "require_csrf",
    "session_caller",
]

COOKIE = "mw_session"


class UiSession(Base):
    __tablename__ = "ui_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    token_id: Mapped[str] = mapped_column(ForeignKey("tokens.id"))
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


@dataclass(frozen=True)
class LoggedIn:
    """The principal behind a console request, and its session's CSRF token."""

    caller: Caller
    csrf: str
    expires_at: datetime


def open_session(session: Session, token: str, lifetime: int) -> tuple[str, LoggedIn]:
    """Exchange an API token for a new session: ``(session id, LoggedIn)``.

    Raises NotAuthenticated for an unknown, revoked or expired token."""
    caller, token_expires = authenticate_until(session, token)
    token_id = session.execute(
        select(Token.id).where(Token.secret_hash == hash_token(token))
    ).scalar_one()
    now = datetime.now(UTC)
    expires = now + timedelta(seconds=lifetime)
    if token_expires is not None:
        expires = min(expires, token_expires)
    sid = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    session.add(
        UiSession(
            id_hash=hash_token(sid),
            principal_id=caller.id,
            token_id=token_id,
            csrf=csrf,
            created_at=now,
            expires_at=expires,
        )
    )
    session.flush()
    return sid, LoggedIn(caller, csrf, expires)


def session_caller(session: Session, sid: str) -> LoggedIn:
    """The principal of a live session; raises NotAuthenticated.

    (1) the session row by the id's hash; (2) not ended, not expired; (3) the token it was
    exchanged for, and its principal, pass the registry's one authentication
    (``auth.service.authenticate_until``: not revoked, not expired, not disabled)."""
    # (1): the row, by the hash of the id
    ui = session.execute(
        select(UiSession).where(UiSession.id_hash == hash_token(sid))
    ).scalar_one_or_none()
    if ui is None:
        raise NotAuthenticated("unknown console session: log in again")
    now = datetime.now(UTC)
    # (2): the session itself
    if ui.ended_at is not None:
        raise NotAuthenticated("this console session was logged out")
    if ui.expires_at <= now:
        raise NotAuthenticated("this console session has expired: log in again")
    # (3): the token it was exchanged for, by the same rules as every other request
    caller, _ = authenticate_until(session, token_id=ui.token_id, via="this console session's ")
    if caller.id != ui.principal_id:  # pragma: no cover - open_session stores the owner
        raise NotAuthenticated("this console session's token belongs to someone else")
    return LoggedIn(caller, ui.csrf, ui.expires_at)


def end_session(session: Session, sid: str) -> bool:
    """Log out: the session is ended server-side (the row is kept, ``ended_at`` set).
    Returns whether a live session was ended."""
    result = session.execute(
        update(UiSession)
        .where(UiSession.id_hash == hash_token(sid), UiSession.ended_at.is_(None))
        .values(ended_at=datetime.now(UTC))
    )
    return bool(getattr(result, "rowcount", 0))


def require_csrf(given: str | None, logged_in: LoggedIn) -> None:
    """The form's CSRF token is the session's; raises Forbidden (``csrf_refused``, audited
    as ``denied`` by the app's one error handler)."""
    if not given or not hmac.compare_digest(given.encode(), logged_in.csrf.encode()):
        raise Forbidden(
            "the form's CSRF token is missing or not this session's: reload the page and "
            "submit again",
            code="csrf_refused",
        )
