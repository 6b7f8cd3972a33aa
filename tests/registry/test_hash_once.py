"""Bytes are hashed once per request and the digest travels with them (docs/STYLE, issue 25).

Every SHA-256 taken over the exact manifest bytes is counted, whatever function takes it:
``hashlib.sha256`` is wrapped in this process (the client and the loader) and, through a
``sitecustomize`` on the server's ``PYTHONPATH``, in the ``modelward serve`` process, which
appends each one-shot digest to a log file. A push hashes the manifest once on each side
(the client when it builds it, the server when it receives it), through ``/v1`` and through
``/v2``; a pull hashes it once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.oci.conftest import bearer_for
from tests.registry.conftest import (
    Registry,
    make_bundle_dir,
    new_publisher,
    start_registry,
    unique,
)

_SITECUSTOMIZE = '''
"""Test hook: log the digest of every one-shot hashlib.sha256(data) to HASH_LOG."""
import hashlib
import os

_LOG = os.environ["MODELWARD_TEST_HASH_LOG"]
_real = hashlib.sha256


def _counted(data=b"", **kw):
    h = _real(data, **kw)
    if data:
        with open(_LOG, "a", encoding="ascii") as out:
            out.write("sha256:" + h.copy().hexdigest() + "\\n")
    return h


hashlib.sha256 = _counted
'''


@pytest.fixture
def counted_registry(tmp_path: Path) -> Iterator[tuple[Registry, Path]]:
    """A private SQLite registry whose process logs every one-shot sha256 it takes."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    log = tmp_path / "server-hashes.log"
    log.touch()
    env = {"PYTHONPATH": str(hook), "MODELWARD_TEST_HASH_LOG": str(log)}
    reg = start_registry("sqlite", tmp_path, None, extra_env=env)
    try:
        yield reg, log
    finally:
        reg.close()
        reg.server.stop()


@pytest.fixture
def local_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The digest of every one-shot ``hashlib.sha256(data)`` taken in this process."""
    seen: list[str] = []
    real: Callable[..., Any] = hashlib.sha256

    def counted(data: bytes = b"", **kw: Any) -> Any:
        h = real(data, **kw)
        if data:
            seen.append("sha256:" + h.copy().hexdigest())
        return h

    monkeypatch.setattr(hashlib, "sha256", counted)
    return seen


def _server_count(log: Path, digest: str) -> int:
    return log.read_text().split().count(digest)


def test_push_and_pull_hash_the_manifest_once_per_request(
    counted_registry: tuple[Registry, Path], local_hashes: list[str], tmp_path: Path
) -> None:
    from modelward.attest.keys import public_key_pem
    from modelward.attest.policy import TrustFlags
    from modelward.loader.cache import Cache
    from modelward.loader.pull import pull_bundle

    reg, log = counted_registry
    pub = new_publisher(reg)
    repo = reg.repo(pub.actor)
    root = make_bundle_dir(tmp_path / unique("b"))

    # /v1 push: the client hashes what it built, the server what it received.
    digest = pub.actor.client.push(root, repo, sign=pub.sign).digest
    assert local_hashes.count(digest) == 1, "client push"
    assert _server_count(log, digest) == 1, "server PUT /v1 bundle"

    # pull: the client hashes the answer once; the loader and the verifier reuse it.
    local_hashes.clear()
    pem = tmp_path / "publisher.pub.pem"
    pem.write_bytes(public_key_pem(pub.key.public_key()))
    pulled = pull_bundle(
        pub.actor.client,
        f"{repo}@{digest}",
        Cache(tmp_path / "cache"),
        TrustFlags(public_keys=(pem,)),
    )
    assert pulled.digest == digest
    assert local_hashes.count(digest) == 1, "pull"

    # /v2 push of the same manifest into another repository: hashed once by the server.
    other = reg.repo(pub.actor)
    before = _server_count(log, digest)
    bearer = bearer_for(reg, pub.name, pub.actor.token, f"repository:{other}:pull,push")
    put = httpx.put(
        f"{reg.url}/v2/{other}/manifests/{digest}",
        content=pulled.manifest.raw,
        headers={
            "Authorization": f"Bearer {bearer}",
            "Content-Type": "application/vnd.oci.image.manifest.v1+json",
        },
        timeout=60,
    )
    assert put.status_code == 201, put.text
    assert _server_count(log, digest) - before == 1, "server PUT /v2 manifest"


def test_a_manifest_that_does_not_hash_to_the_url_is_still_refused(
    counted_registry: tuple[Registry, Path], tmp_path: Path
) -> None:
    from modelward.attest.manifest import build_bundle
    from modelward.client.errors import APIError

    reg, _ = counted_registry
    pub = new_publisher(reg)
    repo = reg.repo(pub.actor)
    built = build_bundle(make_bundle_dir(tmp_path / unique("b")))
    wrong = "sha256:" + "0" * 64
    with pytest.raises(APIError) as caught:
        pub.actor.client.put_bundle(repo, wrong, built.manifest.raw)
    assert (caught.value.status, caught.value.code) == (400, "digest_mismatch")
