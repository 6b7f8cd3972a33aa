"""The registry's tables (SQLAlchemy 2 ORM). The schema itself is owned by migrations/."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, column_property, mapped_column

from modelward.registry.kit.utc import UtcDateTime

__all__ = [
    "Alias",
    "AliasHistory",
    "Approval",
    "Attestation",
    "AuditCheckpointRow",
    "AuditNode",
    "AuditRow",
    "Base",
    "Blob",
    "BlobLease",
    "Boot",
    "Bundle",
    "BundleBlob",
    "Identity",
    "OciManifest",
    "OciToken",
    "Org",
    "OrgMember",
    "OrgOwner",
    "Principal",
    "QuarantinedDigest",
    "RepoPublisher",
    "RepoReader",
    "Repository",
    "Rollout",
    "RolloutReport",
    "RolloutStepRow",
    "SigningKey",
    "Token",
    "UploadSession",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WebhookMessage",
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
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # the registry's HMAC over (id, name, role): signing.tuf.seals (docs/tuf.md#keys)
    seal: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # set while an admin has disabled it: its tokens authenticate nobody (migration 0012)
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class Token(Base):
    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class SigningKey(Base):
    __tablename__ = "signing_keys"
    keyid: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), index=True)
    public_key_pem: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # the registry's HMAC over (keyid, principal, key, revoked): registry.domains.signing.tuf.seals
    seal: Mapped[str | None] = mapped_column(String(64), nullable=True)


class Identity(Base):
    __tablename__ = "identities"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), index=True)
    identity: Mapped[str] = mapped_column(String(500))
    issuer: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class Org(Base):
    """The ``org`` of ``org/name`` repositories: its owners create repositories in it, and its
    floor (``attest.policy.PolicyFloor`` as JSON; null: none) bounds their policies."""

    __tablename__ = "orgs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    floor: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[int | None] = mapped_column(ForeignKey("principals.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # the ``private`` of the org's new repositories (docs/registry.md#private-repositories)
    private_by_default: Mapped[bool] = mapped_column(Boolean, default=False)


class OrgOwner(Base):
    __tablename__ = "org_owners"
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id"), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), primary_key=True)


class OrgMember(Base):
    """A member of an org: reads its private repositories (owners do too, without a row)."""

    __tablename__ = "org_members"
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id"), primary_key=True)
    principal_id: Mapped[int] = mapped_column(
        ForeignKey("principals.id"), primary_key=True, index=True
    )


class Repository(Base):
    __tablename__ = "repositories"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(300), unique=True)
    org_id: Mapped[int] = mapped_column(
        ForeignKey("orgs.id", name="fk_repositories_org_id_orgs"), index=True
    )
    policy_yaml: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # bytes the repository may hold; None: no quota (docs/registry.md#storage-hygiene)
    quota_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # the registry's HMAC over (name, policy_yaml): signing.tuf.seals (docs/tuf.md#keys)
    seal: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # readable only by those auth.authz's READ names (docs/registry.md#private-repositories)
    private: Mapped[bool] = mapped_column(Boolean, default=False)


class RepoReader(Base):
    """A principal granted read on one (private) repository (``repo grant``)."""

    __tablename__ = "repo_readers"
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"), primary_key=True)
    principal_id: Mapped[int] = mapped_column(
        ForeignKey("principals.id"), primary_key=True, index=True
    )


class RepoPublisher(Base):
    __tablename__ = "repo_publishers"
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"), primary_key=True)
    # the registry's HMAC over (repository name, principal): registry.domains.signing.tuf.seals
    seal: Mapped[str | None] = mapped_column(String(64), nullable=True)


class Blob(Base):
    __tablename__ = "blobs"
    digest: Mapped[str] = mapped_column(String(DIGEST), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class UploadSession(Base):
    __tablename__ = "upload_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    digest: Mapped[str] = mapped_column(String(DIGEST))
    size: Mapped[int] = mapped_column(BigInteger)
    offset: Mapped[int] = mapped_column(BigInteger, default=0)
    parts: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of part offsets
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # the repository the upload is charged to (None: started without naming one)
    repo_id: Mapped[int | None] = mapped_column(
        ForeignKey("repositories.id", name="fk_upload_sessions_repo_id_repositories"),
        nullable=True,
        index=True,
    )


class BlobLease(Base):
    """A blob just stored for a push that has not committed yet: garbage collection spares
    the blob while the lease is younger than the GC window, and the repository's quota counts
    it (docs/registry.md#storage-hygiene)."""

    __tablename__ = "blob_leases"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(String(DIGEST), index=True)
    repo_id: Mapped[int | None] = mapped_column(
        ForeignKey("repositories.id"), nullable=True, index=True
    )
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, index=True)


