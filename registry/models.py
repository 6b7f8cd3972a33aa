"""The registry's tables (SQLAlchemy 2 ORM). The schema itself is owned by migrations/."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Alias",
    "AliasHistory",
    "Approval",
    "Attestation",
    "AuditRow",
    "Base",
    "Blob",
    "Boot",
    "Bundle",
    "BundleBlob",
    "Identity",
    "Principal",
    "RepoPublisher",
    "Repository",
    "SigningKey",
    "Token",
    "UploadSession",
    "utcnow",
]

DIGEST = 71  # len("sha256:") + 64


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class Principal(Base):
    __tablename__ = "principals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Token(Base):
    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SigningKey(Base):
    __tablename__ = "signing_keys"
    keyid: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), index=True)
    public_key_pem: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Identity(Base):
    __tablename__ = "identities"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), index=True)
    identity: Mapped[str] = mapped_column(String(500))
    issuer: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Repository(Base):
    __tablename__ = "repositories"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(300), unique=True)
    policy_yaml: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RepoPublisher(Base):
    __tablename__ = "repo_publishers"
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), primary_key=True)


class Blob(Base):
    __tablename__ = "blobs"
    digest: Mapped[str] = mapped_column(String(DIGEST), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class UploadSession(Base):
    __tablename__ = "upload_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    digest: Mapped[str] = mapped_column(String(DIGEST))
    size: Mapped[int] = mapped_column(BigInteger)
    offset: Mapped[int] = mapped_column(BigInteger, default=0)
    parts: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of part offsets
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Bundle(Base):
    __tablename__ = "bundles"
    __table_args__ = (UniqueConstraint("repo_id", "digest"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"), index=True)
    digest: Mapped[str] = mapped_column(String(DIGEST))
    manifest: Mapped[bytes] = mapped_column(LargeBinary)
    decision: Mapped[str] = mapped_column(Text)  # JSON
    findings: Mapped[str] = mapped_column(Text)  # JSON
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    quarantined: Mapped[bool] = mapped_column(Boolean, default=False)
    quarantine_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    tombstoned: Mapped[bool] = mapped_column(Boolean, default=False)
    tombstone_reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class BundleBlob(Base):
    """A blob a bundle's manifest names (its config or a layer)."""

    __tablename__ = "bundle_blobs"
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), primary_key=True)
    digest: Mapped[str] = mapped_column(String(DIGEST), primary_key=True, index=True)


class Attestation(Base):
    __tablename__ = "attestations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    predicate_type: Mapped[str] = mapped_column(String(500))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    sha256: Mapped[str] = mapped_column(String(DIGEST))
    signers: Mapped[str] = mapped_column(Text)  # JSON
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # A retracted attestation keeps its row and bytes (forensics) and counts nowhere.
    retracted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    retracted_by: Mapped[int | None] = mapped_column(
        ForeignKey("principals.id", name="fk_attestations_retracted_by_principals"),
        nullable=True,
    )
    retraction_reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class Alias(Base):
    __tablename__ = "aliases"
    __table_args__ = (UniqueConstraint("repo_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"))
    name: Mapped[str] = mapped_column(String(200))
    digest: Mapped[str] = mapped_column(String(DIGEST))
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AliasHistory(Base):
    __tablename__ = "alias_history"
    __table_args__ = (UniqueConstraint("alias_id", "version"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    alias_id: Mapped[int] = mapped_column(ForeignKey("aliases.id"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    from_digest: Mapped[str | None] = mapped_column(String(DIGEST), nullable=True)
    to_digest: Mapped[str] = mapped_column(String(DIGEST))
    actor: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    rollback: Mapped[bool] = mapped_column(Boolean, default=False)


class Approval(Base):
    __tablename__ = "approvals"
    __table_args__ = (UniqueConstraint("bundle_id", "alias", "principal_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), index=True)
    alias: Mapped[str] = mapped_column(String(200))
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Boot(Base):
    __tablename__ = "boots"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), index=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    fingerprint_id: Mapped[str] = mapped_column(String(200))
    fingerprint: Mapped[str] = mapped_column(Text)  # JSON
    outcome: Mapped[str] = mapped_column(String(50))
    detail: Mapped[str] = mapped_column(Text)  # JSON
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuditRow(Base):
    __tablename__ = "audit_events"
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    at: Mapped[str] = mapped_column(String(40))
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(100))
    subject: Mapped[str] = mapped_column(Text)
    details: Mapped[str] = mapped_column(Text)  # canonical JSON (RFC 8785)
    prev_hash: Mapped[str] = mapped_column(String(DIGEST))
    hash: Mapped[str] = mapped_column(String(DIGEST))
