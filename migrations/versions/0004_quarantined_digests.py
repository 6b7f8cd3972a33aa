"""Quarantine belongs to the digest; approvals can be withdrawn.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-16

- Table ``quarantined_digests`` (digest, reason, repo_id, quarantined_by, quarantined_at): a
  quarantine holds in every repository. Backfilled from the per-bundle flags it replaces: a
  digest quarantined in any repository is quarantined in all of them from now on (the
  promise quarantine always made). When one digest was quarantined in several repositories,
  the earliest bundle's reason and repository are kept; who and when come from that
  repository's last ``bundle.quarantine`` audit event (null when the log names nobody).
- ``bundles.quarantined`` and ``bundles.quarantine_reason`` are dropped: the ORM reads them
  from the new table (``models.Bundle``), so there is one record of a quarantine.
- ``approvals.withdrawn_at`` and ``approvals.withdrawal_reason`` (null: not withdrawn).

SQLite: batch mode with ``recreate="never"``: the columns are added and dropped in place
(``ALTER TABLE ... DROP COLUMN``, SQLite 3.35 or later), so ``bundles``, which other tables
reference, is never copied, dropped and renamed (with foreign keys on, SQLite counts the rows
of a dropped parent table as violations that renaming the copy does not clear).
Downgrade puts the flags back on every bundle row of a quarantined digest (so a quarantine
applied after this revision keeps holding everywhere it can).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
DIGEST = sa.String(71)

bundles = sa.table(
    "bundles",
    sa.column("id", sa.Integer),
    sa.column("repo_id", sa.Integer),
    sa.column("digest", sa.String),
    sa.column("quarantined", sa.Boolean),
    sa.column("quarantine_reason", sa.Text),
)
repositories = sa.table("repositories", sa.column("id", sa.Integer), sa.column("name", sa.String))
principals = sa.table("principals", sa.column("id", sa.Integer), sa.column("name", sa.String))
audit_events = sa.table(
    "audit_events",
    sa.column("seq", sa.BigInteger),
    sa.column("at", sa.String),
    sa.column("actor", sa.String),
    sa.column("action", sa.String),
    sa.column("subject", sa.Text),
    sa.column("details", sa.Text),
)


def _require_sqlite_drop_column() -> None:
    if op.get_bind().dialect.name == "sqlite" and sqlite3.sqlite_version_info < (3, 35):
        raise RuntimeError(
            f"migration 0004 needs SQLite 3.35 or later (ALTER TABLE DROP COLUMN); this "
            f"Python has SQLite {sqlite3.sqlite_version}"
        )


def _parse_at(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _quarantines(connection: sa.Connection) -> list[dict[str, object]]:
    """One row per quarantined digest, from the per-bundle flags and the audit log."""
    flagged = connection.execute(
        sa.select(
            bundles.c.digest, bundles.c.repo_id, bundles.c.quarantine_reason, repositories.c.name
        )
        .join(repositories, repositories.c.id == bundles.c.repo_id)
        .where(bundles.c.quarantined.is_(True))
        .order_by(bundles.c.id)
    ).all()
    named = connection.execute(sa.select(principals.c.name, principals.c.id)).all()
    principal_ids = {str(row.name): int(row.id) for row in named}
    rows: dict[str, dict[str, object]] = {}
    for digest, repo_id, reason, repo_name in flagged:
        if digest in rows:
            continue
        event = connection.execute(
            sa.select(audit_events.c.actor, audit_events.c.at)
            .where(
                audit_events.c.action == "bundle.quarantine",
                audit_events.c.subject == f"{repo_name}@{digest}",
            )
            .order_by(audit_events.c.seq.desc())
            .limit(1)
        ).first()
        rows[digest] = {
            "digest": digest,
            "reason": reason or "(no reason recorded)",
            "repo_id": repo_id,
            "quarantined_by": principal_ids.get(event.actor) if event else None,
            "quarantined_at": _parse_at(event.at) if event else None,
        }
    return list(rows.values())


def upgrade() -> None:
    table = op.create_table(
        "quarantined_digests",
        sa.Column("digest", DIGEST, primary_key=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), nullable=True),
        sa.Column("quarantined_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=True),
        sa.Column("quarantined_at", TS, nullable=True),
    )
    rows = _quarantines(op.get_bind())
    if rows:
        op.bulk_insert(table, rows)
    _require_sqlite_drop_column()
    with op.batch_alter_table("bundles", recreate="never") as batch:
        batch.drop_column("quarantine_reason")
        batch.drop_column("quarantined")
    with op.batch_alter_table("approvals", recreate="never") as batch:
        batch.add_column(sa.Column("withdrawn_at", TS, nullable=True))
        batch.add_column(sa.Column("withdrawal_reason", sa.Text, nullable=True))


def downgrade() -> None:
    _require_sqlite_drop_column()
    with op.batch_alter_table("approvals", recreate="never") as batch:
        batch.drop_column("withdrawal_reason")
        batch.drop_column("withdrawn_at")
    with op.batch_alter_table("bundles", recreate="never") as batch:
        batch.add_column(
            sa.Column("quarantined", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("quarantine_reason", sa.Text, nullable=True))
    quarantined = sa.table(
        "quarantined_digests", sa.column("digest", sa.String), sa.column("reason", sa.Text)
    )
    connection = op.get_bind()
    for digest, reason in connection.execute(
        sa.select(quarantined.c.digest, quarantined.c.reason)
    ).all():
        connection.execute(
            sa.update(bundles)
            .where(bundles.c.digest == digest)
            .values(quarantined=True, quarantine_reason=reason)
        )
    op.drop_table("quarantined_digests")
