"""Streaming, parallel SHA-256 (attest/digest.py) against hashlib on real files."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from modelward.attest.digest import HashOptions, hash_files, parse_digest, sha256_stream
from modelward.attest.errors import BundleError, TreeRuleError
from modelward.attest.tree import BundleFile, list_bundle_files


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tree(root: Path, sizes: dict[str, int]) -> dict[str, bytes]:
    contents = {}
    for i, (name, size) in enumerate(sizes.items()):
        data = (bytes([i + 1]) * 97 + os.urandom(31)) * (size // 128 + 1)
        contents[name] = data[:size]
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(contents[name])
    return contents


SIZES = {"empty.txt": 0, "one.json": 1, "a/exact.bin": 4096, "a/b/odd.bin": 4097,
         "big.safetensors": 300_000, "mid.model": 65_537}  # fmt: skip


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_hash_files_matches_hashlib(tmp_path: Path, workers: int) -> None:
    contents = _tree(tmp_path, SIZES)
    result = hash_files(list_bundle_files(tmp_path), HashOptions(workers=workers, buffer_size=4096))
    assert result == {name: _sha(data) for name, data in contents.items()}


def test_progress_reports_every_byte_once(tmp_path: Path) -> None:
    _tree(tmp_path, SIZES)
    seen: list[int] = []
    lock = threading.Lock()

    def progress(n: int) -> None:
        with lock:
            seen.append(n)

    hash_files(list_bundle_files(tmp_path), HashOptions(workers=3, buffer_size=4096), progress)
    assert sum(seen) == sum(SIZES.values())
    assert max(seen) <= 4096


def test_memory_is_bounded_by_workers_times_buffer(tmp_path: Path) -> None:
    big = tmp_path / "big.safetensors"
    with big.open("wb") as stream:
        for _ in range(32):
            stream.write(os.urandom(2**20))
    files = list_bundle_files(tmp_path)
    tracemalloc.start()
    try:
        hash_files(files, HashOptions(workers=2, buffer_size=64 * 1024))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20, f"hashing a 32 MiB file peaked at {peak} bytes"


def test_empty_file_list() -> None:
    assert hash_files([]) == {}


def test_file_that_grew_after_listing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"a" * 10_000)
    files = list_bundle_files(tmp_path)
    path.write_bytes(b"a" * 20_000)
    with pytest.raises(BundleError, match=r"w\.bin: file changed while it was being hashed"):
        hash_files(files, HashOptions(workers=1, buffer_size=4096))


def test_file_that_shrank_after_listing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"a" * 10_000)
    files = list_bundle_files(tmp_path)
    path.write_bytes(b"a" * 9_999)
    with pytest.raises(BundleError, match="changed"):
        hash_files(files)


def test_file_swapped_for_symlink_after_listing_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"x" * 100)
    files = list_bundle_files(tmp_path)
    path.unlink()
    path.symlink_to("/etc/passwd")
    with pytest.raises(TreeRuleError) as info:
        hash_files(files)
    assert info.value.violations[0].path == "w.bin"
    assert info.value.violations[0].rule == "tree.unreadable"


@pytest.mark.timeout(20)
def test_file_swapped_for_fifo_after_listing_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"x")
    files = list_bundle_files(tmp_path)
    path.unlink()
    os.mkfifo(path)  # no writer: a blocking open would wait forever
    with pytest.raises(TreeRuleError) as info:
        hash_files(files)
    assert info.value.violations[0].rule == "tree.special"


def test_missing_file_fails_with_the_first_path_in_order(tmp_path: Path) -> None:
    files = [BundleFile(name, tmp_path / name, 1) for name in ("b", "a", "c")]
    (tmp_path / "c").write_bytes(b"c")
    with pytest.raises(TreeRuleError) as info:
        hash_files(files, HashOptions(workers=3))
    assert info.value.violations[0].path == "a"


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 100_000])
def test_sha256_stream_matches_hashlib(size: int) -> None:
    data = os.urandom(size)
    assert sha256_stream(io.BytesIO(data), buffer_size=4096) == (_sha(data), size)


def test_sha256_stream_never_reads_past_limit() -> None:
    data = os.urandom(10_000)
    stream = io.BytesIO(data)
    assert sha256_stream(stream, buffer_size=4096, limit=5000) == (_sha(data[:5000]), 5000)
    assert stream.tell() == 5000
    assert sha256_stream(io.BytesIO(data), limit=20_000) == (_sha(data), 10_000)
    assert sha256_stream(io.BytesIO(data), limit=0) == (_sha(b""), 0)


def test_sha256_stream_without_readinto() -> None:
    class ReadOnly:
        def __init__(self, data: bytes) -> None:
            self._inner = io.BytesIO(data)

        def read(self, n: int = -1) -> bytes:
            return self._inner.read(min(n, 1000))

    data = os.urandom(12_345)
    assert sha256_stream(ReadOnly(data), buffer_size=4096) == (_sha(data), 12_345)  # type: ignore[arg-type]


def test_sha256_stream_rejects_misuse() -> None:
    with pytest.raises(ValueError, match="limit"):
        sha256_stream(io.BytesIO(b""), limit=-1)
    with pytest.raises(ValueError, match="buffer_size"):
        sha256_stream(io.BytesIO(b""), buffer_size=10)


@pytest.mark.parametrize(("workers", "buffer_size"), [(0, 4096), (1, 100), (-1, 2**20)])
def test_hash_options_reject_misuse(workers: int, buffer_size: int) -> None:
    with pytest.raises(ValueError, match="HashOptions"):
        HashOptions(workers=workers, buffer_size=buffer_size)


def test_hash_options_default_to_all_cores() -> None:
    assert HashOptions().workers == (os.cpu_count() or 1)
    assert HashOptions().buffer_size == 8 * 2**20


def test_parse_digest_accepts_lowercase_sha256() -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    assert parse_digest(digest) == digest


@pytest.mark.parametrize(
    "text",
    ["", "sha256:", "sha256:" + "A" * 64, "sha256:" + "a" * 63, "sha256:" + "a" * 65,
     "sha256:" + "a" * 64 + "\n", "SHA256:" + "a" * 64, "sha512:" + "a" * 128, "a" * 64,
     " sha256:" + "a" * 64, "sha256:" + "g" * 64],
)  # fmt: skip
def test_parse_digest_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="not a sha256 digest"):
        parse_digest(text)


def test_public_surface_is_pinned() -> None:
    import modelward.attest.digest

    assert sorted(modelward.attest.digest.__all__) == [
        "DEFAULT_BUFFER_SIZE", "HashOptions", "HashedBytes", "ProgressCallback", "hash_files",
        "parse_digest", "sha256_stream",
    ]  # fmt: skip
