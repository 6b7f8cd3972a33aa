"""kill -9 the server during a blob upload and during a bundle commit, with real processes.

After the restart nothing partial is visible, the audit chain verifies (through the API and
straight from the database), and the client's retry completes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.audit.chain import verify_chain
from modelward.client.api import NotFoundError, RegistryClientError, TransportError
from modelward.client.audit import events_from_api
from modelward.client.blobs import BlobSource
from modelward.client.config import parse_reference
from modelward.client.errors import UnsafeFetchWarning
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    start_registry,
)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def crashable(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """A registry of this module's own: its server is killed and restarted."""
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    reg = start_registry(request.param, tmp_path_factory.mktemp(f"crash-{request.param}"), pg)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


def _audit_verifies(reg: Registry, *, cli: bool = False) -> None:
    assert verify_chain(events_from_api(reg.admin)) > 0
    if cli:
        via_db = reg.cli("audit", "verify", "--database-url", reg.database_url)
        assert via_db.returncode == 0, via_db.stdout + via_db.stderr


@pytest.mark.parametrize("crashable", ["sqlite"], indirect=True)  # storage-side: one DB
def test_kill9_during_chunked_blob_upload(crashable: Registry, tmp_path: Path) -> None:
    from modelward.attest.manifest import build_bundle

    reg = crashable
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    root = make_bundle_dir(tmp_path / "bundle", big=3 * 2**20)
    built = build_bundle(root)
    big = next(layer for layer in built.manifest.layers if layer.path == "big.safetensors")
    opts: dict[str, Any] = {
        "chunk_threshold": 2**20,
        "chunk_size": 256 * 1024,
        "read_size": 64 * 1024,
        "retry_backoff": 0.05,
        "state_dir": tmp_path / "state",
        "workers": 1,
    }
    client = reg.client(pub.actor.token, **opts)
    sent = [0]

    def kill_midway(n: int) -> None:
        sent[0] += n
        if sent[0] > 2 * 2**20 and reg.server.proc is not None and reg.server.proc.poll() is None:
            reg.server.kill9()  # a chunk is in flight right now

    with pytest.raises(TransportError):
        client.push(root, repo, sign=pub.sign, progress=kill_midway)
    client.close()
    assert list((tmp_path / "state" / "uploads").glob("*.json")), "session id not persisted"
    reg.server.start()
    # nothing partial: the incomplete blob is not there, the bundle is not there
    assert reg.admin.blob_size(big.digest) is None
    with pytest.raises(NotFoundError):
        reg.admin.get_bundle(repo, built.manifest.digest)
    _audit_verifies(reg)
    # the retry resumes the session (not from zero) and completes
    resumed: list[int] = []
    retry = reg.client(pub.actor.token, **opts)
    result = retry.push(root, repo, sign=pub.sign, progress=resumed.append, alias="dev")
    assert result.digest == built.manifest.digest
    assert reg.admin.blob_size(big.digest) == big.size
    with pytest.warns(UnsafeFetchWarning):
        pulled = retry.unsafe_fetch(parse_reference(f"{repo}@dev"), tmp_path / "pulled")
    assert (pulled.root / "big.safetensors").read_bytes() == (root / "big.safetensors").read_bytes()
    _audit_verifies(reg, cli=True)


def _stage(pub: Publisher, repo: str, root: Path) -> Any:
    from modelward.attest.manifest import build_bundle

    built = build_bundle(root)
    by_path = {f.path: f for f in built.files}
    blobs = [
        BlobSource(
            built.manifest.config.digest,
            len(built.config_bytes),
            data=built.config_bytes,
            repository=repo,
        )
    ]
    blobs += [
        BlobSource(
            layer.digest, layer.size, path=Path(by_path[layer.path].abspath), repository=repo
        )
        for layer in built.manifest.layers
    ]
    pub.actor.client.blobs.upload_many(blobs)
    return built


