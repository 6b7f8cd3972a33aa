"""Verified pull: the worker checks everything itself (docs/loader.md#pull).

``pull_bundle`` runs, in order:

1. resolve the reference (alias -> digest) through the registry's TUF metadata, verified
   from the worker's pinned root (``loader.tuf_resolve``; docs/tuf.md#workers);
2. refuse a quarantined or tombstoned bundle;
3. fetch the manifest bytes (the download stops at the policy's ``max_manifest_bytes``),
   check they hash to the digest, parse them strictly, and refuse a manifest whose stated
   sizes break the policy's limits before a byte of a blob is downloaded;
4. download every missing blob into the cache (parallel, hashed while streaming, resumed,
   never more bytes than the manifest states); with ``repair``, first re-hash the cached
   blobs and drop every one that does not match;
5. stage the tree from the cache (hardlinks) in a private temporary directory;
6. hand the manifest, every attestation and the staged tree to the one bundle verifier
   (attest.verifier.verify_bundle) under the WORKER's policy and trust (never the registry's
   word): it scans, verifies, ignores statements by signers the worker does not trust, and
   the policy decides; then, for an alias reference, the one decision of an alias move
   judges the release gates of the worker policy's alias rule from what was verified
   (loader.alias_gates, attest.alias_decision's ``WORKER_STEPS``; a reference by digest
   matches no alias rule); a denial refuses with every failed check of both;
7. make the tree read-only and rename it into place under its digest (with ``repair``,
   replacing a tree materialized earlier).

Any failure removes the staged tree: nothing half-materialized is left behind.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from modelward.attest.digest import HashedBytes
from modelward.attest.errors import DigestMismatch
from modelward.attest.manifest import Manifest, parse_manifest
from modelward.attest.policy import (
    Decision,
    Policy,
    PolicyDenied,
    TrustFlags,
    policy_from_flags,
)
from modelward.attest.trust import TrustSet, VerifiedStatement
from modelward.attest.verifier import (
    DirectoryReader,
    SetAside,
    check_manifest_limits,
    verify_bundle_result,
)
from modelward.client.api import parse_reference
from modelward.loader.alias_gates import gate_checks, with_gates
from modelward.loader.cache import BlobRequest, Cache
from modelward.loader.errors import BundleQuarantined, RefusedError
from modelward.loader.materialize import commit, discard, stage
from modelward.loader.source import RegistrySource
from modelward.loader.tuf_resolve import AliasTrust, resolve_reference

__all__ = ["PulledBundle", "pull_bundle"]

Progress = Callable[[int], None]


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
    ignored: tuple[SetAside, ...] = field(default=())
    repaired: tuple[str, ...] = field(default=())


def pull_bundle(
    client: RegistrySource,
    reference: str,
    cache: Cache,
    flags: TrustFlags,
    *,
    workers: int = 4,
    progress: Progress | None = None,
    on_total: Callable[[int], None] | None = None,
    repair: bool = False,
    worker_keyid: str | None = None,
) -> PulledBundle:
    """Pull, verify and materialize ``reference`` (``org/name@alias`` or ``@sha256:...``).

    ``flags`` are the worker's trust flags (attest.policy.policy_from_flags: the same policy
    the same flags mean in every command). ``repair`` re-hashes the cached blobs first,
    downloads again the ones that do not match (``PulledBundle.repaired`` names them) and
    rebuilds the materialized tree.
    ``worker_keyid``: the worker's key id, its identity in a rollout's cohorts (boot's
    ``--worker-key``; None: the stable digest until the candidate has 100%,
    docs/rollouts.md#cohorts).

    Raises ``BundleQuarantined``, ``DigestMismatch``, ``RefusedError`` (policy denied,
    with every failed check), ``PolicyError`` (bad trust flags), attest errors (bad
    manifest) and registry client errors (transport, not found, a response over its limit).
    """
    policy, trust = policy_from_flags(flags)
    ref = parse_reference(reference)
    # (1): resolve the reference: an alias through the registry's verified TUF metadata.
    alias_trust = AliasTrust(
        root=flags.tuf_root,
        online_aliases=flags.online_aliases,
        unsigned=flags.unsigned_aliases,
        metadata_url=flags.metadata_url,
        worker_keyid=worker_keyid,
    ).with_policy(policy, flags.policy)
    digest = resolve_reference(client, ref, cache.root, alias_trust)
    # (2): quarantined or tombstoned bundles are unloadable everywhere.
    record = client.get_bundle(ref.repo, digest)
    if record.get("quarantined") or record.get("tombstoned"):
        reason = record.get("quarantine_reason") or (
            "tombstoned" if record.get("tombstoned") else "no reason given"
        )
        raise BundleQuarantined(digest, str(reason))
    # (3): the manifest bytes hash to the digest (checked here, not taken on trust), and its
    # stated sizes are within the policy's limits before anything is downloaded.
    # Hashed once: bytes a RegistryClient checked carry their digest (HashedBytes), any
    # other source's are hashed here; parse and verifier reuse that digest.
    raw = HashedBytes(
        client.get_manifest(ref.repo, digest, max_bytes=policy.limits.max_manifest_bytes)
    )
    if raw.digest != digest:
        raise DigestMismatch(f"{ref.repo} manifest", digest, raw.digest)
    manifest = parse_manifest(raw)
    try:
        check_manifest_limits(policy, manifest)
    except PolicyDenied as exc:
        raise _refused(exc, f"{ref.repo}@{digest}") from None
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
        # (6): the one verifier, under the worker's policy and trust.
        listed = client.list_attestations(ref.repo, digest)
        attestations = [_b64decode(a.get("data"), a.get("id")) for a in listed]
        trusted = verify_bundle_result(
            raw,
            attestations,
            policy=policy,
            trust=trust,
            reader=DirectoryReader(staging),
            expected_digest=digest,
            labels=[f"attestation {a.get('id')}" for a in listed],
        )
        decision = trusted.decision
        if ref.alias is not None:  # the release gates, after the verifier (loader.alias_gates)
            decision = with_gates(decision, gate_checks(policy, ref.repo, ref.alias, trusted))
        _require_allowed(decision, f"{ref.repo}@{digest}")
        # (7): read-only, renamed into place.
        directory = commit(staging, cache.bundle_dir(digest), replace=repair)
    except BaseException:
        discard(staging)
        raise
    return PulledBundle(
        repo=ref.repo,
        digest=digest,
        manifest=manifest,
        directory=directory,
        policy=policy,
        trust=trust,
        decision=decision,
        statements=trusted.statements,
        ignored=trusted.ignored,
        repaired=tuple(repaired),
    )


def _require_allowed(decision: Decision, what: str) -> None:
    if not decision.allowed:
        raise _refused(PolicyDenied(decision), what)


def _refused(exc: PolicyDenied, what: str) -> RefusedError:
    failed = [f"  {c.name}: {c.message}" for c in exc.decision.checks if not c.passed]
    return RefusedError(f"{what} refused by the worker's policy:\n" + "\n".join(failed))


def _b64decode(text: object, attestation_id: object) -> bytes:
    """An attestation's bytes as the registry listed them; malformed data refuses the pull."""
    try:
        if isinstance(text, str):
            return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    raise RefusedError(
        f"the registry listed attestation {attestation_id} with data that is "
        "not base64: refusing to guess what was signed"
    )
