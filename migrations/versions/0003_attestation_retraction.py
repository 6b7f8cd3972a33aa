"""Attestations can be retracted: the row and its bytes stay, marked who, when and why.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-09

Three nullable columns on ``attestations`` (null: not retracted). Batch mode, so SQLite (which
cannot add a foreign key with ALTER TABLE) copies the table once; PostgreSQL gets plain
``ALTER TABLE ... ADD COLUMN`` statements.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
FK_NAME = "fk_attestations_retracted_by_principals"


def upgrade() -> None:
    with op.batch_alter_table("attestations") as batch:
        batch.add_column(sa.Column("retracted_at", TS, nullable=True))
        batch.add_column(sa.Column("retracted_by", sa.Integer, nullable=True))
        batch.add_column(sa.Column("retraction_reason", sa.Text, nullable=True))
        batch.create_foreign_key(FK_NAME, "principals", ["retracted_by"], ["id"])


def downgrade() -> None:
    with op.batch_alter_table("attestations") as batch:
        batch.drop_constraint(FK_NAME, type_="foreignkey")
        batch.drop_column("retraction_reason")
        batch.drop_column("retracted_by")
        batch.drop_column("retracted_at")
