"""Private repositories: ``repositories.private``, ``orgs.private_by_default``, the
``repo_readers`` granted read on a repository and the ``org_members`` of an org.

Revision ID: 0013_private_repositories
Revises: 0012_principal_disabled
Create Date: 2026-12-05

Every existing repository stays public (``private`` false) and every org keeps making
public repositories (``private_by_default`` false): nobody loses or gains read by upgrading.
Who reads a private repository is ``auth.authz``'s ``READ`` (docs/registry.md#private-
repositories). Privacy decides who is *served* a repository's data, not what the TUF
metadata says, so no row seal (registry.domains.signing.tuf.seals) covers it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_private_repositories"
down_revision = "0012_principal_disabled"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(
            sa.Column("private", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("orgs") as batch:
        batch.add_column(
            sa.Column("private_by_default", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "repo_readers",
        sa.Column("repo_id", sa.Integer(), sa.ForeignKey("repositories.id"), primary_key=True),
        sa.Column("principal_id", sa.Integer(), sa.ForeignKey("principals.id"), primary_key=True),
    )
    op.create_table(
        "org_members",
        sa.Column("org_id", sa.Integer(), sa.ForeignKey("orgs.id"), primary_key=True),
        sa.Column("principal_id", sa.Integer(), sa.ForeignKey("principals.id"), primary_key=True),
    )
    op.create_index("ix_repo_readers_principal_id", "repo_readers", ["principal_id"])
    op.create_index("ix_org_members_principal_id", "org_members", ["principal_id"])


def downgrade() -> None:
    op.drop_index("ix_org_members_principal_id", table_name="org_members")
    op.drop_index("ix_repo_readers_principal_id", table_name="repo_readers")
    op.drop_table("org_members")
    op.drop_table("repo_readers")
    with op.batch_alter_table("orgs") as batch:
        batch.drop_column("private_by_default")
    with op.batch_alter_table("repositories") as batch:
        batch.drop_column("private")
