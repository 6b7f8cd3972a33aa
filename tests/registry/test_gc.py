"""Garbage collection through ``modelward admin gc`` against a real ``modelward serve``
(docs/registry.md#storage-hygiene): what it keeps, what it collects, dry runs, audit, the S3
store, and pushes racing it on SQLite and PostgreSQL with nothing lost."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelward.client.api import APIError
from tests import forkserver
from tests.registry.conftest import (
    PgCluster,
    Publisher,
    Registry,
    S3Endpoint,
    make_bundle_dir,
    new_publisher,
    push_new,
    start_registry,
    unique,
)

WINDOW = 2  # seconds: the GC window of the registries below
DEADLINE = 120.0  # seconds a test waits for the window to pass (never asserted on)


@pytest.fixture
def small_window(tmp_path: Path) -> Iterator[Registry]:
    reg = start_registry(
        "sqlite", tmp_path, None, extra_env={"MODELWARD_GC_WINDOW_SECONDS": str(WINDOW)}
    )
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


@pytest.fixture
def large_window(tmp_path: Path) -> Iterator[Registry]:
    reg = start_registry(
        "sqlite", tmp_path, None, extra_env={"MODELWARD_GC_WINDOW_SECONDS": "3600"}
    )
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


# -- helpers -------------------------------------------------------------------------------
def gc(reg: Registry, *flags: str, token: str | None = None) -> dict[str, Any]:
    """``modelward admin gc --json [flags]``; the report."""
    out = reg.cli("admin", "gc", "--json", *flags, token=token)
    assert out.returncode == 0, out.stdout + out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def gc_until(reg: Registry, done: Callable[[dict[str, Any]], bool], *flags: str) -> dict[str, Any]:
    """Run GC until ``done(report)`` (the window has to pass first)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        report = gc(reg, *flags)
        if done(report):
            return report
        if time.monotonic() > deadline:
            raise AssertionError(f"GC never got there; last report: {report}")
        time.sleep(WINDOW / 2)


def orphan(reg: Registry, token: str, repo: str, size: int = 4096) -> str:
    """Upload a blob for ``repo`` (charged to it) that no bundle will ever name; its digest."""
    data = secrets.token_bytes(size)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with reg.client(token) as client:
        client.put_blob(digest, data, repository=repo)
    return digest


def blob_exists(reg: Registry, digest: str) -> bool:
    return reg.admin.blob_size(digest) is not None


def gc_events(reg: Registry) -> list[dict[str, Any]]:
    return [e for e in reg.admin.iter_audit() if e["action"] == "storage.gc"]


def key_file(pub: Publisher, tmp: Path) -> Path:
    from modelward.attest.keys import save_private_key

    path = tmp / f"{pub.name}.pem"
    if not path.exists():
        save_private_key(pub.key, path)
    return path


def public_pem(pub: Publisher, tmp: Path) -> Path:
    from modelward.attest.keys import public_key_pem

    path = tmp / f"{pub.name}.pub.pem"
    path.write_bytes(public_key_pem(pub.key.public_key()))
    return path


def pull(reg: Registry, ref: str, pem: Path, cache: Path, token: str) -> None:
    """``modelward pull REF``: downloads and verifies every blob and the signature."""
    env = {**os.environ, "MODELWARD_URL": reg.url, "MODELWARD_TOKEN": token}
    out = forkserver.run(
        ["pull", ref, "--unsigned-aliases", "--public-key", str(pem), "--cache-dir", str(cache)],
        env,
        timeout=300,
    )
    assert out.returncode == 0, f"pull {ref}: {out.stdout}\n{out.stderr}"


def layer_digests(reg: Registry, repo: str, digest: str) -> dict[str, str]:
    """path -> blob digest of a pushed bundle (config under ``(config)``)."""
    manifest = json.loads(reg.admin.get_manifest(repo, digest))
    found = {"(config)": manifest["config"]["digest"]}
    for layer in manifest["layers"]:
        found[layer["annotations"]["org.cncf.model.filepath"]] = layer["digest"]
    return found


def evil_bundle(root: Path) -> Path:
    """A bundle the registry's scanner refuses (a pickle that calls os.system)."""

    class Evil:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, ("true",))

    make_bundle_dir(root)
    (root / "evil.pkl").write_bytes(pickle.dumps(Evil()))
    return root


