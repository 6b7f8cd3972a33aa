"""The one owner of the verdict "this bundle is trusted" (docs/attestations.md#the-verdict).

Every caller hands bytes in and gets a ``TrustedBundle`` back or ``PolicyDenied`` raised:
the registry at push, alias move and attach, the loader at pull and boot, and
``modelward bundle verify``. Nothing else in modelward builds a ``TrustedBundle``. This
module does no I/O of its own: a bundle's files are read through the ``BlobReader`` the
caller passes in (the registry's blob store, a worker's staged tree, a directory).

``verify_bundle`` runs, in order:

    (1) the manifest bytes are within the policy's limit, hash to the expected digest,
        and parse strictly (attest.manifest.parse_manifest);
    (2) the manifest is within the policy's size limits, checked before any file is read;
    (3) every file is scanned by content, through the reader, under the policy's limits;
    (4) every attestation is told by its content and verified against the trust set:
        (4a) verified and about this bundle: kept, for the policy to count;
        (4b) no signature even claims a trusted signer: *ignored*, reported with its reason
             and never a reason to deny (an unknown signer is not tampering);
        (4c) anything else is *rejected*: a signature that claims a trusted signer and
             fails, a statement about another bundle, malformed bytes;
    (5) the one policy evaluator decides over (1)-(4) (attest.policy.evaluate); alias
        rules are not its to judge (a worker decides its release gates after this, with
        attest.alias_decision, from the statements of (4a));
    (6) a denial raises ``PolicyDenied`` carrying every failed check; otherwise the bundle
        is returned as a ``TrustedBundle``.

``verify_bundle_result`` runs the same steps and returns the ``BundleVerdict`` report
without raising for a denial, for display (``bundle verify --json``).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from modelward.attest._fileio import open_regular
from modelward.attest.errors import (
    AttestError,
    BundleError,
    ManifestError,
    UntrustedSigner,
    VerificationError,
)
from modelward.attest.manifest import Layer, Manifest, ManifestLimits, parse_manifest
from modelward.attest.policy import (
    Decision,
    Policy,
    PolicyDenied,
    evaluate,
    policy_scan_limits,
    size_checks,
)
from modelward.attest.scanner import Finding, scan_blob
from modelward.attest.scanner._tree import library_problem
from modelward.attest.tree import is_excluded, normalize_excludes
from modelward.attest.trust import TrustSet, VerifiedStatement
from modelward.attest.verify import detect_kind, verify_attestation

__all__ = [
    "BlobReader",
    "BundleVerdict",
    "DirectoryReader",
    "SetAside",
    "TrustedBundle",
    "VerifiedAttestation",
    "check_manifest_limits",
    "verify_bundle",
    "verify_bundle_result",
    "verify_one_attestation",
]


class BlobReader(Protocol):
    """How the verifier reads a bundle's files; the caller owns the I/O."""

    def open(self, layer: Layer) -> contextlib.AbstractContextManager[BinaryIO]:
        """The layer's bytes (seekable, ``layer.size`` long, already hashed to its digest)."""
        ...

    def local_path(self, layer: Layer) -> Path | None:
        """A regular file on disk holding the layer, if there is one (lets the scanner have
        the safetensors library cross-check the file); None otherwise."""
        ...

    def tree(self) -> contextlib.AbstractContextManager[Path]:
        """The bundle's files as a directory tree (OMS signatures are checked file by file)."""
        ...


@dataclass(frozen=True)
class DirectoryReader:
    """A bundle materialized as a directory (a worker's staged tree, a publisher's model)."""

    root: Path

    @contextlib.contextmanager
    def open(self, layer: Layer) -> Iterator[BinaryIO]:
        opened = open_regular(self.root / layer.path)
        if opened is None:
            raise ManifestError(f"{layer.path}: not a regular file in {self.root}")
        handle, _ = opened
        with handle:
            yield handle

    def local_path(self, layer: Layer) -> Path | None:
        return self.root / layer.path

    @contextlib.contextmanager
    def tree(self) -> Iterator[Path]:
        yield self.root


@dataclass(frozen=True)
class VerifiedAttestation:
    """An attestation whose signature verified and which is about this bundle."""

    label: str
    data: bytes
    statement: VerifiedStatement

    @property
    def sha256(self) -> str:
        return _sha256(self.data)


@dataclass(frozen=True)
class SetAside:
    """An attestation that does not count: ignored (unknown signer) or rejected (bad)."""

    label: str
    sha256: str
    reason: str


