"""Fleet reports and the observable rollback: ``rollout_reports`` (one signed report per
worker and interval), the rollback times and figures of ``rollouts``, the analysis of
``rollout_steps``.

Revision ID: 0015_rollout_reports
Revises: 0014_rollouts
Create Date: 2026-12-05

docs/rollouts.md#fleet-reports: each row keeps the envelope as received and the verified
predicate; ``received_at`` (the registry's clock) is what windows are judged by.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_rollout_reports"
down_revision = "0014_rollouts"
branch_labels = None
depends_on = None

DIGEST = 71
_ROLLOUT_TIMES = ("detected_at", "decided_at", "converged_at", "recovered_at")


def upgrade() -> None:
    op.create_table(
        "rollout_reports",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), nullable=False),
        sa.Column("alias", sa.String(100), nullable=False),
        sa.Column("rollout_pk", sa.Integer, sa.ForeignKey("rollouts.id"), nullable=True),
        sa.Column("worker_keyid", sa.String(64), nullable=False),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("digest", sa.String(DIGEST), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("interval_seconds", sa.Float, nullable=False),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("errors", sa.BigInteger, nullable=False),
        sa.Column("retries", sa.BigInteger, nullable=False),
        sa.Column("predicate", sa.Text, nullable=False),
        sa.Column("envelope", sa.LargeBinary, nullable=False),
        sa.Column("assigned", sa.String(DIGEST), nullable=False),
        sa.UniqueConstraint("worker_keyid", "seq", name="uq_rollout_reports_worker_seq"),
    )
    op.create_index(
        "ix_rollout_reports_window", "rollout_reports", ["repo_id", "alias", "received_at"]
    )
    with op.batch_alter_table("rollouts") as batch:
        for name in _ROLLOUT_TIMES:
            batch.add_column(sa.Column(name, sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("figures", sa.Text, nullable=True))
    with op.batch_alter_table("rollout_steps") as batch:
        batch.add_column(sa.Column("analysis", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollout_steps") as batch:
        batch.drop_column("analysis")
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("figures")
        for name in reversed(_ROLLOUT_TIMES):
            batch.drop_column(name)
    op.drop_index("ix_rollout_reports_window", table_name="rollout_reports")
    op.drop_table("rollout_reports")