@pytest.mark.parametrize("delay", [0.0, 0.03])
def test_kill9_during_bundle_commit(crashable: Registry, tmp_path: Path, delay: float) -> None:
    reg = crashable
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    root = make_bundle_dir(tmp_path / "bundle")
    for i in range(20):  # more layers: more scanning and rows inside the commit
        (root / f"part{i}.json").write_text(f'{{"i": {i}}}')
    built = _stage(pub, repo, root)
    atts = pub.sign(built)
    outcome: list[object] = []

    def commit() -> None:
        try:
            outcome.append(
                pub.actor.client.put_bundle(repo, built.manifest.digest, built.manifest.raw, atts)
            )
        except RegistryClientError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=commit)
    worker.start()
    time.sleep(delay)
    reg.server.kill9()
    worker.join(60)
    reg.server.start()
    # (1) the bundle is either absent or complete: exact manifest bytes and its attestation
    try:
        record = reg.admin.get_bundle(repo, built.manifest.digest)
    except NotFoundError:
        record = None
    if record is not None:
        assert reg.admin.get_manifest(repo, built.manifest.digest) == built.manifest.raw
        assert len(reg.admin.list_attestations(repo, built.manifest.digest)) == 1
    # (2) the chain verifies
    _audit_verifies(reg)
    # (3) the client's retry completes (idempotent for identical bytes)
    answer = pub.actor.client.put_bundle(repo, built.manifest.digest, built.manifest.raw, atts)
    assert answer["digest"] == built.manifest.digest
    assert reg.admin.get_manifest(repo, built.manifest.digest) == built.manifest.raw
    _audit_verifies(reg, cli=delay == 0.0)


@pytest.mark.parametrize("crashable", ["sqlite"], indirect=True)  # storage-side: one DB
def test_kill9_with_half_sent_bundle_body(crashable: Registry, tmp_path: Path) -> None:
    import base64
    import json
    import socket
    from urllib.parse import urlsplit

    reg = crashable
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    built = _stage(pub, repo, make_bundle_dir(tmp_path / "bundle"))
    body = json.dumps(
        {
            "manifest": base64.b64encode(built.manifest.raw).decode(),
            "attestations": [base64.b64encode(a).decode() for a in pub.sign(built)],
        }
    ).encode()
    parts = urlsplit(reg.url)
    org, name = repo.split("/")
    head = (
        f"PUT /v1/repos/{org}/{name}/bundles/{built.manifest.digest} HTTP/1.1\r\n"
        f"Host: x\r\nAuthorization: Bearer {pub.actor.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((parts.hostname or "", parts.port or 0), timeout=10) as sock:
        sock.sendall(head.encode() + body[: len(body) // 2])
        time.sleep(0.2)
        reg.server.kill9()
    reg.server.start()
    with pytest.raises(NotFoundError):
        reg.admin.get_bundle(repo, built.manifest.digest)
    _audit_verifies(reg)
    assert pub.actor.client.put_bundle(
        repo, built.manifest.digest, built.manifest.raw, pub.sign(built)
    )["digest"]


@pytest.mark.postgres
def test_kill9_of_the_supervisor_alone_leaves_no_worker_serving(
    pg_cluster: Any, tmp_path: Path
) -> None:
    """``serve --workers 2``: SIGKILL to the supervisor only (what a crashed or OOM-killed
    supervisor looks like) must not leave its workers answering on the port."""
    import os
    import signal

    import httpx

    reg = start_registry("postgres", tmp_path, pg_cluster, extra_env={"MODELWARD_WORKERS": "2"})
    try:
        assert reg.server.proc is not None
        supervisor = reg.server.proc.pid
        assert httpx.get(f"{reg.url}/healthz", timeout=5).status_code == 200
        os.kill(supervisor, signal.SIGKILL)
        reg.server.proc.wait(10)
        deadline = time.monotonic() + 20
        answering = True
        while answering and time.monotonic() < deadline:
            try:
                httpx.get(f"{reg.url}/healthz", timeout=1)
            except httpx.TransportError:
                answering = False
            else:
                time.sleep(0.2)
        assert not answering, "the killed supervisor's workers still answer on its port"
        reg.server.start()  # the port is free again: a restart binds it
        assert httpx.get(f"{reg.url}/healthz", timeout=5).status_code == 200
    finally:
        reg.close()
        reg.server.stop()