@dataclass(frozen=True)
class BundleVerdict:
    """Everything the verifier found; ``decision.allowed`` says whether it is trusted."""

    digest: str
    manifest: Manifest
    verified: tuple[VerifiedAttestation, ...]
    ignored: tuple[SetAside, ...]
    rejected: tuple[SetAside, ...]
    findings: tuple[Finding, ...]
    decision: Decision

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    @property
    def statements(self) -> tuple[VerifiedStatement, ...]:
        return tuple(v.statement for v in self.verified)


@dataclass(frozen=True)
class TrustedBundle(BundleVerdict):
    """A bundle the policy allows. Only ``verify_bundle`` makes one."""


def check_manifest_limits(policy: Policy, manifest: Manifest) -> None:
    """Step (2) on its own, so a worker can refuse before downloading a byte.

    Raises PolicyDenied naming every limit the manifest's stated sizes break.
    """
    checks = size_checks(policy, manifest)
    if not all(c.passed for c in checks):
        raise PolicyDenied(Decision(allowed=False, checks=tuple(checks)))


def verify_bundle(
    manifest_bytes: bytes,
    attestations: Sequence[bytes],
    *,
    policy: Policy,
    trust: TrustSet,
    reader: BlobReader,
    registered: TrustSet = TrustSet(),
    expected_digest: str | None = None,
    labels: Sequence[str] | None = None,
    oms_ignore_paths: Sequence[str] = (),
) -> TrustedBundle:
    """Decide whether ``policy`` trusts the bundle ``manifest_bytes`` names (module doc).

    ``trust`` is who may sign an attestation for it to verify at all (the policy's signers,
    and at the registry every registered signer); ``registered`` are the signers the policy
    counts towards its threshold only when it sets ``trust_registered_signers``.
    ``labels`` name the attestations in reports (default ``attestation N``).

    Raises:
        ManifestError, BundleError: the manifest bytes are malformed, over the policy's
            limit, or do not hash to ``expected_digest``.
        PolicyDenied: the policy denies the bundle; ``decision`` holds every check.
    """
    verdict = verify_bundle_result(
        manifest_bytes,
        attestations,
        policy=policy,
        trust=trust,
        reader=reader,
        registered=registered,
        expected_digest=expected_digest,
        labels=labels,
        oms_ignore_paths=oms_ignore_paths,
    )
    # (6): a denial raises with every failed check; only an allowed bundle is "trusted".
    if not verdict.allowed:
        raise PolicyDenied(verdict.decision)
    return TrustedBundle(
        digest=verdict.digest,
        manifest=verdict.manifest,
        verified=verdict.verified,
        ignored=verdict.ignored,
        rejected=verdict.rejected,
        findings=verdict.findings,
        decision=verdict.decision,
    )


def verify_bundle_result(
    manifest_bytes: bytes,
    attestations: Sequence[bytes],
    *,
    policy: Policy,
    trust: TrustSet,
    reader: BlobReader,
    registered: TrustSet = TrustSet(),
    expected_digest: str | None = None,
    labels: Sequence[str] | None = None,
    oms_ignore_paths: Sequence[str] = (),
) -> BundleVerdict:
    """Steps (1)-(5) of ``verify_bundle``: the report, without raising for a denial.

    Raises ManifestError/BundleError for malformed manifest bytes, as verify_bundle does.
    """
    if labels is not None and len(labels) != len(attestations):
        raise ValueError("labels must name every attestation, one label each")
    names = (
        list(labels)
        if labels is not None
        else [f"attestation {i}" for i in range(len(attestations))]
    )
    # (1): the bytes within the policy's limit, the digest, the strict parse.
    manifest = parse_manifest(
        manifest_bytes, ManifestLimits(max_bytes=policy.limits.max_manifest_bytes)
    )
    if expected_digest is not None and manifest.digest != expected_digest:
        raise ManifestError(
            f"manifest bytes hash to {manifest.digest}, not the expected {expected_digest}"
        )
    # (2): the stated sizes, before any file is read.
    sizes = size_checks(policy, manifest)
    if not all(c.passed for c in sizes):
        decision = Decision(allowed=False, checks=tuple(sizes))
        return BundleVerdict(manifest.digest, manifest, (), (), (), (), decision)
    # (3): every file by content.
    findings = _scan(policy, manifest, reader)
    # (4): every attestation: verified, ignored or rejected.
    verified, ignored, rejected = _judge_attestations(
        manifest, zip(names, attestations, strict=True), trust, reader, oms_ignore_paths
    )
    # (5): the one evaluator decides.
    decision = evaluate(
        policy,
        manifest=manifest,
        statements=[v.statement for v in verified],
        rejected=[f"{r.label}: {r.reason}" for r in rejected],
        findings=findings,
        extra_trust=registered,
    )
    return BundleVerdict(
        digest=manifest.digest,
        manifest=manifest,
        verified=tuple(verified),
        ignored=tuple(ignored),
        rejected=tuple(rejected),
        findings=tuple(findings),
        decision=decision,
    )


