"""Which blobs each bundle holds, so a blob GET can honour quarantine and tombstones.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

Backfilled from the stored manifests (already validated at push): the config blob and every
layer of each bundle.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

DIGEST = sa.String(71)


def upgrade() -> None:
    table = op.create_table(
        "bundle_blobs",
        sa.Column("bundle_id", sa.Integer, sa.ForeignKey("bundles.id"), primary_key=True),
        sa.Column("digest", DIGEST, primary_key=True),
    )
    op.create_index("ix_bundle_blobs_digest", "bundle_blobs", ["digest"])
    bundles = sa.table("bundles", sa.column("id", sa.Integer),
                       sa.column("manifest", sa.LargeBinary))
    connection = op.get_bind()
    rows = []
    for bundle_id, manifest in connection.execute(sa.select(bundles.c.id, bundles.c.manifest)):
        document = json.loads(bytes(manifest))
        digests = {document["config"]["digest"]}
        digests.update(layer["digest"] for layer in document["layers"])
        rows += [{"bundle_id": bundle_id, "digest": d} for d in sorted(digests)]
    if rows:
        op.bulk_insert(table, rows)


def downgrade() -> None:
    op.drop_index("ix_bundle_blobs_digest", table_name="bundle_blobs")
    op.drop_table("bundle_blobs")
