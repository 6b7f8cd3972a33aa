"""OCI Distribution (``/v2``): manifests that are not (yet) bundles, and bearer tokens.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

- ``oci_manifests``: a manifest pushed through ``/v2`` that is not a bundle row — a ModelPack
  manifest whose only failures are missing attestations (state ``pending``, the failed checks
  in ``reasons``; ``accepted`` once it became a bundle), and an attestation pushed as a
  referrer (``referrer`` with its ``attestation_id``; ``held`` while its subject is pending).
  The exact bytes are kept (``manifest``): the digest names them (docs/oci.md#states).
- ``oci_tokens``: short-lived bearer tokens of the token endpoint (``/v2/token``). Only
  sha256 of the secret is stored, with the API token it was issued against (revoking that
  token ends them), the granted scopes (JSON) and the expiry.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
DIGEST = 71


def upgrade() -> None:
    op.create_table(
        "oci_manifests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), nullable=False),
        sa.Column("digest", sa.String(DIGEST), nullable=False),
        sa.Column("media_type", sa.String(200), nullable=False),
        sa.Column("artifact_type", sa.String(200), nullable=True),
        sa.Column("subject", sa.String(DIGEST), nullable=True, index=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("manifest", sa.LargeBinary, nullable=False),
        sa.Column("reasons", sa.Text, nullable=False),
        sa.Column("attestation_id", sa.Integer, sa.ForeignKey("attestations.id"),
                  nullable=True),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("repo_id", "digest", name="uq_oci_manifests_repo_id_digest"),
    )
    op.create_table(
        "oci_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("api_token_id", sa.String(32), sa.ForeignKey("tokens.id"), nullable=False),
        sa.Column("scopes", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("oci_tokens")
    op.drop_table("oci_manifests")
