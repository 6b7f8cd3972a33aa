"""Initial registry schema.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
DIGEST = sa.String(71)


def upgrade() -> None:
    op.create_table(
        "principals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.Column("revoked_at", TS, nullable=True),
    )
    op.create_index("ix_tokens_principal_id", "tokens", ["principal_id"])
    op.create_table(
        "signing_keys",
        sa.Column("keyid", sa.String(64), primary_key=True),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("public_key_pem", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
    )
    op.create_index("ix_signing_keys_principal_id", "signing_keys", ["principal_id"])
    op.create_table(
        "identities",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("identity", sa.String(500), nullable=False),
        sa.Column("issuer", sa.String(500), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
    )
    op.create_index("ix_identities_principal_id", "identities", ["principal_id"])
    op.create_table(
        "repositories",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(300), nullable=False, unique=True),
        sa.Column("policy_yaml", sa.Text, nullable=True),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "repo_publishers",
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), primary_key=True),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), primary_key=True),
    )
    op.create_table(
        "blobs",
        sa.Column("digest", DIGEST, primary_key=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "upload_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("digest", DIGEST, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("parts", sa.Text, nullable=False),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )
    op.create_table(
        "bundles",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), nullable=False),
        sa.Column("digest", DIGEST, nullable=False),
        sa.Column("manifest", sa.LargeBinary, nullable=False),
        sa.Column("decision", sa.Text, nullable=False),
        sa.Column("findings", sa.Text, nullable=False),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("quarantined", sa.Boolean, nullable=False),
        sa.Column("quarantine_reason", sa.Text, nullable=True),
        sa.Column("tombstoned", sa.Boolean, nullable=False),
        sa.Column("tombstone_reason", sa.Text, nullable=True),
        sa.UniqueConstraint("repo_id", "digest"),
    )
    op.create_index("ix_bundles_repo_id", "bundles", ["repo_id"])
    op.create_table(
        "attestations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("bundle_id", sa.Integer, sa.ForeignKey("bundles.id"), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("predicate_type", sa.String(500), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("sha256", DIGEST, nullable=False),
        sa.Column("signers", sa.Text, nullable=False),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_attestations_bundle_id", "attestations", ["bundle_id"])
    op.create_table(
        "aliases",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repositories.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("digest", DIGEST, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.UniqueConstraint("repo_id", "name"),
    )
    op.create_table(
        "alias_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("alias_id", sa.Integer, sa.ForeignKey("aliases.id"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("from_digest", DIGEST, nullable=True),
        sa.Column("to_digest", DIGEST, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("rollback", sa.Boolean, nullable=False),
        sa.UniqueConstraint("alias_id", "version"),
    )
    op.create_index("ix_alias_history_alias_id", "alias_history", ["alias_id"])
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("bundle_id", sa.Integer, sa.ForeignKey("bundles.id"), nullable=False),
        sa.Column("alias", sa.String(200), nullable=False),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("bundle_id", "alias", "principal_id"),
    )
    op.create_index("ix_approvals_bundle_id", "approvals", ["bundle_id"])
    op.create_table(
        "boots",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("bundle_id", sa.Integer, sa.ForeignKey("bundles.id"), nullable=False),
        sa.Column("principal_id", sa.Integer, sa.ForeignKey("principals.id"), nullable=False),
        sa.Column("fingerprint_id", sa.String(200), nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("outcome", sa.String(50), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_boots_bundle_id", "boots", ["bundle_id"])
    op.create_table(
        "audit_events",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("at", sa.String(40), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("details", sa.Text, nullable=False),
        sa.Column("prev_hash", DIGEST, nullable=False),
        sa.Column("hash", DIGEST, nullable=False),
    )


def downgrade() -> None:
    for index, table in (
        ("ix_boots_bundle_id", "boots"),
        ("ix_approvals_bundle_id", "approvals"),
        ("ix_alias_history_alias_id", "alias_history"),
        ("ix_attestations_bundle_id", "attestations"),
        ("ix_bundles_repo_id", "bundles"),
        ("ix_identities_principal_id", "identities"),
        ("ix_signing_keys_principal_id", "signing_keys"),
        ("ix_tokens_principal_id", "tokens"),
    ):
        op.drop_index(index, table_name=table)
    for table in (
        "audit_events",
        "boots",
        "approvals",
        "alias_history",
        "aliases",
        "attestations",
        "bundles",
        "upload_sessions",
        "blobs",
        "repo_publishers",
        "repositories",
        "identities",
        "signing_keys",
        "tokens",
        "principals",
    ):
        op.drop_table(table)
