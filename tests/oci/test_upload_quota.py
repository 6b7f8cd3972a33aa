"""A ``/v2`` upload session is charged against its repository's quota as its bytes arrive, and
a refused push leaves nothing behind (docs/oci.md#quarantine-and-quotas).

Before, an OCI session was charged nothing until its closing PUT: 8 MiB of PATCH chunks were
stored against a 1 MiB quota, the refusal came only at the close, and the chunks stayed in the
store until the session expired. Parallel sessions, all with the placeholder digest
``sha256:000…0``, were counted once between them. Each test attacks a real ``modelward
serve`` (SQLite and PostgreSQL) with plain HTTP, as an OCI client would.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.registry.conftest import (
    Registry,
    S3Endpoint,
    make_bundle_dir,
    new_publisher,
    start_registry,
    unique,
)

MIB = 1 << 20
CODE = "repository_quota_exceeded"


def _quota(reg: Registry, repo: str, *args: str) -> dict[str, Any]:
    out = reg.cli("repo", "quota", *args, repo, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


def _usage(reg: Registry, repo: str) -> int:
    return int(_quota(reg, repo, "show")["usage_bytes"])


def _set_quota(reg: Registry, repo: str, size: int) -> None:
    out = reg.cli("repo", "quota", "set", repo, str(size), "--json")
    assert out.returncode == 0, out.stdout + out.stderr


def _client(reg: Registry, token: str) -> httpx.Client:
    return httpx.Client(base_url=reg.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _mark(reg: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in reg.admin.iter_audit())])


def _stored(reg: Registry) -> set[str]:
    """Every object in the registry's file store: blobs and upload parts."""
    root = reg.server.data_dir / "blobs"
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _db_rows(reg: Registry, digest: str, upload_id: str) -> tuple[int, int]:
    """(blob rows for ``digest``, upload session rows for ``upload_id``), read from the
    registry's database itself."""
    engine = sa.create_engine(reg.database_url)
    try:
        with engine.connect() as conn:
            blobs = conn.execute(
                sa.text("SELECT count(*) FROM blobs WHERE digest = :d"), {"d": digest}
            ).scalar_one()
            sessions = conn.execute(
                sa.text("SELECT count(*) FROM upload_sessions WHERE id = :i"), {"i": upload_id}
            ).scalar_one()
    finally:
        engine.dispose()
    return int(blobs), int(sessions)


def _start(client: httpx.Client, repo: str) -> str:
    started = client.post(f"/v2/{repo}/blobs/uploads/")
    assert started.status_code == 202, started.text
    return str(started.headers["Docker-Upload-UUID"])


def _refused_for_quota(answer: httpx.Response, repo: str, quota: int) -> None:
    assert answer.status_code == 413, answer.text
    error = answer.json()["errors"][0]
    assert error["code"] == "DENIED", error
    assert error["detail"]["code"] == CODE, error
    assert error["detail"]["detail"]["repository"] == repo, error
    assert error["detail"]["detail"]["quota_bytes"] == quota, error
    assert repo in error["message"], error


def _aborted(reg: Registry, mark: int, upload_id: str, actor: str) -> None:
    events = list(reg.admin.iter_audit(after=mark))
    aborts = [
        e
        for e in events
        if e["action"] == "upload.abort" and e["details"]["upload_id"] == upload_id
    ]
    assert [e["details"]["reason"] for e in aborts] == [CODE], events
    assert aborts[0]["actor"] == actor
    denied = [
        e
        for e in events
        if e["action"] == "denied" and e["details"]["status"] == 413 and e["actor"] == actor
    ]
    assert denied, events
    assert denied[-1]["details"]["code"] == CODE, events


def _gone(reg: Registry, client: httpx.Client, repo: str, upload_id: str, digest: str) -> None:
    """The session answers 404 and neither it nor a blob is left in the database."""
    status = client.get(f"/v2/{repo}/blobs/uploads/{upload_id}")
    assert status.status_code == 404, status.text
    assert status.json()["errors"][0]["code"] == "BLOB_UPLOAD_UNKNOWN"
    assert _db_rows(reg, digest, upload_id) == (0, 0)
    assert reg.admin.blob_size(digest) is None


def test_patch_chunks_past_quota_are_refused_as_they_arrive(registry: Registry) -> None:
    """The issue's attack: 8 MiB of PATCH chunks against a 1 MiB quota. Each chunk is charged
    before it is stored: the chunks that fit are charged while the session is open, the one
    that passes the quota is refused (413 DENIED), and the session and its stored chunks are
    deleted, audited."""
    pub = new_publisher(registry)
    repo = registry.repo(pub.actor)
    _set_quota(registry, repo, MIB)
    data = secrets.token_bytes(8 * MIB)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    before = _stored(registry)
    mark = _mark(registry)
    with _client(registry, pub.actor.token) as client:
        upload_id = _start(client, repo)
        half = MIB // 2
        for n in range(2):  # two chunks fit, and are charged as they arrive
            chunk = data[n * half : (n + 1) * half]
            answer = client.patch(
                f"/v2/{repo}/blobs/uploads/{upload_id}",
                content=chunk,
                headers={"Content-Range": f"{n * half}-{(n + 1) * half - 1}"},
            )
            assert answer.status_code == 202, answer.text
            assert _usage(registry, repo) == (n + 1) * half
        rest = client.patch(
            f"/v2/{repo}/blobs/uploads/{upload_id}",
            content=data[MIB:],
            headers={"Content-Range": f"{MIB}-{len(data) - 1}"},
        )
        _refused_for_quota(rest, repo, MIB)
        assert rest.json()["errors"][0]["detail"]["detail"]["requested_bytes"] == 7 * MIB
        closed = client.put(
            f"/v2/{repo}/blobs/uploads/{upload_id}", params={"digest": digest}, content=b""
        )
        assert closed.status_code == 404, closed.text
        _gone(registry, client, repo, upload_id, digest)
    assert _stored(registry) == before
    assert _usage(registry, repo) == 0
    _aborted(registry, mark, upload_id, pub.name)


