"""migrations/: up and down on SQLite (and PostgreSQL when its binaries exist)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import inspect

from modelward.registry.db import (
    current_revision,
    downgrade,
    ensure_schema,
    head_revision,
    make_engine,
    schema_state,
    upgrade,
)
from modelward.registry.domains.signing.tuf import tables  # noqa: F401 - the TUF tables on Base
from modelward.registry.errors import DatabaseOutOfDate
from modelward.registry.models import Base

MODELWARD = str(Path(sys.executable).parent / "modelward")


def _round_trip(url: str) -> None:
    engine = make_engine(url)
    try:
        assert schema_state(engine) == "empty"
        upgrade(url)
        assert schema_state(engine) == "current"
        assert current_revision(engine) == head_revision()
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        # the migrated schema has every column the ORM maps
        for name, table in Base.metadata.tables.items():
            have = {c["name"] for c in inspect(engine).get_columns(name)}
            assert {c.name for c in table.columns} == have, name
        downgrade(url, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        assert schema_state(engine) == "empty"
        assert ensure_schema(engine, url) is True
        assert schema_state(engine) == "current"
        assert ensure_schema(engine, url) is False
    finally:
        engine.dispose()


def test_sqlite_up_down_up(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'r.db'}")


@pytest.mark.postgres
def test_postgres_up_down_up(pg_cluster) -> None:  # type: ignore[no-untyped-def]
    _round_trip(pg_cluster.create_database())


def test_outdated_schema_is_refused_by_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0000'")
    with pytest.raises(DatabaseOutOfDate, match="modelward db upgrade"):
        ensure_schema(engine, url)
    engine.dispose()


def test_db_cli_upgrade_current_downgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MODELWARD, "db", *args, "--database-url", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert run("upgrade").returncode == 0
    current = run("current")
    assert f"current: {head_revision()}" in current.stdout
    assert run("downgrade", "base").returncode == 0
    assert "current: (empty)" in run("current").stdout


def test_0002_backfills_the_blobs_each_bundle_holds(tmp_path: Path) -> None:
    import json

    from sqlalchemy import text

    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url, "0001")
    manifest = json.dumps(
        {
            "config": {"digest": "sha256:" + "c" * 64},
            "layers": [
                {"digest": "sha256:" + "a" * 64},
                {"digest": "sha256:" + "b" * 64},
                {"digest": "sha256:" + "a" * 64},
            ],
        }
    ).encode()
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO principals (id, name, role, created_at) "
                    "VALUES (1, 'p', 'publisher', '2026-01-01')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO repositories (id, name, policy_yaml, created_by, "
                    "created_at) VALUES (1, 'o/m', NULL, 1, '2026-01-01')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO bundles (id, repo_id, digest, manifest, decision, findings, "
                    "created_by, created_at, quarantined, tombstoned) VALUES (7, 1, :d, :m, '{}', "
                    "'[]', 1, '2026-01-01', 0, 0)"
                ),
                {"d": "sha256:" + "d" * 64, "m": manifest},
            )
        upgrade(url)
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT bundle_id, digest FROM bundle_blobs ORDER BY digest")
            ).all()
        assert [tuple(r) for r in rows] == [(7, "sha256:" + h * 64) for h in "abc"]
        downgrade(url, "0001")
        assert "bundle_blobs" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def _quarantine_moves_to_the_digest(url: str) -> None:
    """A digest quarantined in one repository (0003: a flag on one bundle row) is quarantined
    in every repository after 0004, with who and when from the audit log; bundles referenced
    by other tables survive the column drop; downgrade puts the flag on every row again."""
    from sqlalchemy import text

    upgrade(url, "0003")
    digest, other = "sha256:" + "d" * 64, "sha256:" + "e" * 64
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO principals (id, name, role, created_at) VALUES "
                    "(1, 'p', 'publisher', '2026-01-01'), "
                    "(2, 'rev', 'reviewer', '2026-01-01')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO repositories (id, name, policy_yaml, created_by, "
                    "created_at) VALUES (1, 'o/x', NULL, 1, '2026-01-01'), "
                    "(2, 'o/y', NULL, 1, '2026-01-01')"
                )
            )
            for bundle_id, repo_id, d, flag in (
                (7, 1, digest, 1),
                (8, 2, digest, 0),
                (9, 2, other, 0),
            ):
                conn.execute(
                    text(
                        "INSERT INTO bundles (id, repo_id, digest, manifest, decision, findings, "
                        "created_by, created_at, quarantined, quarantine_reason, tombstoned) "
                        "VALUES (:i, :r, :d, :m, '{}', '[]', 1, '2026-01-01', :q, :why, :t)"
                    ),
                    {
                        "i": bundle_id,
                        "r": repo_id,
                        "d": d,
                        "m": b"{}",
                        "q": bool(flag),
                        "why": "CVE-1" if flag else None,
                        "t": False,
                    },
                )
                conn.execute(
                    text("INSERT INTO bundle_blobs (bundle_id, digest) VALUES (:i, :d)"),
                    {"i": bundle_id, "d": "sha256:" + "a" * 64},
                )
            conn.execute(
                text(
                    "INSERT INTO approvals (id, bundle_id, alias, principal_id, created_at) "
                    "VALUES (1, 8, 'prod', 2, '2026-01-01')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO audit_events (seq, at, actor, action, subject, details, prev_hash, "  # noqa: E501
                    "hash) VALUES (1, '2026-02-03T04:05:06Z', 'rev', 'bundle.quarantine', :s, "
                    "'{}', 'x', 'y')"
                ),
                {"s": f"o/x@{digest}"},
            )
        upgrade(url, "0004")
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT digest, reason, repo_id, quarantined_by, "
                    "quarantined_at FROM quarantined_digests"
                )
            ).all()
            assert [tuple(r)[:4] for r in rows] == [(digest, "CVE-1", 1, 2)]
            assert str(rows[0][4]).startswith("2026-02-03")
            assert conn.execute(text("SELECT count(*) FROM bundle_blobs")).scalar() == 3
            assert conn.execute(text("SELECT withdrawn_at FROM approvals")).all() == [(None,)]
        have = {c["name"] for c in inspect(engine).get_columns("bundles")}
        assert not {"quarantined", "quarantine_reason"} & have
        downgrade(url, "0003")
        with engine.connect() as conn:
            flags = conn.execute(
                text("SELECT id, quarantined, quarantine_reason FROM bundles ORDER BY id")
            ).all()
        assert [(i, bool(q), why) for i, q, why in flags] == [
            (7, True, "CVE-1"),
            (8, True, "CVE-1"),
            (9, False, None),
        ]
    finally:
        engine.dispose()


def test_0004_moves_quarantine_to_the_digest_in_every_repository(tmp_path: Path) -> None:
    _quarantine_moves_to_the_digest(f"sqlite:///{tmp_path / 'r.db'}")


@pytest.mark.postgres
def test_0004_moves_quarantine_to_the_digest_on_postgres(pg_cluster) -> None:  # type: ignore[no-untyped-def]
    _quarantine_moves_to_the_digest(pg_cluster.create_database())
