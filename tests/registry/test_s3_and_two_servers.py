"""Two ``serve`` processes on one PostgreSQL database and one S3 (moto) bucket: one registry."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelward.client.api import ConflictError, RegistryClient
from modelward.client.config import parse_reference
from modelward.client.errors import UnsafeFetchWarning
from tests.registry.conftest import (
    PgCluster,
    Registry,
    S3Endpoint,
    Server,
    make_bundle_dir,
    new_publisher,
    push_new,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair(
    pg_cluster: PgCluster, s3_endpoint: S3Endpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Registry, Registry]]:
    base = tmp_path_factory.mktemp("pair")
    database_url = pg_cluster.create_database()
    token = secrets.token_urlsafe(32)
    servers = []
    for i in (1, 2):
        data = base / f"data{i}"
        data.mkdir()
        server = Server(
            data_dir=data,
            admin_token=token,
            database_url=database_url,
            blob_store=f"s3://{s3_endpoint.bucket}/reg",
            # replicas share the TUF online keys, as they share database and bucket
            extra_env={**s3_endpoint.env(), "MODELWARD_TUF_KEYS_DIR": str(base / "tuf-keys")},
        )
        server.start()
        servers.append(server)
    regs = tuple(
        Registry(f"s3-{i}", s, RegistryClient(s.url, token)) for i, s in enumerate(servers)
    )
    a, b = regs
    try:
        yield a, b
    finally:
        for reg in regs:
            reg.close()
            reg.server.stop()


def s3_kwargs(ep: S3Endpoint) -> dict[str, str]:
    return {
        "endpoint_url": ep.url,
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }


def built_layers(digest: str, client: RegistryClient, repo: str) -> list[tuple[str, str]]:
    import json

    manifest = json.loads(client.get_manifest(repo, digest))
    return [
        (la["annotations"]["org.cncf.model.filepath"], la["digest"]) for la in manifest["layers"]
    ]


def test_push_via_one_pull_via_the_other(
    pair: tuple[Registry, Registry], s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    a, b = pair
    pub = new_publisher(a)
    repo = a.repo(pub)
    root = make_bundle_dir(tmp_path / "bundle", big=2**20)
    opts = {"chunk_threshold": 256 * 1024, "chunk_size": 256 * 1024}
    result = a.client(pub.actor.token, **opts).push(root, repo, sign=pub.sign, alias="dev")
    via_b = b.client(pub.actor.token)
    assert via_b.get_alias(repo, "dev")["digest"] == result.digest
    with pytest.warns(UnsafeFetchWarning):
        pulled = via_b.unsafe_fetch(parse_reference(f"{repo}@dev"), tmp_path / "pulled")
    for name in ("config.json", "model.safetensors", "big.safetensors"):
        assert (pulled.root / name).read_bytes() == (root / name).read_bytes()
    # the blobs live in the bucket, not on either server's disk
    import boto3

    s3 = boto3.client("s3", **s3_kwargs(s3_endpoint))
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_endpoint.bucket).get("Contents", [])]
    big = next(la for la in built_layers(result.digest, via_b, repo) if la[0] == "big.safetensors")
    assert any(big[1].split(":")[1] in k for k in keys), keys[:10]
    # blobs already in the bucket are not sent again through the other server
    again = b.client(pub.actor.token).push(root, repo, sign=pub.sign)
    assert again.uploaded == 0


def test_upload_session_spans_both_servers(pair: tuple[Registry, Registry], tmp_path: Path) -> None:
    import hashlib
    import os

    a, b = pair
    pub = new_publisher(a)
    data = os.urandom(600_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    ca, cb = a.client(pub.actor.token), b.client(pub.actor.token)
    repo = a.repo(pub)
    body = {"digest": digest, "size": len(data), "repository": repo}
    session = ca._request("POST", "/v1/uploads", json_body=body)
    upload_id = session.json()["id"]
    ca._request(
        "PATCH", f"/v1/uploads/{upload_id}", content=data[:300_000], headers={"Upload-Offset": "0"}
    )
    assert cb._request("GET", f"/v1/uploads/{upload_id}").json()["offset"] == 300_000
    cb._request(
        "PATCH",
        f"/v1/uploads/{upload_id}",
        content=data[300_000:],
        headers={"Upload-Offset": "300000"},
    )
    cb._request("POST", f"/v1/uploads/{upload_id}/commit")
    assert ca.blob_size(digest) == len(data)
    out = tmp_path / "blob"
    ca.download_blob(digest, out, size=len(data))
    assert out.read_bytes() == data


def test_cas_across_both_servers(pair: tuple[Registry, Registry], tmp_path: Path) -> None:
    a, b = pair
    pub = new_publisher(a)
    repo = a.repo(pub)
    digests = [push_new(pub, repo, tmp_path) for _ in range(2)]
    clients = [(a if i % 2 else b).client(pub.actor.token) for i in range(16)]
    barrier = threading.Barrier(len(clients))
    wins: list[int] = []
    conflicts: list[ConflictError] = []
    lock = threading.Lock()

    def writer(i: int) -> None:
        barrier.wait(timeout=60)
        try:
            res = clients[i].set_alias(repo, "race", digests[i % 2], expected_version=0)
        except ConflictError as exc:
            with lock:
                conflicts.append(exc)
        else:
            with lock:
                wins.append(int(res["version"]))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert wins == [1]
    assert len(conflicts) == len(clients) - 1
    history_a = a.admin.alias_history(repo, "race")
    history_b = b.admin.alias_history(repo, "race")
    assert history_a == history_b
    assert len(history_a) == 1
    audit = a.cli("audit", "verify")
    assert audit.returncode == 0, audit.stderr


def test_both_replicas_serve_the_same_signed_metadata(
    pair: tuple[Registry, Registry], tmp_path: Path
) -> None:
    """A move signed through one replica is what a worker resolves through the other."""
    from modelward.attest.keys import save_private_key
    from modelward.loader.tuf_resolve import resolve_alias

    a, b = pair
    pub = new_publisher(a)
    repo = a.repo(pub)
    digest = (
        a.client(pub.actor.token).push(make_bundle_dir(tmp_path / "b"), repo, sign=pub.sign).digest
    )
    key = tmp_path / "pub.key"
    save_private_key(pub.key, key)
    moved = a.cli("alias", "set", f"{repo}@dev", digest, "--key", str(key), token=pub.actor.token)
    assert moved.returncode == 0, moved.stderr
    worker = b.client(b.actor("reader").token)
    assert worker.tuf_file("timestamp.json") == a.admin.tuf_file("timestamp.json")
    resolved = resolve_alias(
        repo,
        "dev",
        metadata_url=worker.tuf_url,
        cache_dir=tmp_path / "worker",
        trust_root=a.admin.tuf_file("1.root.json"),
        fetcher=worker.tuf_fetcher(),
    )
    assert resolved.digest == digest
