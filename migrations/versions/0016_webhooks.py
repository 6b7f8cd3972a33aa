"""Webhooks: endpoints, the outbox of messages, deliveries and the delivery log.

Revision ID: 0016_webhooks
Revises: 0015_rollout_reports
Create Date: 2026-12-05

Rollout events are written to ``webhook_messages`` in the transaction of the decision they
report, fanned out to ``webhook_deliveries`` (one per subscribed endpoint), and each attempt
is a ``webhook_attempts`` row (docs/webhooks.md). Endpoint secrets are stored sealed
(AES-GCM under the registry's webhook key file), never in the clear.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_webhooks"
down_revision = "0015_rollout_reports"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("secret_sealed", sa.LargeBinary, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("secret_rotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "webhook_messages",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("event_type", sa.String(100), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "message_id", sa.String(40), sa.ForeignKey("webhook_messages.id"), nullable=False
        ),
        sa.Column("endpoint_id", sa.Integer, sa.ForeignKey("webhook_endpoints.id"), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claim", sa.String(32), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_webhook_deliveries_message_id", "webhook_deliveries", ["message_id"])
    op.create_index("ix_webhook_deliveries_endpoint_id", "webhook_deliveries", ["endpoint_id"])
    op.create_index(
        "ix_webhook_deliveries_next_attempt_at", "webhook_deliveries", ["next_attempt_at"]
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "delivery_id", sa.Integer, sa.ForeignKey("webhook_deliveries.id"), nullable=False
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_ms", sa.Integer, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_index("ix_webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_attempts_delivery_id", table_name="webhook_attempts")
    op.drop_table("webhook_attempts")
    op.drop_index("ix_webhook_deliveries_next_attempt_at", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_endpoint_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_message_id", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_messages")
    op.drop_table("webhook_endpoints")
