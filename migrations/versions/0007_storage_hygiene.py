"""Storage hygiene: per-repository quotas, upload sessions charged to a repository, and blob
leases that keep a just-uploaded blob from garbage collection until its push commits.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

- ``repositories.quota_bytes`` (null: no quota).
- ``upload_sessions.repo_id`` (null: a session started without naming a repository).
- ``blob_leases`` (digest, repo_id or null, size, created_at): written when an upload starts
  and when a blob is stored; GC leaves a leased blob alone while its lease is younger than
  the GC window, and a repository's quota counts its young leases
  (docs/registry.md#storage-hygiene).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
DIGEST = 71


def upgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("quota_bytes", sa.BigInteger, nullable=True))
    with op.batch_alter_table("upload_sessions") as batch:
        batch.add_column(sa.Column("repo_id", sa.Integer, nullable=True))
        batch.create_foreign_key(
            "fk_upload_sessions_repo_id_repositories", "repositories", ["repo_id"], ["id"])
        batch.create_index("ix_upload_sessions_repo_id", ["repo_id"])
    op.create_table(
        "blob_leases",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("digest", sa.String(DIGEST), nullable=False, index=True),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), nullable=True,
                  index=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created_at", TS, nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("blob_leases")
    with op.batch_alter_table("upload_sessions") as batch:
        batch.drop_index("ix_upload_sessions_repo_id")
        batch.drop_constraint("fk_upload_sessions_repo_id_repositories", type_="foreignkey")
        batch.drop_column("repo_id")
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("quota_bytes")
