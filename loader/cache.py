"""The worker's content-addressed cache (docs/loader.md#cache).

Layout under the cache root (``$XDG_CACHE_HOME/modelward``, else ``~/.cache/modelward``)::

    blobs/sha256/<hex>          verified blob bytes, read-only (downloads resume from
                                blobs/sha256/.<hex>.partial); ``drop_corrupt`` re-hashes
                                them for ``pull --repair``
    bundles/sha256/<hex>/       a materialized bundle (read-only; files hardlinked to blobs)
        .modelward/manifest.json  the exact manifest bytes that hash to the digest

Blobs are fetched in parallel through ``RegistrySource.download_blob`` (``loader.source``;
``client.api.RegistryClient`` in production), which streams, hashes while streaming,
resumes with HTTP Range, never writes more than the size the manifest states, and renames a
blob into place only after its digest and size check.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from modelward.attest.digest import HashOptions, hash_files, parse_digest
from modelward.attest.tree import BundleFile
from modelward.loader.source import RegistrySource

__all__ = ["BlobRequest", "Cache", "default_cache_dir", "download_workers"]

Progress = Callable[[int], None]


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/modelward``, else ``~/.cache/modelward``."""
    base = env.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "modelward"


@dataclass(frozen=True)
class BlobRequest:
    digest: str
    size: int


class Cache:
    """Paths and blob fetching for one cache root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _hex(self, digest: str) -> str:
        return parse_digest(digest).removeprefix("sha256:")

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / self._hex(digest)

    def bundle_dir(self, digest: str) -> Path:
        return self.root / "bundles" / "sha256" / self._hex(digest)

    def staging_root(self) -> Path:
        path = self.root / "bundles" / "sha256"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def has_blob(self, blob: BlobRequest) -> bool:
        path = self.blob_path(blob.digest)
        return path.is_file() and path.stat().st_size == blob.size

    def missing(self, blobs: Sequence[BlobRequest]) -> list[BlobRequest]:
        """Distinct blobs not yet in the cache (by digest and size)."""
        return [blob for blob in _distinct(blobs) if not self.has_blob(blob)]

    def present(self, blobs: Sequence[BlobRequest]) -> list[BlobRequest]:
        """Distinct blobs in the cache (by digest and size; their bytes are not checked)."""
        return [blob for blob in _distinct(blobs) if self.has_blob(blob)]

    def drop_corrupt(
        self,
        blobs: Sequence[BlobRequest],
        options: HashOptions = HashOptions(),
        progress: Progress | None = None,
    ) -> list[str]:
        """Re-hash the ``present`` blobs (in parallel, ``progress`` counting bytes); remove
        every cached blob whose size or bytes do not match its digest, so the next
        ``fetch`` downloads it again.

        Returns the removed digests, sorted. Blobs not in the cache are left to ``fetch``.
        """
        wrong_size = [
            blob.digest for blob in self.missing(blobs) if self.blob_path(blob.digest).is_file()
        ]
        intact = [
            BundleFile(blob.digest, self.blob_path(blob.digest), blob.size)
            for blob in self.present(blobs)
        ]
        actual = hash_files(intact, options, progress)
        bad = wrong_size + [digest for digest, got in actual.items() if got != digest]
        for digest in bad:
            self.blob_path(digest).unlink(missing_ok=True)
        return sorted(bad)

    def fetch(
        self,
        client: RegistrySource,
        blobs: Sequence[BlobRequest],
        *,
        workers: int = 4,
        progress: Progress | None = None,
    ) -> None:
        """Download every missing blob in parallel (verified, resumable), read-only: the
        largest first, ``download_workers(workers, ...)`` at a time.

        Each download stops at the blob's stated ``size``: a server that sends more (or
        fewer) bytes gets ``BlobIntegrityError`` and nothing of that blob is kept.
        Raises what the client raises (``BlobIntegrityError`` for a digest or size mismatch,
        ``TransportError``, ``APIError``); blobs already fetched stay in the cache.
        """
        # Largest first: the long downloads start at once and the small ones fill the gaps.
        todo = sorted(self.missing(blobs), key=lambda blob: blob.size, reverse=True)
        if not todo:
            return
        (self.root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)

        def one(blob: BlobRequest) -> None:
            dest = self.blob_path(blob.digest)
            client.download_blob(blob.digest, dest, size=blob.size, progress=progress)
            dest.chmod(0o444)

        with ThreadPoolExecutor(max_workers=download_workers(workers, len(todo))) as pool:
            for future in [pool.submit(one, blob) for blob in todo]:
                future.result()


def download_workers(requested: int, blobs: int) -> int:
    """How many blobs ``fetch`` downloads at a time: ``requested``, but never more than the
    blobs to fetch nor the CPUs this process may run on. Each stream hashes and writes on the
    worker's CPU (about one core at loopback or LAN speed); more streams than cores only
    contend for them (docs/performance.md#pull)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(requested, blobs, cpus))


def _distinct(blobs: Sequence[BlobRequest]) -> list[BlobRequest]:
    """The first request for each digest, in order."""
    seen: dict[str, BlobRequest] = {}
    for blob in blobs:
        seen.setdefault(blob.digest, blob)
    return list(seen.values())
