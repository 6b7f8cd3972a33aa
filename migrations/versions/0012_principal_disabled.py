"""Disabled principals: ``principals.disabled_at`` (``modelward admin principal disable``).

Revision ID: 0012_principal_disabled
Revises: 0011_ui_sessions
Create Date: 2026-12-05

A disabled principal authenticates nobody: every token it holds is refused on the next
request (``auth.service.authenticate``) until an admin enables it again. NULL: enabled, as
every principal was before this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_principal_disabled"
down_revision = "0011_ui_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("principals") as batch:
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("principals") as batch:
        batch.drop_column("disabled_at")
