"""Verified pull: the worker checks everything itself (docs/loader.md#pull).

``pull_bundle`` runs, in order:

1. resolve the reference (alias -> digest) through the registry;
2. refuse a quarantined or tombstoned bundle;
3. fetch the manifest bytes and check they hash to the digest; parse them strictly;
4. download every missing blob into the cache (parallel, hashed while streaming, resumed);
   with ``repair``, first re-hash the cached blobs and drop every one that does not match;
5. stage the tree from the cache (hardlinks) in a private temporary directory;
6. verify every attestation against the WORKER's trust set (never the registry's word);
7. scan the staged tree locally;
8. evaluate the worker's policy over 6 and 7; a denial refuses with every failed check;
9. make the tree read-only and rename it into place under its digest (with ``repair``,
   replacing a tree materialized earlier).

Any failure removes the staged tree: nothing half-materialized is left behind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from modelward.attest.errors import AttestError
from modelward.attest.manifest import Manifest, bundle_digest, parse_manifest
from modelward.attest.policy import Decision, Policy, load_policy, policy_trust_set
from modelward.attest.trust import TrustSet, VerifiedStatement
from modelward.loader.cache import BlobRequest, Cache
from modelward.loader.errors import BundleQuarantined, InputError, IntegrityError, RefusedError
from modelward.loader.materialize import commit, discard, stage

__all__ = ["WORKER_PREDICATE_TYPES", "PulledBundle", "TrustOptions", "pull_bundle",
           "worker_policy"]

WORKER_PREDICATE_TYPES = frozenset({
    "https://modelward.dev/determinism-baseline/v1",
    "https://modelward.dev/replay-result/v1",
})

Progress = Callable[[int], None]


@dataclass(frozen=True)
class TrustOptions:
    """Where the worker's trust comes from: a policy file, or public keys, or an identity."""

    policy: Path | None = None
    public_keys: tuple[Path, ...] = ()
    identity: str | None = None
    issuer: str | None = None


@dataclass(frozen=True)
class PulledBundle:
    repo: str
    digest: str
    manifest: Manifest
    directory: Path
    policy: Policy
    trust: TrustSet
    decision: Decision
    statements: tuple[VerifiedStatement, ...] = field(default=())
    repaired: tuple[str, ...] = field(default=())


def worker_policy(options: TrustOptions) -> tuple[Policy, TrustSet]:
    """The worker's policy and trust set from the trust flags; fails closed without any.

    Raises ``InputError`` for missing or conflicting flags, ``PolicyError``/``KeyError_``
    for unreadable policy or key files.
    """
    chosen = sum([options.policy is not None, bool(options.public_keys),
                  options.identity is not None or options.issuer is not None])
    if chosen == 0:
        raise InputError("no trust given: pass --policy FILE, --public-key PEM, or "
                         "--identity ID --issuer URL (the worker trusts nobody by default)")
    if chosen > 1:
        raise InputError("give only one of --policy, --public-key, --identity/--issuer")
    if options.policy is not None:
        policy = load_policy(options.policy)
        return policy, policy_trust_set(policy, options.policy.parent)
    doc: dict[str, Any] = {"version": 1, "signers": {}}
    if options.public_keys:
        keys = []
        for index, path in enumerate(options.public_keys):
            try:
                pem = path.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"--public-key {path}: cannot read: {exc}") from None
            keys.append({"name": f"key-{index}-{path.name}", "pem": pem})
        doc["signers"]["keys"] = keys
    else:
        if not options.identity or not options.issuer:
            raise InputError("--identity and --issuer go together")
        doc["signers"]["identities"] = [
            {"name": "identity", "identity": options.identity, "issuer": options.issuer}]
    policy = load_policy(yaml.safe_dump(doc).encode(), "<trust flags>")
    return policy, policy_trust_set(policy)


def _verify_statements(attestations: Sequence[bytes], trust: TrustSet, digest: str,
                       root: Path) -> tuple[list[VerifiedStatement], list[str]]:
    from modelward.attest.verify import verify_attestation

    verified: list[VerifiedStatement] = []
    rejected: list[str] = []
    for index, data in enumerate(attestations):
        try:
            verified.append(verify_attestation(data, trust, bundle_digest=digest, root=root))
        except AttestError as exc:
            rejected.append(f"attestation {index}: {exc}")
    return verified, rejected