# -- what GC collects and keeps ------------------------------------------------------------
def test_gc_dry_run_reports_orphan_and_deletes_nothing(small_window: Registry) -> None:
    reg = small_window
    pub = reg.actor("publisher")
    digest = orphan(reg, pub.token, reg.repo(pub))
    report = gc_until(reg, lambda r: digest in r["digests"], "--dry-run")
    assert report["dry_run"] is True
    assert report["blobs"] >= 1
    assert report["blob_bytes"] >= 4096
    assert blob_exists(reg, digest)
    human = reg.cli("admin", "gc", "--dry-run")
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("would delete "), human.stdout
    assert blob_exists(reg, digest)
    events = gc_events(reg)
    assert events, "a dry run is audited too"
    assert all(e["details"]["dry_run"] is True for e in events)


def test_gc_collects_orphan_blob_after_window_and_audits_once(small_window: Registry) -> None:
    reg = small_window
    pub = reg.actor("publisher")
    digest = orphan(reg, pub.token, reg.repo(pub), size=5000)
    before = len(gc_events(reg))
    report = gc_until(reg, lambda r: digest in r["digests"])
    assert report["dry_run"] is False
    assert not blob_exists(reg, digest)
    blob_file = reg.server.data_dir / "blobs" / "sha256" / digest[7:9] / digest[7:]
    assert not blob_file.exists()
    events = gc_events(reg)[before:]
    last = events[-1]["details"]
    assert last["blobs"] == report["blobs"] >= 1
    assert last["blob_bytes"] == report["blob_bytes"] >= 5000
    assert last["dry_run"] is False
    assert events[-1]["actor"] == "admin"


def test_gc_spares_a_fresh_orphan_within_the_window(large_window: Registry) -> None:
    """An upload whose push has not committed yet is never collected inside the window."""
    reg = large_window
    pub = reg.actor("publisher")
    digest = orphan(reg, pub.token, reg.repo(pub))
    report = gc(reg)
    assert digest not in report["digests"]
    assert blob_exists(reg, digest)


def test_gc_keeps_live_and_quarantined_bundles_blobs_and_collects_tombstoned(
    small_window: Registry, tmp_path: Path
) -> None:
    reg = small_window
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    live = push_new(pub, repo, tmp_path)
    dead = push_new(pub, repo, tmp_path)
    kept = push_new(pub, repo, tmp_path)
    live_blobs = layer_digests(reg, repo, live)
    dead_blobs = layer_digests(reg, repo, dead)
    kept_blobs = layer_digests(reg, repo, kept)
    reg.admin.tombstone(repo, dead, "superseded")
    reg.admin.quarantine(repo, kept, "under investigation")
    reg.admin.tombstone(repo, kept, "pulled while investigated")
    # model.safetensors is the same bytes in all three: the live bundle keeps it
    assert live_blobs["model.safetensors"] == dead_blobs["model.safetensors"]
    gc_until(reg, lambda r: dead_blobs["(config)"] in r["digests"])
    assert not blob_exists(reg, dead_blobs["(config)"])
    for digest in (*live_blobs.values(), *kept_blobs.values()):
        assert blob_exists(reg, digest), digest
    pull(
        reg,
        f"{repo}@{live}",
        public_pem(pub, tmp_path),
        tmp_path / "cache",
        reg.actor("reader").token,
    )


def test_gc_is_admin_only(small_window: Registry) -> None:
    pub = small_window.actor("publisher")
    out = small_window.cli("admin", "gc", token=pub.token)
    assert out.returncode == 1
    assert "admin" in out.stderr, out.stderr


def test_refused_push_leaves_no_orphans_after_window(
    small_window: Registry, tmp_path: Path
) -> None:
    reg = small_window
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    root = evil_bundle(tmp_path / "evil")
    evil_data = (root / "evil.pkl").read_bytes()
    evil = "sha256:" + hashlib.sha256(evil_data).hexdigest()
    with pytest.raises(APIError):
        pub.actor.client.push(root, repo, sign=pub.sign)  # uploaded, then refused
    assert blob_exists(reg, evil), "the refused push did upload its blobs"
    gc_until(reg, lambda r: evil in r["digests"])
    assert not blob_exists(reg, evil)


