"""The worker's content-addressed cache (docs/loader.md#cache).

Layout under the cache root (``$XDG_CACHE_HOME/modelward``, else ``~/.cache/modelward``)::

    blobs/sha256/<hex>          verified blob bytes, read-only (downloads resume from
                                blobs/sha256/.<hex>.partial); ``drop_corrupt`` re-hashes
                                them for ``pull --repair``
    bundles/sha256/<hex>/       a materialized bundle (read-only; files hardlinked to blobs)
        .modelward/manifest.json  the exact manifest bytes that hash to the digest

Blobs are fetched in parallel through ``registry.client.RegistryClient.download_blob``,
which streams, hashes while streaming, resumes with HTTP Range and renames a blob into
place only after its digest and size check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attest.digest import HashOptions, hash_files, parse_digest
from attest.tree import BundleFile

__all__ = ["BlobRequest", "Cache", "default_cache_dir"]

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
        seen: dict[str, BlobRequest] = {}
        for blob in blobs:
            if blob.digest not in seen and not self.has_blob(blob):
                seen[blob.digest] = blob
        return list(seen.values())

    def drop_corrupt(self, blobs: Sequence[BlobRequest], options: HashOptions = HashOptions(),
                     progress: Progress | None = None) -> list[str]:
        """Re-hash the cached copies of ``blobs`` (in parallel); remove every one whose size
        or bytes do not match its digest, so the next ``fetch`` downloads it again.

        Returns the removed digests, sorted. Blobs not in the cache are left to ``fetch``.
        """
        wanted = {blob.digest: blob.size for blob in blobs}
        cached: dict[str, BundleFile] = {}
        for digest in wanted:
            path = self.blob_path(digest)
            if path.is_file():
                cached[digest] = BundleFile(digest, path, path.stat().st_size)
        bad = [d for d, f in cached.items() if f.size != wanted[d]]
        actual = hash_files([f for d, f in cached.items() if d not in bad], options, progress)
        bad += [digest for digest, got in actual.items() if got != digest]
        for digest in bad:
            self.blob_path(digest).unlink(missing_ok=True)
        return sorted(bad)

    def fetch(self, client: Any, blobs: Sequence[BlobRequest], *, workers: int = 4,
              progress: Progress | None = None) -> None:
        """Download every missing blob in parallel (verified, resumable), read-only.

        Raises what the client raises (``BlobIntegrityError`` for a digest or size mismatch,
        ``TransportError``, ``APIError``); blobs already fetched stay in the cache.
        """
        todo = self.missing(blobs)
        if not todo:
            return
        (self.root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)

        def one(blob: BlobRequest) -> None:
            dest = self.blob_path(blob.digest)
            client.download_blob(blob.digest, dest, size=blob.size, progress=progress)
            dest.chmod(0o444)

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for future in [pool.submit(one, blob) for blob in todo]:
                future.result()