def pull_bundle(client: Any, reference: str, cache: Cache, options: TrustOptions, *,
                workers: int = 4, progress: Progress | None = None,
                on_total: Callable[[int], None] | None = None,
                repair: bool = False) -> PulledBundle:
    """Pull, verify and materialize ``reference`` (``org/name@alias`` or ``@sha256:...``).

    ``repair`` re-hashes the cached blobs first, downloads again the ones that do not match
    (``PulledBundle.repaired`` names them) and rebuilds the materialized tree.

    Raises ``BundleQuarantined``, ``IntegrityError``, ``RefusedError`` (policy denied,
    with every failed check), ``InputError`` (bad reference or flags), attest errors
    (bad manifest) and registry client errors (transport, not found).
    """
    from modelward.attest.policy import evaluate, policy_scan_limits
    from modelward.attest.scanner import scan_tree
    from modelward.registry.client import parse_reference

    policy, trust = worker_policy(options)
    ref = parse_reference(reference)
    # (1): resolve the reference.
    digest = client.resolve(ref)
    # (2): quarantined or tombstoned bundles are unloadable everywhere.
    record = client.get_bundle(ref.repo, digest)
    if record.get("quarantined") or record.get("tombstoned"):
        reason = record.get("quarantine_reason") or ("tombstoned" if record.get("tombstoned")
                                                     else "no reason given")
        raise BundleQuarantined(digest, str(reason))
    # (3): the manifest bytes hash to the digest (checked here, not taken on trust).
    raw = client.get_manifest(ref.repo, digest)
    actual = bundle_digest(raw)
    if actual != digest:
        raise IntegrityError(f"{ref.repo} manifest", digest, actual)
    manifest = parse_manifest(raw)
    # (4): blobs into the cache.
    blobs = [BlobRequest(layer.digest, layer.size) for layer in manifest.layers]
    # With repair the bar counts the bytes re-hashed, then the bytes downloaded.
    rehashed = sum(b.size for b in cache.present(blobs)) if repair else 0

    def announce_total() -> None:
        if on_total is not None:
            on_total(rehashed + sum(b.size for b in cache.missing(blobs)))

    repaired: list[str] = []
    if repair:
        announce_total()
        repaired = cache.drop_corrupt(blobs, progress=progress)
    announce_total()
    cache.fetch(client, blobs, workers=workers, progress=progress)
    # (5): stage the tree.
    staging = stage(cache, manifest)
    try:
        # (6): attestations against the worker's trust. Workers' own statements (baselines,
        # replay results) vouch for nothing about the bundle: loader.statements reads them.
        attestations = [_b64decode(a["data"]) for a in client.list_attestations(ref.repo, digest)
                        if a.get("predicate_type") not in WORKER_PREDICATE_TYPES]
        verified, rejected = _verify_statements(attestations, trust, digest, staging)
        # (7): the scanner, locally.
        report = scan_tree(staging, policy_scan_limits(policy))
        # (8): the worker's policy decides.
        decision = evaluate(policy, manifest=manifest, statements=verified,
                            rejected=rejected, findings=report.findings)
        _require_allowed(decision, f"{ref.repo}@{digest}")
        # (9): read-only, renamed into place.
        directory = commit(staging, cache.bundle_dir(digest), replace=repair)
    except BaseException:
        discard(staging)
        raise
    return PulledBundle(repo=ref.repo, digest=digest, manifest=manifest, directory=directory,
                        policy=policy, trust=trust, decision=decision,
                        statements=tuple(verified), repaired=tuple(repaired))


def _require_allowed(decision: Decision, what: str) -> None:
    if not decision.allowed:
        failed = [f"  {c.name}: {c.message}" for c in decision.checks if not c.passed]
        raise RefusedError(f"{what} refused by the worker's policy:\n" + "\n".join(failed))


def _b64decode(text: str) -> bytes:
    import base64

    return base64.b64decode(text, validate=True)