def _scan(policy: Policy, manifest: Manifest, reader: BlobReader) -> list[Finding]:
    limits = policy_scan_limits(policy)
    findings: list[Finding] = []
    for layer in manifest.layers:
        try:
            with reader.open(layer) as stream:
                report = scan_blob(layer.path, stream, layer.size, limits)
        except (OSError, BundleError) as exc:
            findings.append(Finding(layer.path, "tree.unreadable", f"read failed: {exc}"))
            continue
        findings.extend(report.findings)
        local = reader.local_path(layer)
        if report.kind == "safetensors" and not report.findings and local is not None:
            problem = library_problem(local)
            if problem is not None:
                findings.append(Finding(layer.path, "scan.safetensors", problem))
    return sorted(findings, key=lambda f: (f.path.encode(), f.rule))


def verify_one_attestation(
    manifest: Manifest,
    data: bytes,
    *,
    trust: TrustSet,
    reader: BlobReader,
    label: str = "attestation",
    oms_ignore_paths: Sequence[str] = (),
) -> VerifiedAttestation:
    """Step (4) for one attestation: told by its content, verified against ``trust`` and
    bound to the bundle ``manifest`` names (attaching one to a stored bundle uses this).

    ``oms_ignore_paths`` are paths the bundle was built without (excluded, never part of
    it); an OMS signature is checked against the tree less those paths.

    Raises:
        UntrustedSigner: (4b) no signature claims a trusted signer.
        VerificationError, UnknownSignatureFormat, SubjectMismatch: (4c) tampering or
            malformed bytes, or an ignore path naming a bundle file.
        ValueError: an ignore path that is absolute or climbs out of the bundle.
    """
    if detect_kind(data) == "oms":
        # Ignored paths are EXCLUDED from the bundle (build_bundle(exclude=...)): none may
        # name a file the manifest lists, or that file would be in the bundle, unsigned.
        _require_excluded(manifest, oms_ignore_paths)
        with reader.tree() as root:
            stmt = verify_attestation(
                data,
                trust,
                bundle_digest=manifest.digest,
                root=root,
                ignore_paths=oms_ignore_paths,
            )
    else:
        stmt = verify_attestation(data, trust, bundle_digest=manifest.digest)
    return VerifiedAttestation(label, data, stmt)


def _require_excluded(manifest: Manifest, ignore_paths: Sequence[str]) -> None:
    """Refuse ignore paths that name bundle files (VerificationError, or ValueError for a
    path outside the bundle)."""
    ignores = normalize_excludes(ignore_paths)
    inside = [layer.path for layer in manifest.layers if is_excluded(layer.path, ignores)]
    if inside:
        raise VerificationError(
            f"ignore path(s) {', '.join(ignores)} name bundle file(s) {', '.join(inside)}: an "
            "ignored path must be left out of the bundle (build it with the same --ignore-path)"
        )


def _judge_attestations(
    manifest: Manifest,
    attestations: Iterable[tuple[str, bytes]],
    trust: TrustSet,
    reader: BlobReader,
    oms_ignore_paths: Sequence[str],
) -> tuple[list[VerifiedAttestation], list[SetAside], list[SetAside]]:
    verified: list[VerifiedAttestation] = []
    ignored: list[SetAside] = []
    rejected: list[SetAside] = []
    for name, data in attestations:
        try:
            # (4a)
            verified.append(
                verify_one_attestation(
                    manifest,
                    data,
                    trust=trust,
                    reader=reader,
                    label=name,
                    oms_ignore_paths=oms_ignore_paths,
                )
            )
        except UntrustedSigner as exc:
            # (4b): nobody this verifier trusts signed it: it vouches for nothing.
            ignored.append(SetAside(name, _sha256(data), str(exc)))
        except AttestError as exc:
            # (4c): tampering or malformed bytes.
            rejected.append(SetAside(name, _sha256(data), str(exc)))
    return verified, ignored, rejected


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
