"""Issue 29 items 1 and 2 (docs/tuf.md#mirrors): the TUF metadata as static files, written
by the registry where it decides them, and workers reading them from a mirror.

- every file the registry writes to its mirror directory is the byte-for-byte answer of
  ``GET /tuf/NAME``; versioned files are written once, never again; ``timestamp.json`` last;
- a start writes the full current set; a failed write does not fail the publish: it is
  counted on ``/metrics`` and written by the next publish;
- a worker reading from the mirror served by a real nginx resolves what a worker reading from
  the registry does, after a move too; a stale mirror (its timestamp expired) is refused
  naming the mirror; an unreachable mirror, or one answering 404, falls back to the registry;
- on S3 storage the files appear in the bucket, under the blob prefix's ``tuf/``.

The database is irrelevant to all of it (the files are written after any commit): SQLite.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from tuf.api.metadata import Metadata, Snapshot, Timestamp

from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.client.config import parse_reference
from modelward.loader.tuf_resolve import AliasTrust, MirrorRefused, resolve_reference
from modelward.registry.domains.signing.tuf.keys import OnlineKeys
from tests.registry.conftest import (
    Publisher,
    Registry,
    S3Endpoint,
    Server,
    free_port,
    new_publisher,
    push_new,
    s3_endpoint,  # noqa: F401 - the moto server the S3 test writes to
    start_registry,
    unique,
)
from tests.tuf.test_registry_attacks_tuf import sign

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """This module's registry. The attack tests roll the shared registry's database back
    (``test_registry_attacks_tuf.attacker`` restores its rows), after which it signs
    version numbers its mirror already holds with other bytes, and the mirror refuses them
    (a conflict, as it must): these tests need a mirror no one rolled back."""
    reg = start_registry("sqlite", tmp_path_factory.mktemp("mirror"), None)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


def mirror_dir(registry: Registry) -> Path:
    """``tuf_metadata_dir``'s default: ``<data_dir>/mirror/tuf``."""
    return registry.server.data_dir / "mirror" / "tuf"


def signed_move(pub: Publisher, repo: str, alias: str, digest: str) -> None:
    answer = pub.actor.client.set_alias(repo, alias, digest)
    assert sign(pub, int(answer["proposal"]))["state"] == "published"


def signed_repo(registry: Registry, tmp: Path) -> tuple[Publisher, str, str]:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp / unique("w"))
    signed_move(pub, repo, "dev", digest)
    return pub, repo, digest


def versioned(directory: Path) -> dict[str, tuple[int, int]]:
    """Every versioned file with (inode, mtime in ns): a rewrite changes one of them."""
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in directory.iterdir()
        if p.name != "timestamp.json" and not p.name.startswith(".")
    }


def assert_served_byte_for_byte(registry: Registry, directory: Path) -> None:
    names = sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))
    assert "timestamp.json" in names, names
    assert "1.root.json" in names, names
    for name in names:
        assert registry.admin.tuf_file(name) == (directory / name).read_bytes(), name


def assert_timestamp_reaches_only_present_files(directory: Path) -> None:
    """What a reader of the directory sees: the timestamp names a snapshot that is there,
    which names files that are there, all written before the timestamp."""
    timestamp = Metadata[Timestamp].from_bytes((directory / "timestamp.json").read_bytes())
    snapshot_file = directory / f"{timestamp.signed.snapshot_meta.version}.snapshot.json"
    snapshot = Metadata[Snapshot].from_bytes(snapshot_file.read_bytes())
    reached = [snapshot_file] + [
        directory / f"{meta.version}.{name}" for name, meta in snapshot.signed.meta.items()
    ]
    last = (directory / "timestamp.json").stat().st_mtime_ns
    for path in reached:
        assert path.is_file(), path.name
        assert path.stat().st_mtime_ns <= last, path.name


