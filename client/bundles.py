"""``push`` and ``unsafe_fetch``: the registry client's composed operations.

push: (1) build the bundle (exact manifest bytes), (2) sign, (3) optionally judge it locally
under the repository's policy and stop before uploading when the registry would refuse it
(client.preflight), (4) upload the config and every distinct layer blob not already
present, in parallel, (5) PUT the manifest with its attestations, (6) move the alias by
compare-and-swap on the version just read.
unsafe_fetch: (1) resolve and fetch the manifest bytes, checked against the digest, (2) stream
each layer into a staging directory, checked against its digest and size, (3) rename the
staging directory into place. It checks NO signature and NO policy, and says so with an
``UnsafeFetchWarning``: a bundle to load comes from ``modelward pull`` (``loader.pull``).
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from modelward.client.blobs import BlobSource, BlobTransfer
from modelward.client.config import Reference, parse_repo
from modelward.client.errors import (
    ClientConfigError,
    PreflightRefused,
    UnsafeFetchWarning,
)

if TYPE_CHECKING:
    from modelward.attest.trust import TrustSet
    from modelward.client.preflight import Preflight

__all__ = [
    "BundleEndpoints",
    "PushResult",
    "UnsafeFetchResult",
    "push_bundle",
    "unsafe_fetch_bundle",
]

Progress = Callable[[int], None]


class BundleEndpoints(Protocol):
    """What a push and an unsafe fetch need of a client (``RegistryClient`` is one): the
    client's modules then import one way, ``api`` → ``bundles``."""

    blobs: BlobTransfer

    def get_repo(self, name: str) -> Any: ...

    def put_bundle(
        self, repo: str, digest: str, manifest: bytes, attestations: Sequence[bytes] = ()
    ) -> dict[str, Any]: ...

    def set_alias(
        self,
        repo: str,
        alias: str,
        digest: str,
        *,
        expected_version: int | None = None,
        reason: str | None = None,
        rollback: bool = False,
        propose: bool = False,
    ) -> dict[str, Any]: ...

    def resolve(self, ref: Reference) -> str: ...

    def get_manifest(self, repo: str, digest: str, *, max_bytes: int = ...) -> bytes: ...

    def download_blob(
        self, digest: str, dest: Path, *, size: int, progress: Progress | None = None
    ) -> Path: ...


@dataclass(frozen=True)
class PushResult:
    """What ``push`` did: the bundle digest, the server's policy decision, the alias if moved."""

    digest: str
    decision: Any
    alias: dict[str, Any] | None
    uploaded: int
    skipped: int
    total_bytes: int
    ignored: tuple[dict[str, str], ...] = ()  # attestations not recorded: {sha256, reason}
    preflight: Preflight | None = None  # the local check before uploading, when asked for


@dataclass(frozen=True)
class UnsafeFetchResult:
    """A bundle fetched by ``unsafe_fetch`` (digests checked, NOT verified): its digest, the
    exact manifest bytes, and where."""

    digest: str
    manifest: bytes
    root: Path
    files: tuple[str, ...] = field(default=())


