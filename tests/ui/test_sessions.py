"""The console's sessions (registry/ui/sessions.py) on a real, migrated SQLite database:
a session stands for its token only while the token and the session both live."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from modelward.registry.db import Database, make_engine, upgrade
from modelward.registry.domains.auth.service import hash_token, issue_token
from modelward.registry.errors import Forbidden, NotAuthenticated
from modelward.registry.models import Principal, Token
from modelward.registry.ui.sessions import (
    UiSession,
    end_session,
    open_session,
    require_csrf,
    session_caller,
)

pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(url)
    engine = make_engine(url)
    database = Database(engine)
    with database.write() as session:
        session.add(Principal(name="carol", role="reviewer"))
    try:
        yield database
    finally:
        engine.dispose()


def _login(db: Database, lifetime: int = 3600) -> tuple[str, str]:
    with db.write() as session:
        token_id, token = issue_token(session, "carol", None)
        sid, who = open_session(session, token, lifetime)
    assert who.caller.name == "carol"
    return sid, token_id


def test_a_session_stands_for_its_principal_and_stores_only_a_hash(db: Database) -> None:
    sid, _ = _login(db)
    with db.read() as session:
        assert session_caller(session, sid).caller.role == "reviewer"
        assert session.get(UiSession, sid) is None  # the id itself is not stored
        assert session.get(UiSession, hash_token(sid)) is not None


def test_an_unknown_token_opens_no_session(db: Database) -> None:
    with db.write() as session, pytest.raises(NotAuthenticated, match="unknown token"):
        open_session(session, "mwt_0000_not-a-token-at-all-not-a-token", 3600)


def test_log_out_ends_the_session_server_side(db: Database) -> None:
    sid, _ = _login(db)
    with db.write() as session:
        assert end_session(session, sid)
    with db.read() as session, pytest.raises(NotAuthenticated, match="logged out"):
        session_caller(session, sid)


def test_an_expired_session_is_refused(db: Database) -> None:
    sid, _ = _login(db)
    with db.write() as session:
        session.execute(
            update(UiSession)
            .where(UiSession.id_hash == hash_token(sid))
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    with db.read() as session, pytest.raises(NotAuthenticated, match="expired"):
        session_caller(session, sid)


def test_revoking_the_token_ends_its_sessions(db: Database) -> None:
    sid, token_id = _login(db)
    with db.write() as session:
        session.execute(
            update(Token).where(Token.id == token_id).values(revoked_at=datetime.now(UTC))
        )
    with db.read() as session, pytest.raises(NotAuthenticated, match="revoked"):
        session_caller(session, sid)


def test_a_session_never_outlives_its_token(db: Database) -> None:
    with db.write() as session:
        _token_id, token = issue_token(session, "carol", 60)
        _, who = open_session(session, token, 3600)
    assert who.expires_at <= datetime.now(UTC) + timedelta(seconds=61)


def test_a_forged_csrf_token_is_refused(db: Database) -> None:
    sid, _ = _login(db)
    with db.read() as session:
        who = session_caller(session, sid)
    require_csrf(who.csrf, who)
    for forged in (None, "", who.csrf + "x", "a" * 43):
        with pytest.raises(Forbidden, match="CSRF"):
            require_csrf(forged, who)
