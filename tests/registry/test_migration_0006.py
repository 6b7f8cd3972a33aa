"""Migration 0006 (orgs): existing repositories get orgs owned by nobody, with no floor, and
keep working; down and up again. SQLite, and PostgreSQL when its binaries exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from modelward.registry.db import Database, downgrade, make_engine, upgrade
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos.service import create_repo, get_repo, repo_policy
from modelward.registry.errors import Forbidden

REPOS = ("acme/a", "acme/b", "other/x")


def _backfill(url: str) -> None:
    upgrade(url, "0005")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO principals (id, name, role, created_at) VALUES "
                    "(1, 'pub', 'publisher', '2026-01-01'), "
                    "(2, 'admin', 'admin', '2026-01-01')"
                )
            )
            for name in REPOS:  # ids from the sequence: the migration must not disturb it
                conn.execute(
                    text(
                        "INSERT INTO repositories (name, policy_yaml, created_by, "
                        "created_at) VALUES (:n, NULL, 1, '2026-01-01')"
                    ),
                    {"n": name},
                )
            ids = dict(conn.execute(text("SELECT name, id FROM repositories")).tuples().all())
            for repo_id in ids.values():
                conn.execute(
                    text("INSERT INTO repo_publishers (repo_id, principal_id) VALUES (:i, 1)"),
                    {"i": repo_id},
                )
            conn.execute(
                text(
                    "INSERT INTO aliases (repo_id, name, digest, version, "
                    "updated_at) VALUES (:r, 'prod', :d, 1, '2026-01-01')"
                ),
                {"r": ids["acme/a"], "d": "sha256:" + "a" * 64},
            )
        upgrade(url)
        with engine.connect() as conn:
            orgs = conn.execute(
                text("SELECT name, floor, created_by FROM orgs ORDER BY name")
            ).all()
            assert [tuple(o) for o in orgs] == [("acme", None, None), ("other", None, None)]
            assert conn.execute(text("SELECT count(*) FROM org_owners")).scalar_one() == 0
            pairs = conn.execute(
                text(
                    "SELECT r.name, o.name FROM repositories r JOIN orgs o "
                    "ON o.id = r.org_id ORDER BY r.name"
                )
            ).all()
            assert [tuple(p) for p in pairs] == [(n, n.split("/")[0]) for n in sorted(REPOS)]
            assert (
                conn.execute(
                    text("SELECT r.name FROM aliases a JOIN repositories r ON r.id = a.repo_id")
                ).scalar_one()
                == "acme/a"
            )
        org_id = next(
            c for c in inspect(engine).get_columns("repositories") if c["name"] == "org_id"
        )
        assert org_id["nullable"] is False

        db = Database(engine)
        publisher, admin = Caller(1, "pub", "publisher"), Caller(2, "admin", "admin")
        with db.read() as session:  # an old repository still has its (default) policy
            assert repo_policy(get_repo(session, "acme/a", admin), None).aliases
        with pytest.raises(Forbidden), db.write() as session:  # nobody inherits ownership
            create_repo(
                session, name="acme/c", policy_yaml=None, caller=publisher, default_policy_yaml=None
            )
        with db.write() as session:
            create_repo(
                session, name="acme/c", policy_yaml=None, caller=admin, default_policy_yaml=None
            )

        downgrade(url, "0005")
        assert not {"orgs", "org_owners"} & set(inspect(engine).get_table_names())
        with engine.connect() as conn:
            names = conn.execute(text("SELECT name FROM repositories ORDER BY id")).scalars()
            assert list(names) == [*REPOS, "acme/c"]
        upgrade(url)
    finally:
        engine.dispose()


def test_0006_gives_existing_repositories_orgs_owned_by_nobody_sqlite(tmp_path: Path) -> None:
    _backfill(f"sqlite:///{tmp_path / 'r.db'}")


@pytest.mark.postgres
def test_0006_gives_existing_repositories_orgs_owned_by_nobody_postgres(
    pg_cluster,  # type: ignore[no-untyped-def]
) -> None:
    _backfill(pg_cluster.create_database())
