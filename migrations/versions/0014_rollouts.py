"""Rollouts: ``rollouts`` (one signed plan each) and ``rollout_steps`` (their history).

Revision ID: 0014_rollouts
Revises: 0013_private_repositories
Create Date: 2026-12-05

The signed state is the TUF metadata (docs/rollouts.md#signed-state); these rows are the
registry's record of it, for ``rollout status`` and the release record.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_rollouts"
down_revision = "0013_private_repositories"
branch_labels = None
depends_on = None

DIGEST = 71


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("rollout_id", sa.String(32), nullable=False, unique=True),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), nullable=False),
        sa.Column("alias", sa.String(100), nullable=False),
        sa.Column("stable", sa.String(DIGEST), nullable=False),
        sa.Column("candidate", sa.String(DIGEST), nullable=False),
        sa.Column("plan_json", sa.LargeBinary, nullable=False),
        sa.Column("plan_sha256", sa.String(64), nullable=False),
        sa.Column("analysis_text", sa.Text, nullable=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("proposal_id", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_rollouts_repo_id", "rollouts", ["repo_id"])
    op.create_table(
        "rollout_steps",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("rollout_pk", sa.Integer, sa.ForeignKey("rollouts.id"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("weight", sa.Integer, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("tuf_version", sa.BigInteger, nullable=True),
        sa.Column("verdict", sa.String(20), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("rollout_pk", "seq", name="uq_rollout_steps_seq"),
    )
    op.create_index("ix_rollout_steps_rollout_pk", "rollout_steps", ["rollout_pk"])


def downgrade() -> None:
    op.drop_index("ix_rollout_steps_rollout_pk", table_name="rollout_steps")
    op.drop_table("rollout_steps")
    op.drop_index("ix_rollouts_repo_id", table_name="rollouts")
    op.drop_table("rollouts")