def push_bundle(
    client: BundleEndpoints,
    root: Path,
    repo: str,
    *,
    alias: str | None = None,
    attestations: Sequence[bytes] = (),
    sign: Callable[[Any], Sequence[bytes]] | None = None,
    reason: str | None = None,
    progress: Progress | None = None,
    on_total: Callable[[int], None] | None = None,
    preflight: bool = False,
    own_trust: TrustSet | None = None,
    exclude: Sequence[str] = (),
    propose_alias: bool = False,
) -> PushResult:
    """Build the bundle at ``root``, upload missing blobs, PUT the manifest, move ``alias``.

    ``RegistryClient.push`` (``client`` is the instance). ``sign`` receives the ``BuiltBundle``
    and returns extra attestations to send. With ``preflight``, the bundle and every
    attestation are first judged locally under the repository's policy
    (client.preflight; ``own_trust``: the key ``sign`` signs with) and nothing is
    uploaded when the registry would certainly refuse. Paths in ``exclude`` are left out of
    the bundle (``build_bundle(exclude=...)``: never hashed, uploaded or materialized).
    ``propose_alias``: a protected ``alias`` short of approvals becomes a proposal its
    reviewers sign (``set_alias(propose=True)``; ``alias["pending"]``) instead of a refusal.
    Raises ``TreeRuleError`` (bad tree), ``PreflightRefused`` (refused before uploading),
    ``TransportError``/``APIError`` (refused).
    """
    from modelward.attest.manifest import build_bundle

    parse_repo(repo)
    # fail fast (NotFoundError, UnauthorizedError) before hashing gigabytes; names the repo's policy
    info = client.get_repo(repo)
    # (1) hash the tree into a manifest (exact bytes kept).
    built = build_bundle(root, exclude=exclude)
    manifest = built.manifest
    # (2) the attestations to send, signed now: the preflight judges them too.
    sent = [*attestations, *(sign(built) if sign is not None else ())]
    # (3) the preflight: what the registry would certainly refuse is refused here, unsent.
    checked = None
    if preflight:
        from modelward.client.preflight import check_before_upload

        checked = check_before_upload(
            repo, info, built, root, sent, own_trust=own_trust, exclude=exclude
        )
        if checked.refused:
            raise PreflightRefused(repo, checked.refused, unsigned=checked.unsigned)
    # (4) blobs: the config plus each distinct layer, HEAD first, in parallel.
    sources: dict[str, BlobSource] = {
        manifest.config.digest: BlobSource(
            digest=manifest.config.digest,
            size=len(built.config_bytes),
            data=built.config_bytes,
            repository=repo,
        ),
    }
    by_path = {f.path: f for f in built.files}
    for layer in manifest.layers:
        if layer.digest not in sources:
            sources[layer.digest] = BlobSource(
                digest=layer.digest,
                size=layer.size,
                path=Path(by_path[layer.path].abspath),
                repository=repo,
            )
    blobs = list(sources.values())
    total = sum(b.size for b in blobs)
    if on_total is not None:
        on_total(total)
    uploaded = client.blobs.upload_many(blobs, progress)
    # (5) the manifest and attestations, checked by the server before it records anything.
    answer = client.put_bundle(repo, manifest.digest, manifest.raw, sent)
    # (6) the alias, by compare-and-swap on the version just read.
    moved = (
        client.set_alias(repo, alias, manifest.digest, reason=reason, propose=propose_alias)
        if alias
        else None
    )
    return PushResult(
        digest=manifest.digest,
        decision=answer.get("decision"),
        alias=moved,
        uploaded=sum(uploaded),
        skipped=len(uploaded) - sum(uploaded),
        total_bytes=total,
        ignored=tuple(answer.get("ignored_attestations") or ()),
        preflight=checked,
    )


def unsafe_fetch_bundle(
    client: BundleEndpoints, ref: Reference, dest: Path, *, progress: Progress | None = None
) -> UnsafeFetchResult:
    """Fetch a bundle's manifest and layers into a new directory ``dest`` (atomically),
    checking digests and sizes only: NO signature, NO policy, NO scan.

    ``RegistryClient.unsafe_fetch`` (``client`` is the instance); warns with
    ``UnsafeFetchWarning`` on every call. Every blob is checked against its digest before it
    is placed; layer paths are checked against the tree rules. Raises ``BlobIntegrityError``,
    ``ResponseTooLarge``, ``APIError``, ``TransportError``, ``ManifestError``,
    ``ClientConfigError``.
    """
    warnings.warn(
        f"unsafe_fetch({ref.repo}): the bundle is NOT verified (digests only, no signature or "
        "policy check); use `modelward pull` for a bundle you mean to load",
        UnsafeFetchWarning,
        stacklevel=2,
    )
    from modelward.attest.manifest import parse_manifest
    from modelward.attest.tree import check_relpath

    # (1) resolve and fetch the exact manifest bytes, checked against the digest.
    digest = client.resolve(ref)
    raw = client.get_manifest(ref.repo, digest)
    manifest = parse_manifest(raw)
    if dest.exists():
        raise ClientConfigError(f"{dest} already exists; pull writes a new directory")
    staging = dest.with_name(f".{dest.name}.pulling")
    staging.mkdir(parents=True, exist_ok=True)
    # (2) every layer: path checked, bytes streamed and verified, then placed.
    for layer in manifest.layers:
        violation = check_relpath(layer.path)
        if violation is not None:
            shutil.rmtree(staging, ignore_errors=True)
            raise ClientConfigError(f"manifest layer {layer.path!r}: {violation.reason}")
        target = staging / layer.path
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_blob(layer.digest, target, size=layer.size, progress=progress)
    meta = staging / ".modelward"
    meta.mkdir(exist_ok=True)
    (meta / "manifest.json").write_bytes(raw)
    # (3) the whole tree appears at once.
    staging.replace(dest)
    return UnsafeFetchResult(
        digest=digest,
        manifest=raw,
        root=dest,
        files=tuple(layer.path for layer in manifest.layers),
    )