@pytest.mark.sqlite_only
def test_chunked_transfer_past_quota_is_refused_before_it_is_stored(registry: Registry) -> None:
    """A body without Content-Length cannot be refused up front: it is cut where the quota's
    headroom ends and refused there, before that piece is stored (a monolithic POST with
    ``?digest=`` and a chunked body, then a PATCH)."""
    pub = new_publisher(registry)
    repo = registry.repo(pub.actor)
    _set_quota(registry, repo, MIB)
    data = secrets.token_bytes(8 * MIB)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    def body() -> Iterator[bytes]:
        for start in range(0, len(data), 256 * 1024):
            yield data[start : start + 256 * 1024]

    before = _stored(registry)
    mark = _mark(registry)
    with _client(registry, pub.actor.token) as client:
        monolithic = client.post(
            f"/v2/{repo}/blobs/uploads/", params={"digest": digest}, content=body()
        )
        _refused_for_quota(monolithic, repo, MIB)
        upload_id = _start(client, repo)
        patched = client.patch(f"/v2/{repo}/blobs/uploads/{upload_id}", content=body())
        _refused_for_quota(patched, repo, MIB)
        _gone(registry, client, repo, upload_id, digest)
    assert _stored(registry) == before
    assert _usage(registry, repo) == 0
    _aborted(registry, mark, upload_id, pub.name)
    aborts = [e for e in registry.admin.iter_audit(after=mark) if e["action"] == "upload.abort"]
    assert len(aborts) == 2  # the monolithic POST's session too


def test_refused_upload_leaves_no_object_in_the_s3_bucket(
    s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    """The same attack on an S3 store: the chunk that was stored before the refusal is
    deleted from the bucket with its session."""
    import boto3

    prefix = unique("q")
    reg = start_registry(
        "sqlite",
        tmp_path,
        None,
        blob_store=f"s3://{s3_endpoint.bucket}/{prefix}",
        extra_env=s3_endpoint.env(),
    )
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_endpoint.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )

    def objects() -> list[str]:
        listed = s3.list_objects_v2(Bucket=s3_endpoint.bucket, Prefix=prefix)
        return [str(o["Key"]) for o in listed.get("Contents", [])]

    try:
        pub = new_publisher(reg)
        repo = reg.repo(pub.actor)
        _set_quota(reg, repo, MIB)
        data = secrets.token_bytes(2 * MIB)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        before = objects()
        mark = _mark(reg)
        with _client(reg, pub.actor.token) as client:
            upload_id = _start(client, repo)
            first = client.patch(f"/v2/{repo}/blobs/uploads/{upload_id}", content=data[:MIB])
            assert first.status_code == 202, first.text
            assert any(upload_id in key for key in objects())  # the chunk is in the bucket
            rest = client.patch(f"/v2/{repo}/blobs/uploads/{upload_id}", content=data[MIB:])
            _refused_for_quota(rest, repo, MIB)
            _gone(reg, client, repo, upload_id, digest)
        assert objects() == before
        _aborted(reg, mark, upload_id, pub.name)
    finally:
        reg.close()
        reg.server.stop()


@pytest.mark.sqlite_only
def test_parallel_upload_sessions_cannot_share_one_quota(registry: Registry) -> None:
    """Open sessions that have not named their digest are charged one by one: two sessions
    of 600 KiB do not fit a 1 MiB quota together. The one that fits closes and is charged
    once (its session's charge becomes the blob's lease), not twice."""
    pub = new_publisher(registry)
    repo = registry.repo(pub.actor)
    _set_quota(registry, repo, MIB)
    size = 600 * 1024
    first, second = secrets.token_bytes(size), secrets.token_bytes(size)
    digest = "sha256:" + hashlib.sha256(first).hexdigest()
    other = "sha256:" + hashlib.sha256(second).hexdigest()
    with _client(registry, pub.actor.token) as client:
        one, two = _start(client, repo), _start(client, repo)
        ok = client.patch(f"/v2/{repo}/blobs/uploads/{one}", content=first)
        assert ok.status_code == 202, ok.text
        refused = client.patch(f"/v2/{repo}/blobs/uploads/{two}", content=second)
        _refused_for_quota(refused, repo, MIB)
        _gone(registry, client, repo, two, other)
        closed = client.put(f"/v2/{repo}/blobs/uploads/{one}", params={"digest": digest})
        assert closed.status_code == 201, closed.text
    assert _usage(registry, repo) == size
    assert registry.admin.blob_size(digest) == size


@pytest.mark.sqlite_only
def test_mount_past_quota_is_refused(registry: Registry, tmp_path: Path) -> None:
    """A cross-repository mount charges the blob to the target repository like an upload:
    mounting a blob that does not fit is refused (413 DENIED), not recorded for free."""
    pub = new_publisher(registry)
    source, target = registry.repo(pub.actor), registry.repo(pub.actor)
    bundle = make_bundle_dir(tmp_path / "bundle", big=4096)
    pub.actor.client.push(bundle, source, sign=pub.sign)
    big = "sha256:" + hashlib.sha256((bundle / "big.safetensors").read_bytes()).hexdigest()
    _set_quota(registry, target, 1000)
    with _client(registry, pub.actor.token) as client:
        mounted = client.post(f"/v2/{target}/blobs/uploads/", params={"mount": big, "from": source})
        _refused_for_quota(mounted, target, 1000)
    assert _usage(registry, target) == 0
