"""TUF metadata and proposals (docs/tuf.md).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03

- ``tuf_metadata`` (role, version, data, created_at): the signed metadata files of the
  registry's TUF repository. ``timestamp`` keeps every version too; the latest is served as
  ``timestamp.json``. Rows are never updated: a new version is a new row.
- ``tuf_proposals``: the next version of a delegated role waiting for its signers: the
  unsigned payload, the signatures collected so far, what it changes, its state.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tuf_metadata",
        sa.Column("role", sa.String(300), primary_key=True),
        sa.Column("version", sa.BigInteger, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


    op.create_table(
        "tuf_proposals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("role", sa.String(300), nullable=False, index=True),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("signatures", sa.Text, nullable=False),
        sa.Column("target", sa.String(600), nullable=False),
        sa.Column("from_digest", sa.String(71), nullable=True),
        sa.Column("to_digest", sa.String(71), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("tuf_proposals")
    op.drop_table("tuf_metadata")
