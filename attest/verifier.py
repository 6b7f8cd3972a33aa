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
    (3) every file is scanned by content, through the reader, under the policy's limits, and
        the serving configuration is checked against the model's own
        (attest.scanner.check_serving);
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

Steps (3) and (4) are the costly ones (every file read, an OMS signature re-hashes every
file). A caller that judges the same immutable bundle again (the registry) may pass an
``EvidenceMemo`` that recalls their results: step (3) under ``scan_key`` (the manifest digest
and the scanner's limits), each attestation of step (4) under ``attestation_key`` (the
manifest digest, the attestation's bytes and label, the trust set by key id and trust-root
file, the ignore paths). Steps (1), (2) and (5) always run. With an X.509 CA in the trust
set, (4) depends on the clock (a certificate's validity "now"): no attestation key, nothing
of (4) recalled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

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
from modelward.attest.scanner import (
    MAX_MODEL_CONFIG_BYTES,
    SERVING_FILES,
    Finding,
    ScanLimits,
    check_serving,
    scan_blob,
)
from modelward.attest.scanner._tree import library_problem
from modelward.attest.tree import is_excluded, normalize_excludes
from modelward.attest.trust import TrustSet, VerifiedStatement
from modelward.attest.verify import detect_kind, verify_attestation

__all__ = [
    "BlobReader",
    "BundleVerdict",
    "DirectoryReader",
    "EvidenceMemo",
    "SetAside",
    "TrustedBundle",
    "VerifiedAttestation",
    "attestation_key",
    "check_manifest_limits",
    "scan_key",
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


_T = TypeVar("_T")
UNREADABLE = "tree.unreadable"
Judged = tuple[str, VerifiedAttestation | SetAside]  # ("verified"|"ignored"|"rejected", it)


class EvidenceMemo(Protocol):
    """Where a caller keeps the results of steps (3) and (4) it already paid for."""

    def recall(self, key: str, compute: Callable[[], _T]) -> _T:
        """What is stored under ``key``, or ``compute()``'s result (stored under it)."""
        ...


def _key(parts: dict[str, object]) -> str:
    encoded = json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


def scan_key(manifest: Manifest, limits: ScanLimits) -> str:
    """The key step (3) of ``manifest`` is a function of: its digest and the limits."""
    return _key({"step": "3", "manifest": manifest.digest, "limits": repr(limits)})


def attestation_key(
    manifest: Manifest,
    label: str,
    data: bytes,
    *,
    trust: TrustSet,
    oms_ignore_paths: Sequence[str] = (),
) -> str | None:
    """The key step (4) of one attestation is a function of; None when it also depends on
    the clock (an X.509 CA is trusted), so it must be judged afresh."""
    if trust.cas:
        return None
    identities = []
    for identity in trust.identities:
        # a trust-root file is read when verifying: its size and modification time count
        stat = identity.trust_root.stat() if identity.trust_root is not None else None
        identities.append(
            [
                identity.name,
                identity.identity,
                identity.issuer,
                str(identity.trust_root),
                [stat.st_size, stat.st_mtime_ns] if stat is not None else None,
            ]
        )
    return _key(
        {
            "step": "4",
            "manifest": manifest.digest,
            "label": label,
            "attestation": _sha256(data),
            "keys": [[k.name, k.keyid] for k in trust.keys],
            "identities": identities,
            "ignore": list(oms_ignore_paths),
        }
    )


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
    memo: EvidenceMemo | None = None,
) -> TrustedBundle:
    """Decide whether ``policy`` trusts the bundle ``manifest_bytes`` names (module doc).

    ``trust`` is who may sign an attestation for it to verify at all (the policy's signers,
    and at the registry every registered signer); ``registered`` are the signers the policy
    counts towards its threshold only when it sets ``trust_registered_signers``.
    ``labels`` name the attestations in reports (default ``attestation N``). ``memo``
    recalls steps (3) and (4) already judged (module doc).

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
        memo=memo,
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
    memo: EvidenceMemo | None = None,
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
    limits = policy_scan_limits(policy)
    # (3): every file by content (a file that could not be read now is never recalled).
    try:
        findings = _recall(
            memo, scan_key(manifest, limits), lambda: _scanned(limits, manifest, reader)
        )
    except _Unreadable as exc:
        findings = exc.findings
    # (4): every attestation: verified, ignored or rejected.
    verified: list[VerifiedAttestation] = []
    ignored: list[SetAside] = []
    rejected: list[SetAside] = []
    for name, data in zip(names, attestations, strict=True):
        key = None
        if memo is not None:
            key = attestation_key(
                manifest, name, data, trust=trust, oms_ignore_paths=oms_ignore_paths
            )

        def judged(name: str = name, data: bytes = data) -> Judged:
            return _judge_one(
                manifest, name, data, trust=trust, reader=reader, oms_ignore_paths=oms_ignore_paths
            )

        outcome, item = _recall(memo, key, judged)
        if isinstance(item, VerifiedAttestation):
            verified.append(item)
        else:
            (ignored if outcome == "ignored" else rejected).append(item)
    # (5): the one evaluator decides.
    decision = evaluate(
        policy,
        manifest=manifest,
        statements=[v.statement for v in verified],
        rejected=[f"{r.label}: {r.reason}" for r in rejected],
        findings=list(findings),
        extra_trust=registered,
    )
    return BundleVerdict(
        digest=manifest.digest,
        manifest=manifest,
        verified=tuple(verified),
        ignored=tuple(ignored),
        rejected=tuple(rejected),
        findings=findings,
        decision=decision,
    )


def _recall(memo: EvidenceMemo | None, key: str | None, compute: Callable[[], _T]) -> _T:
    return compute() if memo is None or key is None else memo.recall(key, compute)


class _Unreadable(Exception):  # noqa: N818 - control flow, never escapes this module
    """Step (3) met a file it could not read: a result to report, not to keep."""

    def __init__(self, findings: tuple[Finding, ...]) -> None:
        super().__init__("unreadable")
        self.findings = findings


def _scanned(limits: ScanLimits, manifest: Manifest, reader: BlobReader) -> tuple[Finding, ...]:
    findings = tuple(_scan(limits, manifest, reader))
    if any(f.rule == UNREADABLE for f in findings):
        raise _Unreadable(findings)
    return findings


def _scan(limits: ScanLimits, manifest: Manifest, reader: BlobReader) -> list[Finding]:
    findings: list[Finding] = []
    for layer in manifest.layers:
        try:
            with reader.open(layer) as stream:
                report = scan_blob(layer.path, stream, layer.size, limits)
        except (OSError, BundleError) as exc:
            findings.append(Finding(layer.path, UNREADABLE, f"read failed: {exc}"))
            continue
        findings.extend(report.findings)
        local = reader.local_path(layer)
        if report.kind == "safetensors" and not report.findings and local is not None:
            problem = library_problem(local)
            if problem is not None:
                findings.append(Finding(layer.path, "scan.safetensors", problem))
    findings.extend(_serving(manifest, reader))
    return sorted(findings, key=lambda f: (f.path.encode(), f.rule))


def _serving(manifest: Manifest, reader: BlobReader) -> tuple[Finding, ...]:
    """The serving configuration against the model's own (``check_serving``), read through
    the reader (at most ``MAX_MODEL_CONFIG_BYTES`` a file)."""
    files: dict[str, bytes] = {}
    for layer in manifest.layers:
        if layer.path not in SERVING_FILES:
            continue
        try:
            with reader.open(layer) as stream:
                files[layer.path] = stream.read(MAX_MODEL_CONFIG_BYTES + 1)
        except (OSError, BundleError) as exc:
            return (Finding(layer.path, UNREADABLE, f"read failed: {exc}"),)
    return check_serving(files, [layer.path for layer in manifest.layers])


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


def _judge_one(
    manifest: Manifest,
    name: str,
    data: bytes,
    *,
    trust: TrustSet,
    reader: BlobReader,
    oms_ignore_paths: Sequence[str],
) -> Judged:
    try:
        # (4a)
        return "verified", verify_one_attestation(
            manifest,
            data,
            trust=trust,
            reader=reader,
            label=name,
            oms_ignore_paths=oms_ignore_paths,
        )
    except UntrustedSigner as exc:
        # (4b): nobody this verifier trusts signed it: it vouches for nothing.
        return "ignored", SetAside(name, _sha256(data), str(exc))
    except AttestError as exc:
        # (4c): tampering or malformed bytes.
        return "rejected", SetAside(name, _sha256(data), str(exc))


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