@contextlib.contextmanager
def nginx(web_root: Path, tmp: Path) -> Iterator[str]:
    """A real nginx (Debian's) serving ``web_root/tuf/`` as ``/tuf/``, as docs/tuf.md
    shows; yields its metadata URL."""
    if not Path(NGINX).exists():
        pytest.fail(f"{NGINX} is missing: `make test` installs the Debian package nginx")
    port = free_port()
    conf = tmp / unique("nginx") / "nginx.conf"
    conf.parent.mkdir()
    # as root, nginx's workers would run as nobody, who cannot enter pytest's 0700 temp dirs
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf.write_text(
        f"""daemon off;
{user}worker_processes 1;
pid {conf.parent}/nginx.pid;
error_log {conf.parent}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {conf.parent}/access.log;
    client_body_temp_path {conf.parent}/body;
    proxy_temp_path {conf.parent}/proxy;
    fastcgi_temp_path {conf.parent}/fastcgi;
    uwsgi_temp_path {conf.parent}/uwsgi;
    scgi_temp_path {conf.parent}/scgi;
    types {{ application/json json; }}
    server {{
        listen 127.0.0.1:{port};
        location /tuf/ {{ root {web_root}; }}
    }}
}}
"""
    )
    proc = subprocess.Popen(
        [NGINX, "-c", str(conf), "-p", str(conf.parent)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/tuf/"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"nginx exited {proc.returncode}: {proc.stderr and proc.stderr.read()!r}"
                )
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url + "absent", timeout=1)
                break
            if time.monotonic() > deadline:
                raise RuntimeError("nginx did not answer")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def resolve(registry: Registry, ref: str, root: Path, cache: Path, url: str | None = None) -> str:
    trust = AliasTrust(root=root, metadata_url=url)
    return resolve_reference(registry.admin, parse_reference(ref), cache, trust)


def public_key_file(tmp: Path, pub: Publisher | None = None) -> Path:
    """A --public-key file: ``pub``'s, or any key's (the pull is refused before it counts)."""
    key = pub.key if pub is not None else generate_private_key()
    path = tmp / unique("pub")
    path.write_bytes(public_key_pem(key.public_key()))
    return path


def root_file(registry: Registry, tmp: Path) -> Path:
    path = tmp / "root.json"
    path.write_bytes(registry.admin.tuf_file("1.root.json"))
    return path


# -- item 1: the files ---------------------------------------------------------------------


def test_mirror_files_are_the_bytes_served_at_tuf_and_versioned_files_are_never_rewritten(
    own: Registry, tmp_path: Path
) -> None:
    registry = own
    pub, repo, _ = signed_repo(registry, tmp_path)
    directory = mirror_dir(registry)
    assert_served_byte_for_byte(registry, directory)
    assert_timestamp_reaches_only_present_files(directory)
    before = versioned(directory)
    old_timestamp = (directory / "timestamp.json").read_bytes()
    signed_move(pub, repo, "dev", push_new(pub, repo, tmp_path / unique("w")))
    after = versioned(directory)
    assert {name: after[name] for name in before} == before  # none written again
    assert set(after) > set(before)  # the move's role, snapshot (and targets) versions
    assert (directory / "timestamp.json").read_bytes() != old_timestamp
    assert_served_byte_for_byte(registry, directory)
    assert_timestamp_reaches_only_present_files(directory)
    # the directory holds nothing but the metadata (no temporary files left behind)
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".")]


def metric(registry: Registry, name: str) -> float:
    text = httpx.get(
        f"{registry.url}/metrics",
        headers={"Authorization": f"Bearer {registry.server.admin_token}"},
    ).text
    found = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
    assert found, f"{name} not on /metrics"
    return float(found[0])


