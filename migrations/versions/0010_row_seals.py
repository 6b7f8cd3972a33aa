"""Row seals: the registry's HMAC over every row it signs TUF delegations from (docs/tuf.md#keys).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

- ``principals.seal``, ``signing_keys.seal``, ``repo_publishers.seal``,
  ``repositories.seal`` (over the name and the stored policy): hex HMAC-SHA256 made
  by the registry, with a key kept in its TUF keys directory (``rows.key``, never in the
  database), when the row is written through the registry. The delegations are made only
  from rows whose seal verifies, so a database writer's inserted or edited row signs
  nothing. Rows that exist when the registry first creates ``rows.key`` are sealed then
  (``registry.domains.signing.tuf.seals``): NULL here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLES = ("principals", "signing_keys", "repo_publishers", "repositories")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("seal", sa.String(64), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("seal")