class QuarantinedDigest(Base):
    """A quarantined bundle digest: quarantine belongs to the digest, in every repository
    (registry/domains/quarantine/service.py is the one place that reads and writes it)."""

    __tablename__ = "quarantined_digests"
    digest: Mapped[str] = mapped_column(String(DIGEST), primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    # The repository it was quarantined through, who did it and when (by and at are null
    # only for quarantines recorded before migration 0004 that the audit log did not name).
    repo_id: Mapped[int | None] = mapped_column(ForeignKey("repositories.id"), nullable=True)
    quarantined_by: Mapped[int | None] = mapped_column(ForeignKey("principals.id"), nullable=True)
    quarantined_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


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
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    tombstoned: Mapped[bool] = mapped_column(Boolean, default=False)
    tombstone_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Read-only views of the digest's quarantine (table quarantined_digests), never columns:
    # every bundle row of a quarantined digest, in every repository, reads as quarantined.
    quarantined: Mapped[bool] = column_property(
        select(QuarantinedDigest.digest)
        .where(QuarantinedDigest.digest == digest)
        .correlate_except(QuarantinedDigest)
        .exists()
    )
    quarantine_reason: Mapped[str | None] = column_property(
        select(QuarantinedDigest.reason)
        .where(QuarantinedDigest.digest == digest)
        .correlate_except(QuarantinedDigest)
        .scalar_subquery()
    )


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
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # A retracted attestation keeps its row and bytes (forensics) and counts nowhere.
    retracted_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    retracted_by: Mapped[int | None] = mapped_column(
        ForeignKey("principals.id", name="fk_attestations_retracted_by_principals"),
        nullable=True,
    )
    retraction_reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    @classmethod
    def is_live(cls) -> ColumnElement[bool]:
        """The criterion "not retracted", for a query that selects attestation columns."""
        return cls.retracted_at.is_(None)


class Alias(Base):
    __tablename__ = "aliases"
    __table_args__ = (UniqueConstraint("repo_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"))
    name: Mapped[str] = mapped_column(String(200))
    digest: Mapped[str] = mapped_column(String(DIGEST))
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class AliasHistory(Base):
    __tablename__ = "alias_history"
    __table_args__ = (UniqueConstraint("alias_id", "version"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    alias_id: Mapped[int] = mapped_column(ForeignKey("aliases.id"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    from_digest: Mapped[str | None] = mapped_column(String(DIGEST), nullable=True)
    to_digest: Mapped[str] = mapped_column(String(DIGEST))
    actor: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    rollback: Mapped[bool] = mapped_column(Boolean, default=False)


class Approval(Base):
    """One principal's approval of a bundle for an alias. It is the principal's, not the
    token's: it counts while the principal is a reviewer or an admin and until the approver
    withdraws it (the row stays, marked withdrawn; approving again clears the mark)."""

    __tablename__ = "approvals"
    __table_args__ = (UniqueConstraint("bundle_id", "alias", "principal_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), index=True)
    alias: Mapped[str] = mapped_column(String(200))
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    withdrawn_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    withdrawal_reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class Boot(Base):
    __tablename__ = "boots"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bundle_id: Mapped[int] = mapped_column(ForeignKey("bundles.id"), index=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    fingerprint_id: Mapped[str] = mapped_column(String(200))
    fingerprint: Mapped[str] = mapped_column(Text)  # JSON
    outcome: Mapped[str] = mapped_column(String(50))
    detail: Mapped[str] = mapped_column(Text)  # JSON
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


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


class AuditNode(Base):
    """A complete perfect subtree of the audit log's Merkle tree (attest.audit.tree): level 0
    holds the leaf hashes; written in the same transaction as the event that completes it."""

    __tablename__ = "audit_tree_nodes"
    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    idx: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary(32))


class AuditCheckpointRow(Base):
    """Every checkpoint the registry signed, the note exactly as signed; ``key`` is the
    signing key's ``name+id`` (a new one is signed when the tree grew or the key changed)."""

    __tablename__ = "audit_checkpoints"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tree_size: Mapped[int] = mapped_column(BigInteger, index=True)
    root_hash: Mapped[bytes] = mapped_column(LargeBinary(32))
    key: Mapped[str] = mapped_column(String(300))
    note: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class OciManifest(Base):
    """A manifest pushed through ``/v2`` that is not a bundle row (docs/oci.md#states):
    ``pending`` (a ModelPack manifest refused only for missing attestations; ``reasons``),
    ``accepted`` (a pending one that became a bundle), ``referrer`` (an attestation artifact
    whose attestation is stored: ``attestation_id``), ``held`` (a referrer whose subject is
    pending). ``manifest`` holds the exact bytes the digest names."""

    __tablename__ = "oci_manifests"
    __table_args__ = (
        UniqueConstraint("repo_id", "digest", name="uq_oci_manifests_repo_id_digest"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"))
    digest: Mapped[str] = mapped_column(String(DIGEST))
    media_type: Mapped[str] = mapped_column(String(200))
    artifact_type: Mapped[str | None] = mapped_column(String(200), nullable=True)
    subject: Mapped[str | None] = mapped_column(String(DIGEST), nullable=True, index=True)
    state: Mapped[str] = mapped_column(String(20))
    manifest: Mapped[bytes] = mapped_column(LargeBinary)
    reasons: Mapped[str] = mapped_column(Text)  # JSON list of failed checks
    attestation_id: Mapped[int | None] = mapped_column(ForeignKey("attestations.id"), nullable=True)
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class OciToken(Base):
    """A short-lived bearer token of ``/v2/token``: sha256 of the secret only, the API token
    it was issued against (its revocation ends this one), the granted scopes (JSON)."""

    __tablename__ = "oci_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    api_token_id: Mapped[str] = mapped_column(ForeignKey("tokens.id"))
    scopes: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)


class Rollout(Base):
    """A rollout of an alias to a candidate bundle (docs/rollouts.md). The signed plan is
    ``plan_json`` (its canonical bytes; ``plan_sha256`` names it); ``analysis_text`` the
    analysis document as the caller gave it. ``state`` mirrors the signed step (``planned``
    until the first step; ``running``, ``paused``, ``aborted``, ``completed``); the registry
    decides from the signed metadata, never from this row."""

    __tablename__ = "rollouts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[str] = mapped_column(String(32), unique=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"), index=True)
    alias: Mapped[str] = mapped_column(String(100))
    stable: Mapped[str] = mapped_column(String(DIGEST))
    candidate: Mapped[str] = mapped_column(String(DIGEST))
    plan_json: Mapped[bytes] = mapped_column(LargeBinary)
    plan_sha256: Mapped[str] = mapped_column(String(64))
    analysis_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    state: Mapped[str] = mapped_column(String(20), default="planned")
    step_index: Mapped[int] = mapped_column(Integer, default=-1)
    proposal_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # the observable rollback (migration 0015; docs/rollouts.md): when the failure was
    # detected (the first failing report's received_at), decided (the abort signed), the
    # route converged, the stable cohort recovered; ``figures`` the computed figures (JSON)
    detected_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    converged_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    recovered_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    figures: Mapped[str | None] = mapped_column(Text, nullable=True)


class RolloutStepRow(Base):
    """One step a rollout took (started, advanced, aborted, completed), in order (``seq``);
    ``tuf_version``: the version of ``ORG:NAME@=rollout`` that signed it. ``verdict``: the
    step's analysis verdict (pass, fail, inconclusive; NULL: not judged, as every step of a
    manually advanced rollout)."""

    __tablename__ = "rollout_steps"
    __table_args__ = (UniqueConstraint("rollout_pk", "seq", name="uq_rollout_steps_seq"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_pk: Mapped[int] = mapped_column(ForeignKey("rollouts.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    step_index: Mapped[int] = mapped_column(Integer)
    weight: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    actor: Mapped[str] = mapped_column(String(200))
    tuf_version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(20), nullable=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    # the judgement's evidence beside ``verdict`` (JSON; migration 0015)
    analysis: Mapped[str | None] = mapped_column(Text, nullable=True)


class RolloutReport(Base):
    """One fleet report a serving worker signed (docs/rollouts.md#fleet-reports), kept as
    received (``envelope``, verbatim) with the verified predicate (``predicate``, JSON) and
    the figures the analysis reads. ``received_at`` is the registry's clock: windows are
    judged by it. ``assigned``: the digest the signed step assigned the signing key when the
    report arrived; ``rollout_pk``: the rollout it reports on (NULL: none). ``seq`` strictly
    increases per worker key (a replay is refused; unique with ``worker_keyid``)."""

    __tablename__ = "rollout_reports"
    __table_args__ = (
        UniqueConstraint("worker_keyid", "seq", name="uq_rollout_reports_worker_seq"),
        Index("ix_rollout_reports_window", "repo_id", "alias", "received_at"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"))
    alias: Mapped[str] = mapped_column(String(100))
    rollout_pk: Mapped[int | None] = mapped_column(ForeignKey("rollouts.id"), nullable=True)
    worker_keyid: Mapped[str] = mapped_column(String(64))
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    digest: Mapped[str] = mapped_column(String(DIGEST))
    seq: Mapped[int] = mapped_column(BigInteger)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    interval_seconds: Mapped[float] = mapped_column(Float)
    requests: Mapped[int] = mapped_column(BigInteger)
    errors: Mapped[int] = mapped_column(BigInteger)
    retries: Mapped[int] = mapped_column(BigInteger)
    predicate: Mapped[str] = mapped_column(Text)
    envelope: Mapped[bytes] = mapped_column(LargeBinary)
    assigned: Mapped[str] = mapped_column(String(DIGEST))


class WebhookEndpoint(Base):
    """A receiver of signed webhooks (docs/webhooks.md): ``url``, the event types it takes
    (``events``, a JSON list: names or ``rollout.*``), its signing secret sealed with
    AES-GCM under the registry's webhook key (``secret_sealed``, never the secret itself),
    ``state``: ``enabled``, ``failing`` (its last delivery used up every attempt; it still
    gets new events), ``disabled`` or ``removed`` (its secret erased)."""

    __tablename__ = "webhook_endpoints"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    url: Mapped[str] = mapped_column(String(2000))
    events: Mapped[str] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    secret_sealed: Mapped[bytes] = mapped_column(LargeBinary)
    state: Mapped[str] = mapped_column(String(20), default="enabled")
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    secret_rotated_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    failing_since: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class WebhookMessage(Base):
    """One event, written in the transaction of the decision it reports (the outbox):
    ``id`` is the ``webhook-id`` every attempt sends; ``payload`` the exact bytes signed
    and sent."""

    __tablename__ = "webhook_messages"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    event_type: Mapped[str] = mapped_column(String(100))
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class WebhookDelivery(Base):
    """One message to one endpoint. ``state``: ``pending`` (due at ``next_attempt_at``),
    ``delivering`` (claimed by ``claim`` until ``claimed_until``: a conditional UPDATE, so
    two server processes never send it at once), ``delivered``, ``failed`` (every attempt
    used) or ``cancelled`` (its endpoint was removed). ``attempts``: since it was last
    queued (a redelivery starts again); each attempt is a ``WebhookAttempt``."""

    __tablename__ = "webhook_deliveries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(ForeignKey("webhook_messages.id"), index=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("webhook_endpoints.id"), index=True)
    state: Mapped[str] = mapped_column(String(20), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    claim: Mapped[str | None] = mapped_column(String(32), nullable=True)
    claimed_until: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class WebhookAttempt(Base):
    """The delivery log: one row per attempt, when it began, the HTTP status or the error
    (its type and a short message; never the payload or the secret), how long it took."""

    __tablename__ = "webhook_attempts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("webhook_deliveries.id"), index=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    duration_ms: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
