"""Orgs own repositories: owners who may create repositories in them, and a policy floor.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-16

Tables ``orgs`` (name, ``floor`` JSON or null, created_by, created_at) and ``org_owners``
(org, principal), and ``repositories.org_id`` (not null, a foreign key to ``orgs``).

Backfill (docs/registry.md#orgs): one org for each distinct ``org`` of the existing
``org/name`` repositories, with **no owners** and **no floor**, created by nobody. Existing
repositories keep working as before (their policies are bounded by no floor); only admins may
create repositories in those orgs until an admin names owners — nobody inherits ownership
from having created a repository there, since that is exactly what anyone could do before.

SQLite: ``repositories`` is rebuilt (batch mode) to make ``org_id`` not null with its foreign
key; other tables reference it, which is why migrations/env.py turns SQLite's foreign key
enforcement off while migrations run and checks every reference before commit.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
FK_NAME = "fk_repositories_org_id_orgs"
INDEX = "ix_repositories_org_id"


def upgrade() -> None:
    orgs = op.create_table(
        "orgs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("floor", sa.Text, nullable=True),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "org_owners",
        sa.Column("org_id", sa.Integer, sa.ForeignKey("orgs.id"), primary_key=True),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), primary_key=True),
    )
    with op.batch_alter_table("repositories") as batch:
        batch.add_column(sa.Column("org_id", sa.Integer, nullable=True))

    # Backfill: one org per distinct prefix, no owners, no floor.
    connection = op.get_bind()
    repositories = sa.table(
        "repositories",
        sa.column("id", sa.Integer),
        sa.column("name", sa.String),
        sa.column("org_id", sa.Integer),
    )
    names = {
        str(name).split("/", 1)[0]
        for (name,) in connection.execute(sa.select(repositories.c.name))
    }
    if names:
        now = datetime.now(UTC)
        op.bulk_insert(orgs, [{"name": n, "floor": None, "created_by": None, "created_at": now}
                              for n in sorted(names)])
    org_ids = dict(connection.execute(sa.select(orgs.c.name, orgs.c.id)).tuples().all())
    for repo_id, name in connection.execute(sa.select(repositories.c.id, repositories.c.name)):
        connection.execute(
            sa.update(repositories)
            .where(repositories.c.id == repo_id)
            .values(org_id=org_ids[str(name).split("/", 1)[0]])
        )

    with op.batch_alter_table("repositories") as batch:
        batch.alter_column("org_id", existing_type=sa.Integer, nullable=False)
        batch.create_foreign_key(FK_NAME, "orgs", ["org_id"], ["id"])
        batch.create_index(INDEX, ["org_id"])


def downgrade() -> None:
    with op.batch_alter_table("repositories") as batch:
        batch.drop_index(INDEX)
        batch.drop_constraint(FK_NAME, type_="foreignkey")
        batch.drop_column("org_id")
    op.drop_table("org_owners")
    op.drop_table("orgs")
