"""The reviewer console's login sessions (docs/console.md#sessions).

Revision ID: 0011_ui_sessions
Revises: 0010
Create Date: 2026-12-05

- ``ui_sessions``: one row per console login. Only sha256 of the random session id (the
  cookie) is stored, with the principal, the API token it was exchanged for (revoking that
  token ends the session), the CSRF token of its forms, when it expires and when it was
  ended by a log out.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_ui_sessions"
down_revision = "0010"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("token_id", sa.String(32), sa.ForeignKey("tokens.id"), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False, index=True),
        sa.Column("ended_at", TS, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("ui_sessions")
