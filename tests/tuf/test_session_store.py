"""The TUF metadata store in the registry's database: exact bytes, every version, and a
transaction that rolls back leaves no role version behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.registry.db import Database, make_engine, upgrade
from modelward.registry.domains.signing.tuf.store import SessionStore


@pytest.fixture
def db(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(url)
    return Database(make_engine(url))


def test_versions_are_kept_byte_for_byte_and_the_latest_wins(db: Database) -> None:
    with db.write() as session:
        store = SessionStore(session)
        store.write("acme:tiny@prod", 1, b'{"v": 1}')
        store.write("acme:tiny@prod", 2, b'{"v": 2} ')
        store.write("timestamp", 1, b"ts")
    with db.read() as session:
        store = SessionStore(session)
        assert store.read("acme:tiny@prod") == b'{"v": 2} '
        assert store.read("acme:tiny@prod", 1) == b'{"v": 1}'
        assert store.read("acme:tiny@prod", 3) is None
        assert store.read("quarantine") is None
        assert store.latest_versions() == {"acme:tiny@prod": 2, "timestamp": 1}


def test_a_rolled_back_transaction_keeps_no_version(db: Database) -> None:
    def decide_then_fail() -> None:
        with db.write() as session:
            SessionStore(session).write("quarantine", 1, b"q")
            raise RuntimeError("the decision failed after its metadata was written")

    with pytest.raises(RuntimeError):
        decide_then_fail()
    with db.read() as session:
        assert SessionStore(session).latest_versions() == {}


def test_a_role_name_that_cannot_be_a_file_name_is_refused(db: Database) -> None:
    with db.write() as session, pytest.raises(ValueError, match="not a TUF role name"):
        SessionStore(session).write("acme/tiny@prod", 1, b"x")