def test_start_writes_the_full_set_never_replaces_a_file_and_retries_a_failed_write(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    registry = fresh_registry
    pub, repo, _ = signed_repo(registry, tmp_path)
    directory = mirror_dir(registry)
    root_v1 = (directory / "1.root.json").read_bytes()
    # restarted over a mirror that lost its files and holds 1.root.json with other bytes:
    # that file is not replaced, and no timestamp names what could not be written
    registry.server.stop()
    shutil.rmtree(directory)
    directory.mkdir()
    (directory / "1.root.json").write_bytes(b'{"other": "bytes"}')
    registry.server.start()
    assert (directory / "1.root.json").read_bytes() == b'{"other": "bytes"}'
    assert not (directory / "timestamp.json").exists()
    assert metric(registry, "modelward_tuf_mirror_failing") == 1
    failures = metric(registry, "modelward_tuf_mirror_write_failures_total")
    assert failures >= 1
    logged = [
        line for line in registry.server.log().splitlines() if "tuf_mirror_write_failed" in line
    ]
    assert logged
    assert "1.root.json is already there with other bytes" in logged[-1]
    assert '"signatures"' not in logged[-1]  # names the file, never its bytes
    # put right, the next publish writes the full current set
    (directory / "1.root.json").write_bytes(root_v1)
    signed_move(pub, repo, "dev", push_new(pub, repo, tmp_path / unique("w")))
    assert metric(registry, "modelward_tuf_mirror_failing") == 0
    assert_served_byte_for_byte(registry, directory)
    # the mirror cannot be written at all (its directory is a file): the publish succeeds
    shutil.rmtree(directory)
    directory.write_bytes(b"not a directory")
    digest = push_new(pub, repo, tmp_path / unique("w"))
    signed_move(pub, repo, "dev", digest)
    assert registry.admin.get_alias(repo, "dev")["digest"] == digest
    assert metric(registry, "modelward_tuf_mirror_write_failures_total") > failures
    assert metric(registry, "modelward_tuf_mirror_failing") == 1
    # the next publish writes everything that is missing
    directory.unlink()
    signed_move(pub, repo, "dev", push_new(pub, repo, tmp_path / unique("w")))
    assert_served_byte_for_byte(registry, directory)
    assert_timestamp_reaches_only_present_files(directory)


# -- item 2: workers reading a mirror ------------------------------------------------------


def test_a_worker_reading_the_nginx_mirror_resolves_what_the_registry_says(
    own: Registry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = own
    pub, repo, first = signed_repo(registry, tmp_path)
    root = root_file(registry, tmp_path)
    with nginx(mirror_dir(registry).parent, tmp_path) as url, caplog.at_level(logging.WARNING):
        ref = f"{repo}@dev"
        from_mirror = resolve(registry, ref, root, tmp_path / "mirror-worker", url)
        assert from_mirror == resolve(registry, ref, root, tmp_path / "registry-worker") == first
        moved = push_new(pub, repo, tmp_path / unique("w"))
        signed_move(pub, repo, "dev", moved)
        from_mirror = resolve(registry, ref, root, tmp_path / "mirror-worker", url)
        assert from_mirror == resolve(registry, ref, root, tmp_path / "registry-worker") == moved
    assert "could not answer" not in caplog.text  # nothing came from the registry
    served = next(tmp_path.glob("nginx*/access.log")).read_text()
    assert "GET /tuf/timestamp.json" in served


def test_a_stale_mirror_is_refused_naming_the_mirror(own: Registry, tmp_path: Path) -> None:
    registry = own
    pub, repo, _ = signed_repo(registry, tmp_path)
    # a copy of the mirror frozen, and left past its timestamp's expiry: the same files,
    # with the timestamp as the registry signed it, but expired (signed with the registry's
    # own timestamp key, which only the registry holds)
    frozen = tmp_path / "frozen" / "tuf"
    shutil.copytree(mirror_dir(registry), frozen)
    timestamp = Metadata[Timestamp].from_bytes((frozen / "timestamp.json").read_bytes())
    timestamp.signed.expires = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    timestamp.signatures.clear()
    timestamp.sign(OnlineKeys(registry.server.data_dir / "tuf-keys").signer("timestamp"))
    (frozen / "timestamp.json").write_bytes(timestamp.to_bytes())
    root = root_file(registry, tmp_path)
    with nginx(frozen.parent, tmp_path) as url:
        with pytest.raises(MirrorRefused) as refused:
            resolve(registry, f"{repo}@dev", root, tmp_path / "worker", url)
        message = str(refused.value)
        assert f"the metadata mirror {url} is stale" in message
        assert "ExpiredMetadataError" in message
        # the command line says the same, exit 1
        cli = registry.cli(
            "pull",
            f"{repo}@dev",
            "--trust-root",
            str(root),
            "--metadata-url",
            url,
            "--cache-dir",
            str(tmp_path / "cli-cache"),
            "--public-key",
            str(public_key_file(tmp_path, pub)),
        )
    assert cli.returncode == 1, cli.stderr
    assert f"the metadata mirror {url} is stale" in cli.stderr


def test_an_unreachable_or_empty_mirror_falls_back_to_the_registry(
    own: Registry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = own
    _, repo, digest = signed_repo(registry, tmp_path)
    root = root_file(registry, tmp_path)
    nobody = f"http://127.0.0.1:{free_port()}/tuf/"
    with caplog.at_level(logging.WARNING):
        got = resolve(registry, f"{repo}@dev", root, tmp_path / "worker", nobody)
    assert got == digest
    assert f"the metadata mirror {nobody} could not answer" in caplog.text
    assert "unreachable (ConnectError" in caplog.text
    caplog.clear()
    (tmp_path / "empty" / "tuf").mkdir(parents=True)
    with nginx(tmp_path / "empty", tmp_path) as url, caplog.at_level(logging.WARNING):
        got = resolve(registry, f"{repo}@dev", root, tmp_path / "worker2", url)
    assert got == digest
    assert "timestamp.json" in caplog.text
    assert "(HTTP 404)" in caplog.text


@pytest.mark.sqlite_only
def test_a_metadata_url_that_is_not_http_is_refused_naming_the_flag(
    registry: Registry, tmp_path: Path
) -> None:
    cli = registry.cli(
        "pull",
        "acme/x@dev",
        "--trust-root",
        str(root_file(registry, tmp_path)),
        "--metadata-url",
        "ftp://mirror.example/tuf/",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--public-key",
        str(public_key_file(tmp_path)),
    )
    assert cli.returncode == 2, cli.stderr
    assert (
        "--metadata-url 'ftp://mirror.example/tuf/': not an http:// or https:// URL" in cli.stderr
    )


def test_on_s3_storage_the_files_appear_in_the_bucket(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import boto3

    endpoint: S3Endpoint = request.getfixturevalue("s3_endpoint")

    from modelward.client.api import RegistryClient

    data = tmp_path / "data"
    data.mkdir()
    server = Server(
        data_dir=data,
        admin_token=unique("tok") + "x" * 32,
        blob_store=f"s3://{endpoint.bucket}/reg",
        extra_env=endpoint.env(),
    )
    server.start()
    registry = Registry("s3", server, RegistryClient(server.url, server.admin_token))
    try:
        signed_repo(registry, tmp_path)
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        listed = s3.list_objects_v2(Bucket=endpoint.bucket, Prefix="reg/tuf/")
        names = sorted(o["Key"].removeprefix("reg/tuf/") for o in listed.get("Contents", []))
        assert "timestamp.json" in names, names
        assert "1.root.json" in names, names
        for name in names:
            stored = s3.get_object(Bucket=endpoint.bucket, Key=f"reg/tuf/{name}")
            assert stored["Body"].read() == registry.admin.tuf_file(name), name
            expected = "no-cache" if name == "timestamp.json" else "immutable"
            assert expected in stored["CacheControl"], name
        assert not (data / "mirror").exists()  # on S3, not the data directory
    finally:
        registry.close()
        server.stop()


def test_the_worker_policy_names_a_metadata_url_and_the_flag_wins(tmp_path: Path) -> None:
    from modelward.attest.errors import PolicyError
    from modelward.attest.policy import load_policy

    text = (
        "version: 1\ntrust_registered_signers: true\n"
        "tuf:\n  metadata_url: https://mirror.example.com/tuf/\n"
    )
    policy = load_policy(text.encode(), source="worker.yaml")
    from_policy = AliasTrust().with_policy(policy, tmp_path / "worker.yaml")
    assert from_policy.metadata_url == "https://mirror.example.com/tuf/"
    assert from_policy.metadata_url_source == "the worker policy's tuf.metadata_url"
    flag = AliasTrust(metadata_url="http://other.example/tuf/").with_policy(policy, None)
    assert flag.metadata_url == "http://other.example/tuf/"
    with pytest.raises(PolicyError, match="metadata_url"):
        load_policy(text.replace("https://", "file:///").encode(), source="worker.yaml")