def test_abandoned_upload_session_is_collected(small_window: Registry) -> None:
    reg = small_window
    pub = reg.actor("publisher")
    data = secrets.token_bytes(3000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    headers = {"authorization": f"Bearer {pub.token}"}
    with httpx.Client(base_url=reg.url, headers=headers, timeout=60) as http:
        body = {"digest": digest, "size": len(data), "repository": reg.repo(pub)}
        started = http.post("/v1/uploads", json=body)
        assert started.status_code == 201, started.text
        upload_id = started.json()["id"]
        chunk = http.patch(
            f"/v1/uploads/{upload_id}", content=data[:1000], headers={"Upload-Offset": "0"}
        )
        assert chunk.status_code == 200, chunk.text
        parts = reg.server.data_dir / "blobs" / "_uploads" / upload_id
        assert parts.exists()
        gc_until(reg, lambda r: r["uploads"] >= 1 and r["upload_bytes"] >= 1000)
        assert http.get(f"/v1/uploads/{upload_id}").status_code == 404
    assert not parts.exists()
    assert not blob_exists(reg, digest)


def test_gc_removes_store_objects_the_database_never_recorded(
    small_window: Registry, tmp_path: Path
) -> None:
    """A process killed between storing a blob and recording it, or between ending a session
    and deleting its chunks, leaves objects behind: GC finds them in the store."""
    reg = small_window
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    bundle = push_new(pub, repo, tmp_path)
    blobs = reg.server.data_dir / "blobs"
    long_ago = time.time() - 3600
    data = secrets.token_bytes(777)
    hexd = hashlib.sha256(data).hexdigest()
    stray = blobs / "sha256" / hexd[:2] / hexd
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(data)
    chunks = blobs / "_uploads" / secrets.token_hex(16)
    chunks.mkdir(parents=True)
    (chunks / "data").write_bytes(b"x" * 100)
    recorded = [
        blobs / "sha256" / d[7:9] / d[7:] for d in layer_digests(reg, repo, bundle).values()
    ]
    for path in (stray, chunks / "data", chunks, *recorded):
        os.utime(path, (long_ago, long_ago))
    dry = gc(reg, "--dry-run")
    assert (dry["stray_blobs"], dry["stray_uploads"]) == (1, 1)
    assert dry["stray_bytes"] == 877
    assert stray.exists()
    assert chunks.exists()
    report = gc(reg)
    assert (report["stray_blobs"], report["stray_uploads"]) == (1, 1)
    assert not stray.exists()
    assert not chunks.exists()
    assert all(path.exists() for path in recorded)  # old, but recorded and held
    pull(
        reg,
        f"{repo}@{bundle}",
        public_pem(pub, tmp_path),
        tmp_path / "cache",
        reg.actor("reader").token,
    )


# -- S3 ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_gc_on_s3_store_collects_orphans_and_keeps_bundles(
    s3_endpoint: S3Endpoint, tmp_path: Path
) -> None:
    import boto3

    reg = start_registry(
        "sqlite",
        tmp_path,
        None,
        blob_store=f"s3://{s3_endpoint.bucket}/{unique('gc')}",
        extra_env={**s3_endpoint.env(), "MODELWARD_GC_WINDOW_SECONDS": str(WINDOW)},
    )
    try:
        pub = new_publisher(reg)
        repo = reg.repo(pub)
        bundle = push_new(pub, repo, tmp_path)
        digest = orphan(reg, pub.actor.token, repo, size=6000)
        prefix = reg.server.blob_store.rsplit("/", 1)[1] if reg.server.blob_store else ""
        s3 = boto3.client(
            "s3",
            endpoint_url=s3_endpoint.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        # an object the database never recorded (a server killed before recording it)
        stray = secrets.token_hex(32)
        s3.put_object(
            Bucket=s3_endpoint.bucket, Key=f"{prefix}/blobs/sha256/{stray}", Body=b"stray"
        )
        s3.put_object(
            Bucket=s3_endpoint.bucket, Key=f"{prefix}/_uploads/{stray[:32]}/p1", Body=b"chunk"
        )
        strays, collected = [0], set[str]()

        def done(report: dict[str, Any]) -> bool:
            # the orphan and the strays pass the window at different times: one run may
            # collect the orphan and a later one the strays, so both are counted over runs
            strays[0] += report["stray_blobs"] + report["stray_uploads"]
            collected.update(report["digests"])
            return digest in collected and strays[0] >= 2

        gc_until(reg, done)
        listed = s3.list_objects_v2(Bucket=s3_endpoint.bucket, Prefix=f"{prefix}/blobs/")
        keys = {o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", [])}
        assert digest[7:] not in keys
        assert stray not in keys
        uploads = s3.list_objects_v2(Bucket=s3_endpoint.bucket, Prefix=f"{prefix}/_uploads/")
        assert not uploads.get("Contents")
        for blob in layer_digests(reg, repo, bundle).values():
            assert blob[7:] in keys
        pull(
            reg,
            f"{repo}@{bundle}",
            public_pem(pub, tmp_path),
            tmp_path / "cache",
            reg.actor("reader").token,
        )
    finally:
        reg.close()
        reg.server.stop()


# -- a push racing GC ----------------------------------------------------------------------
RETRYABLE = ("missing_blobs", "blob_collected", "garbage-collected")


def _race(reg: Registry, tmp: Path, *, pushers: int = 3, per_pusher: int = 2) -> None:
    """``pushers`` threads push ``per_pusher`` bundles each through the CLI, and upload an
    orphan before each push, while GC runs again and again through the CLI with a tiny window.
    A push the GC outran (its blobs older than the window before its manifest committed) is
    refused and pushed again; then every pushed bundle pulls and verifies."""
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    key = key_file(pub, tmp)
    orphans: list[str] = []
    pushed: list[str] = []
    errors: list[str] = []
    stop = threading.Event()
    reports: list[dict[str, Any]] = []

    def push_many(n: int) -> None:
        for i in range(per_pusher):
            root = make_bundle_dir(tmp / f"p{n}-{i}")
            orphans.append(orphan(reg, pub.actor.token, repo, size=2048))
            for _attempt in range(5):
                out = reg.cli(  # processes: the race is the test (in-process runs take turns)
                    "push",
                    str(root),
                    repo,
                    "--sign",
                    "--key",
                    str(key),
                    token=pub.actor.token,
                    process=True,
                )
                if out.returncode == 0:
                    pushed.append(out.stdout.split(f"pushed {repo}@")[1].split()[0])
                    break
                if not any(code in out.stderr for code in RETRYABLE):
                    errors.append(out.stderr)
                    return
            else:
                errors.append(f"push {root} never got through: {out.stderr}")

    def collect() -> None:
        while not stop.is_set():
            out = reg.cli("admin", "gc", "--json", process=True)
            if out.returncode != 0:
                errors.append(f"gc: {out.stderr}")
                return
            reports.append(json.loads(out.stdout))

    threads = [threading.Thread(target=push_many, args=(n,)) for n in range(pushers)]
    collector = threading.Thread(target=collect)
    collector.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    collector.join()
    assert not errors, errors
    assert len(pushed) == pushers * per_pusher
    # GC collected while the pushes ran, and collects every orphan once its window passes
    assert sum(r["blobs"] for r in reports) >= 1, reports
    # every orphan goes once its window has passed (not merely "a run that collected nothing":
    # the last orphans are younger than the window when the pushes end)
    gc_until(reg, lambda r: not any(blob_exists(reg, d) for d in orphans))
    reader = reg.actor("reader")
    pem = public_pem(pub, tmp)
    for i, digest in enumerate(pushed):
        pull(reg, f"{repo}@{digest}", pem, tmp / f"cache{i}", reader.token)


@pytest.mark.slow
def test_gc_racing_pushes_loses_nothing_sqlite(small_window: Registry, tmp_path: Path) -> None:
    _race(small_window, tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
def test_gc_racing_pushes_loses_nothing_postgres(pg_cluster: PgCluster, tmp_path: Path) -> None:
    reg = start_registry(
        "postgres", tmp_path, pg_cluster, extra_env={"MODELWARD_GC_WINDOW_SECONDS": str(WINDOW)}
    )
    try:
        _race(reg, tmp_path)
    finally:
        reg.close()
        reg.server.stop()
