"""The audit log becomes a Merkle tree (RFC 6962) with signed checkpoints.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-16

Two new tables: ``audit_tree_nodes`` (the hash of every complete perfect subtree, level 0 the
leaf hashes; registry.audit_tree) and ``audit_checkpoints`` (every checkpoint the registry
signed). The tree is backfilled from ``audit_events``: leaf ``seq - 1`` is
``SHA-256(0x00 || RFC 8785 JSON of {seq, at, actor, action, subject, details, prev_hash})``,
the bytes the chain hash is over. The backfill hashes the rows as they are: run
``modelward audit verify --database-url ...`` first if the chain's integrity is in question;
a gap in ``seq`` stops the upgrade. No checkpoint is signed here (the key is not the
database's); the registry signs the first one when asked.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BATCH = 5000


def upgrade() -> None:
    nodes = op.create_table(
        "audit_tree_nodes",
        sa.Column("level", sa.SmallInteger, primary_key=True, autoincrement=False),
        sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
    )
    op.create_table(
        "audit_checkpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("tree_size", sa.BigInteger, nullable=False),
        sa.Column("root_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_audit_checkpoints_tree_size", "audit_checkpoints", ["tree_size"])
    _backfill(nodes)


def _backfill(nodes: sa.Table) -> None:
    events = sa.table(
        "audit_events",
        *(sa.column(n) for n in ("seq", "at", "actor", "action", "subject", "details")),
        sa.column("prev_hash"),
    )
    connection = op.get_bind()
    level: list[bytes] = []
    for row in connection.execute(sa.select(events).order_by(events.c.seq)):
        if row.seq != len(level) + 1:
            raise RuntimeError(
                f"audit_events is not gapless: seq {row.seq} follows {len(level)}; run "
                "`modelward audit verify --database-url ...` and repair the log first"
            )
        body: dict[str, Any] = {
            "seq": row.seq,
            "at": row.at,
            "actor": row.actor,
            "action": row.action,
            "subject": row.subject,
            "details": json.loads(row.details),
            "prev_hash": row.prev_hash,
        }
        level.append(hashlib.sha256(b"\x00" + rfc8785.dumps(body)).digest())
    rows: list[dict[str, Any]] = []
    height = 0
    while level:
        rows += [{"level": height, "idx": i, "hash": h} for i, h in enumerate(level)]
        level = [
            hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest()
            for i in range(0, len(level) - 1, 2)
        ]
        height += 1
    for start in range(0, len(rows), BATCH):
        op.bulk_insert(nodes, rows[start : start + BATCH])


def downgrade() -> None:
    op.drop_index("ix_audit_checkpoints_tree_size", table_name="audit_checkpoints")
    op.drop_table("audit_checkpoints")
    op.drop_table("audit_tree_nodes")
