"""``modelward audit log|verify``: a row edited, deleted or reordered in the DB is reported.

The tampering is done straight in the database (sqlite3 / psycopg) of the shared registry and
undone afterwards, so the chain verifies again for the tests that follow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.audit.chain import BrokenChain, verify_chain
from modelward.client.audit import events_from_api
from tests.registry.conftest import Registry, new_publisher, push_new

COLUMNS = ("seq", "at", "actor", "action", "subject", "details", "prev_hash", "hash")


class Db:
    """Plain SQL on the registry's database, with the driver's own parameter style."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            import sqlite3

            self.conn: Any = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        else:
            import psycopg

            self.conn = psycopg.connect(
                url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
            )

    def run(self, sql: str, *params: Any) -> list[Any]:
        if not self.sqlite:
            sql = sql.replace("?", "%s")
        cur = self.conn.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []

    def row(self, seq: int) -> tuple[Any, ...]:
        return tuple(
            self.run(f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE seq = ?", seq)[0]
        )

    def insert(self, row: tuple[Any, ...]) -> None:
        marks = ", ".join("?" for _ in COLUMNS)
        self.run(f"INSERT INTO audit_events ({', '.join(COLUMNS)}) VALUES ({marks})", *row)


@pytest.fixture
def populated(registry: Registry, tmp_path: Path) -> Iterator[tuple[Registry, Db]]:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    push_new(pub, repo, tmp_path, alias="dev")
    db = Db(registry.database_url)
    try:
        yield registry, db
    finally:
        db.conn.close()


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_audit_log_pages(populated: tuple[Registry, Db]) -> None:
    reg, _ = populated
    out = reg.cli("audit", "log", "--after", "2", "--limit", "3", "--json")
    assert out.returncode == 0, out.stderr
    events = json.loads(out.stdout)["events"]
    assert [e["seq"] for e in events] == [3, 4, 5]
    assert set(COLUMNS) <= set(events[0])
    every = list(reg.admin.iter_audit(page=7))
    assert [e["seq"] for e in every] == list(range(1, len(every) + 1))


def _victim(reg: Registry) -> int:
    events = list(reg.admin.iter_audit())
    assert len(events) >= 6
    return int(events[-3]["seq"])  # a row in the middle of the chain


def _assert_broken(reg: Registry, seq: int, *, cli: bool) -> None:
    if cli:
        bad = reg.cli("audit", "verify", "--database-url", reg.database_url)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert f"seq {seq}" in bad.stderr, bad.stderr
    with pytest.raises(BrokenChain) as info:
        verify_chain(events_from_api(reg.admin))
    assert info.value.seq == seq


def test_row_edited_in_the_database_is_named(populated: tuple[Registry, Db]) -> None:
    reg, db = populated
    seq = _victim(reg)
    original = db.row(seq)
    db.run("UPDATE audit_events SET actor = ? WHERE seq = ?", "mallory", seq)
    try:
        _assert_broken(reg, seq, cli=True)
        via_api = reg.cli("audit", "verify")
        assert via_api.returncode == 1
        assert f"seq {seq}" in via_api.stderr, via_api.stderr
    finally:
        db.run("UPDATE audit_events SET actor = ? WHERE seq = ?", original[2], seq)
    ok = reg.cli("audit", "verify", "--database-url", reg.database_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_row_deleted_in_the_database_is_named(populated: tuple[Registry, Db]) -> None:
    reg, db = populated
    seq = _victim(reg)
    original = db.row(seq)
    db.run("DELETE FROM audit_events WHERE seq = ?", seq)
    try:
        _assert_broken(reg, seq + 1, cli=True)
    finally:
        db.insert(original)
    assert verify_chain(events_from_api(reg.admin)) >= seq


def test_rows_reordered_in_the_database_are_named(populated: tuple[Registry, Db]) -> None:
    reg, db = populated
    seq = _victim(reg)
    db.run("UPDATE audit_events SET seq = -1 WHERE seq = ?", seq)
    db.run("UPDATE audit_events SET seq = ? WHERE seq = ?", seq, seq + 1)
    db.run("UPDATE audit_events SET seq = ? WHERE seq = -1", seq + 1)
    try:
        _assert_broken(reg, seq, cli=False)
    finally:
        db.run("UPDATE audit_events SET seq = -1 WHERE seq = ?", seq)
        db.run("UPDATE audit_events SET seq = ? WHERE seq = ?", seq, seq + 1)
        db.run("UPDATE audit_events SET seq = ? WHERE seq = -1", seq + 1)
    assert verify_chain(events_from_api(reg.admin)) >= seq


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_verify_needs_a_readable_database(tmp_path: Path, registry: Registry) -> None:
    missing = tmp_path / "nope" / "registry.db"
    out = registry.cli("audit", "verify", "--database-url", f"sqlite:///{missing}")
    assert out.returncode == 1
    assert "cannot read the audit log" in out.stderr
