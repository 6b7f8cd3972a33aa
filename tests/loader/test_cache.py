"""The worker's cache: which blobs count as present, and what ``drop_corrupt`` removes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from modelward.loader.cache import BlobRequest, Cache


def cached(cache: Cache, data: bytes, *, stored: bytes | None = None) -> BlobRequest:
    """Put ``stored`` (default ``data``) in the cache under the digest of ``data``."""
    blob = BlobRequest("sha256:" + hashlib.sha256(data).hexdigest(), len(data))
    path = cache.blob_path(blob.digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if stored is None else stored)
    path.chmod(0o444)
    return blob


def test_drop_corrupt_removes_flipped_and_wrong_size_blobs_only(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    intact = cached(cache, b"intact weights" * 1000)
    flipped = cached(cache, b"flipped weights", stored=b"flipped weightS")
    short = cached(cache, b"truncated weights", stored=b"truncated")
    absent = BlobRequest("sha256:" + hashlib.sha256(b"absent").hexdigest(), 6)
    blobs = [intact, flipped, short, absent, intact]
    # sizes alone: the flipped blob passes as present, the short one does not
    assert cache.present(blobs) == [intact, flipped]
    assert cache.missing(blobs) == [short, absent]
    counted: list[int] = []
    removed = cache.drop_corrupt(blobs, progress=counted.append)
    assert removed == sorted([flipped.digest, short.digest])
    assert sum(counted) == intact.size + flipped.size  # every present byte re-hashed once
    assert cache.blob_path(intact.digest).read_bytes() == b"intact weights" * 1000
    assert not cache.blob_path(flipped.digest).exists()
    assert not cache.blob_path(short.digest).exists()
    assert cache.missing(blobs) == [flipped, short, absent]
    assert cache.drop_corrupt(blobs) == []


def test_download_workers_never_exceed_the_request_the_blobs_or_the_cpus() -> None:
    import os

    from modelward.loader.cache import download_workers

    cpus = len(os.sched_getaffinity(0))
    assert download_workers(4, 1) == 1
    assert download_workers(1, 10) == 1
    assert download_workers(64, 64) == min(64, cpus)
    assert download_workers(0, 3) == 1  # never zero: something must download
