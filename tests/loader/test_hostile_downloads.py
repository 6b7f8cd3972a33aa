"""A hostile registry cannot fill the worker's memory or disk: one test per attack.

Each attack is served over real HTTP by ``HostileRegistry``: a blob longer (or shorter) than
the size its manifest states, a manifest longer than the limit. The download must stop at the
stated size or limit, say which one, and keep nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelward.client.api import (
    MAX_MANIFEST_BYTES,
    BlobIntegrityError,
    RegistryClient,
    ResponseTooLarge,
    TransferOptions,
)
from modelward.loader.cache import BlobRequest, Cache
from tests import forkserver
from tests.loader.hostile_registry import HostileRegistry, Served, serve_dir
from tests.registry.conftest import make_bundle_dir

REPO = "acme/hostile"
TAIL = 2**30  # what the server would send past the real bytes if nobody stopped it
BIG = 256 * 1024
READ = 16 * 1024


@pytest.fixture
def hostile() -> Iterator[HostileRegistry]:
    reg = HostileRegistry()
    reg.start()
    yield reg
    reg.stop()


@pytest.fixture
def served(hostile: HostileRegistry, tmp_path: Path) -> Served:
    """An unsigned bundle with a ``BIG``-byte blob (signatures play no part here)."""
    bundle = serve_dir(make_bundle_dir(tmp_path / "bundle", big=BIG), REPO, lambda built: [])
    hostile.add(bundle)
    return bundle


@pytest.fixture
def client(hostile: HostileRegistry) -> Iterator[RegistryClient]:
    with RegistryClient(
        hostile.url,
        "worker-token",
        timeout=30,
        options=TransferOptions(read_size=READ, max_retries=0),
    ) as c:
        yield c


def biggest(served: Served) -> BlobRequest:
    digest, data = max(served.blobs.items(), key=lambda item: len(item[1]))
    return BlobRequest(digest, len(data))


def server_was_cut_off(hostile: HostileRegistry, limit: int) -> bool:
    """The client hung up: each over-long answer got nowhere near the end of its tail."""
    deadline = time.monotonic() + 10
    while not hostile.sent and time.monotonic() < deadline:  # the server notices the hang-up
        time.sleep(0.05)
    return bool(hostile.sent) and max(hostile.sent) < limit + TAIL // 8


def nothing_kept(cache: Cache, blob: BlobRequest) -> bool:
    blobs = cache.root / "blobs" / "sha256"
    return not cache.blob_path(blob.digest).exists() and not list(blobs.glob(".*.partial"))


@pytest.mark.parametrize("declare_length", [False, True], ids=["streamed", "declared"])
def test_blob_download_longer_than_declared_size_is_cut_off(
    hostile: HostileRegistry,
    served: Served,
    client: RegistryClient,
    tmp_path: Path,
    declare_length: bool,
) -> None:
    hostile.blob_tail = TAIL
    hostile.declare_length = declare_length
    blob = biggest(served)
    cache = Cache(tmp_path / "cache")
    written: list[int] = []
    with pytest.raises(BlobIntegrityError) as info:
        cache.fetch(client, [blob], workers=1, progress=written.append)
    err = info.value
    assert (err.digest, err.expected_size, err.actual) == (blob.digest, blob.size, None)
    assert err.size > blob.size
    assert blob.digest in str(err)
    assert f"more than the {blob.size} bytes" in str(err)
    assert sum(written) <= blob.size  # never a byte past the stated size on disk
    assert nothing_kept(cache, blob)
    if declare_length:
        assert sum(written) == 0  # refused on the declared length, before any write
    assert server_was_cut_off(hostile, blob.size)


def test_resumed_blob_download_longer_than_declared_size_is_cut_off(
    hostile: HostileRegistry, served: Served, client: RegistryClient, tmp_path: Path
) -> None:
    hostile.blob_tail = TAIL
    hostile.declare_length = False
    blob = biggest(served)
    cache = Cache(tmp_path / "cache")
    partial = cache.blob_path(blob.digest).with_name(
        f".{cache.blob_path(blob.digest).name}.partial"
    )
    partial.parent.mkdir(parents=True)
    partial.write_bytes(served.blobs[blob.digest][:4096])
    written: list[int] = []
    with pytest.raises(BlobIntegrityError, match="more than"):
        cache.fetch(client, [blob], workers=1, progress=written.append)
    assert hostile.ranges == ["bytes=4096-"]
    assert 4096 + sum(written) <= blob.size  # the kept part counts towards the limit
    assert nothing_kept(cache, blob)


def test_blob_download_shorter_than_declared_size_is_refused(
    hostile: HostileRegistry, served: Served, client: RegistryClient, tmp_path: Path
) -> None:
    hostile.blob_short_by = 100
    blob = biggest(served)
    cache = Cache(tmp_path / "cache")
    with pytest.raises(BlobIntegrityError) as info:
        cache.fetch(client, [blob], workers=1)
    err = info.value
    assert (err.digest, err.size, err.expected_size) == (blob.digest, blob.size - 100, blob.size)
    assert f"sent only {blob.size - 100} bytes" in str(err)
    assert nothing_kept(cache, blob)


@pytest.mark.parametrize("declare_length", [False, True], ids=["streamed", "declared"])
def test_manifest_download_over_limit_is_cut_off(
    hostile: HostileRegistry, served: Served, client: RegistryClient, declare_length: bool
) -> None:
    limit = len(served.manifest)
    assert client.get_manifest(REPO, served.digest, max_bytes=limit) == served.manifest
    hostile.manifest_tail = TAIL
    hostile.declare_length = declare_length
    with pytest.raises(ResponseTooLarge) as info:
        client.get_manifest(REPO, served.digest, max_bytes=limit)
    err = info.value
    assert err.limit == limit
    for evidence in (REPO, served.digest, f"limit of {limit} bytes"):
        assert evidence in str(err)
    assert server_was_cut_off(hostile, limit)


def _pull(hostile: HostileRegistry, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    from modelward.attest.keys import generate_private_key, public_key_pem

    pem = tmp_path / "publisher.pub.pem"
    pem.write_bytes(public_key_pem(generate_private_key().public_key()))
    env = {**os.environ, "MODELWARD_URL": hostile.url, "MODELWARD_TOKEN": "worker-token"}
    return forkserver.run(
        [
            "pull",
            f"{REPO}@prod",
            "--public-key",
            str(pem),
            "--unsigned-aliases",
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        env,
        timeout=120,
    )


def test_pull_refuses_a_blob_longer_than_its_manifest_says(
    hostile: HostileRegistry, served: Served, tmp_path: Path
) -> None:
    hostile.blob_tail = TAIL
    hostile.declare_length = False
    result = _pull(hostile, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "more than the" in result.stderr
    # every blob came with a tail: none is kept, partial or whole, and nothing materialized
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_pull_refuses_an_endless_manifest(
    hostile: HostileRegistry, served: Served, tmp_path: Path
) -> None:
    hostile.manifest_tail = TAIL
    hostile.declare_length = False
    result = _pull(hostile, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"limit of {MAX_MANIFEST_BYTES} bytes" in result.stderr
    assert served.digest in result.stderr
    assert server_was_cut_off(hostile, MAX_MANIFEST_BYTES)


def test_blob_of_the_stated_size_still_downloads(
    served: Served, client: RegistryClient, tmp_path: Path
) -> None:
    blob = biggest(served)
    cache = Cache(tmp_path / "cache")
    cache.fetch(client, [blob], workers=1)
    data = cache.blob_path(blob.digest).read_bytes()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == blob.digest
