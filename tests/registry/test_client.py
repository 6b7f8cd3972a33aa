"""registry.client: public surface, error mapping, config file, reference parsing, transfers."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import modelward.client.api as client_mod
from modelward.client.api import (
    APIError,
    BadRequestError,
    BlobIntegrityError,
    ConflictError,
    ForbiddenError,
    InvalidReference,
    NotFoundError,
    RegistryClient,
    ResponseTooLarge,
    TransferOptions,
    TransportError,
    UnauthorizedError,
)
from modelward.client.config import parse_reference, resolve_settings, save_login
from modelward.client.errors import UnsafeFetchWarning
from tests.registry.conftest import (
    MODELWARD,
    Registry,
    free_port,
    make_bundle_dir,
    new_publisher,
    unique,
)

DIGEST = "sha256:" + "ab" * 32


def test_public_surface_is_pinned() -> None:
    assert sorted(client_mod.__all__) == sorted(
        [
            "APIError",
            "BadRequestError",
            "BlobIntegrityError",
            "ClientConfigError",
            "ConflictError",
            "ForbiddenError",
            "InvalidReference",
            "NotFoundError",
            "PushResult",
            "Reference",
            "RegistryClient",
            "RegistryClientError",
            "ResponseTooLarge",
            "TransferOptions",
            "TransportError",
            "UnauthorizedError",
            "parse_reference",
            "parse_repo",
        ]
    )


def _mock(status: int, body: object) -> RegistryClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body)

    return RegistryClient("http://registry.test", "tok", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError),
        (401, UnauthorizedError),
        (403, ForbiddenError),
        (404, NotFoundError),
        (409, ConflictError),
        (413, BadRequestError),
        (422, BadRequestError),
    ],
)
def test_error_status_maps_to_class_with_evidence(status: int, cls: type[APIError]) -> None:
    body = {"error": {"code": "some_code", "message": "why", "detail": {"k": 1}}}
    with pytest.raises(cls) as info:
        _mock(status, body).whoami()
    err = info.value
    assert (err.status, err.code, err.message, err.detail) == (status, "some_code", "why", {"k": 1})
    assert err.request is not None
    assert err.request.url.path == "/v1/whoami"
    assert "some_code" in str(err)
    assert "why" in str(err)


def test_conflict_carries_current_alias_state() -> None:
    current = {"alias": "prod", "digest": DIGEST, "version": 7}
    body = {"error": {"code": "stale_version", "message": "stale", "detail": {"current": current}}}
    with pytest.raises(ConflictError) as info:
        _mock(409, body).set_alias("org/m", "prod", DIGEST, expected_version=3)
    assert info.value.current == current


def test_connection_refused_is_a_transport_error() -> None:
    with (
        RegistryClient(f"http://127.0.0.1:{free_port()}", "t", timeout=2) as client,
        pytest.raises(TransportError),
    ):
        client.whoami()


def test_bearer_token_sent_and_never_in_url() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"principal": "p", "role": "reader"})

    client = RegistryClient("http://r.test", "s3cret", transport=httpx.MockTransport(handler))
    client.whoami()
    assert seen[0].headers["authorization"] == "Bearer s3cret"
    assert "s3cret" not in str(seen[0].url)


@pytest.mark.parametrize(
    "text",
    [
        "noslash@prod",
        "org/name",
        "org/name@",
        "Org/Name@prod",
        "org/name@sha256:abc",
        "org/name@sha256:" + "AB" * 32,
        "org/name@md5:" + "0" * 32,
        "org/../x@prod",
        "org/name@a b",
    ],
)
def test_bad_references_are_refused_with_a_reason(text: str) -> None:
    with pytest.raises(InvalidReference) as info:
        parse_reference(text)
    assert text in str(info.value)


def test_references_parse() -> None:
    assert parse_reference("org/name@prod").alias == "prod"
    assert parse_reference(f"org/name@{DIGEST}").digest == DIGEST
    with pytest.raises(InvalidReference, match="digest"):
        parse_reference("org/name@prod", require="digest")


def test_login_file_mode_0600_and_env_override(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    path = save_login("http://a.test/", "tok-a", env)
    assert path == tmp_path / "cfg" / "modelward" / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert resolve_settings(env).url == "http://a.test"
    assert resolve_settings(env).token == "tok-a"
    over = resolve_settings({**env, "MODELWARD_URL": "http://b.test", "MODELWARD_TOKEN": "tok-b"})
    assert (over.url, over.token) == ("http://b.test", "tok-b")


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_cli_login_checks_token_and_writes_0600(registry: Registry, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    env.pop("MODELWARD_URL", None)
    env.pop("MODELWARD_TOKEN", None)
    bad = subprocess.run(
        [MODELWARD, "login", registry.url, "--token", "nope"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1
    assert not (tmp_path / "modelward" / "config.toml").exists()
    ok = subprocess.run(
        [MODELWARD, "login", registry.url, "--token", registry.server.admin_token],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    cfg = tmp_path / "modelward" / "config.toml"
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600
    who = subprocess.run(
        [MODELWARD, "audit", "log", "--limit", "1"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert who.returncode == 0, who.stderr
    assert registry.server.admin_token not in ok.stdout + ok.stderr


def test_head_first_skips_present_blobs(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "b")
    first = pub.actor.client.push(root, repo, sign=pub.sign)
    assert first.uploaded >= 2
    again = pub.actor.client.push(root, repo, sign=pub.sign)
    assert (again.uploaded, again.digest) == (0, first.digest)


def test_large_blob_goes_through_resumable_session_and_resumes(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    data = os.urandom(3 * 2**20 + 17)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    state = tmp_path / "state"
    opts = {"chunk_threshold": 2**20, "chunk_size": 2**20, "state_dir": state}
    client = registry.client(pub.actor.token, **opts)
    sent: list[int] = []

    class Stop(Exception):
        pass

    def interrupt(n: int) -> None:
        sent.append(n)
        if sum(sent) >= 2**20 + 2**19:  # mid-way through the second chunk
            raise Stop

    with pytest.raises(Stop):
        client.upload_file(src, digest, progress=interrupt, repository=repo)
    assert client.blob_size(digest) is None  # nothing visible before the commit
    saved = list((state / "uploads").glob("*.json"))
    assert len(saved) == 1
    session = json.loads(saved[0].read_text())["id"]
    offset = int(client._request("GET", f"/v1/uploads/{session}").json()["offset"])
    assert 2**20 <= offset < len(data)  # the cut chunk is not counted as received
    resumed: list[int] = []
    client2 = registry.client(pub.actor.token, **opts)
    assert client2.upload_file(src, digest, progress=resumed.append, repository=repo) is True
    assert sum(resumed) == len(data)  # offset reported first, then the rest
    assert client2.blob_size(digest) == len(data)
    assert not list((state / "uploads").glob("*.json"))
    out = tmp_path / "out.bin"
    client2.download_blob(digest, out, size=len(data))
    assert out.read_bytes() == data


def test_download_resumes_with_range_and_verifies(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    data = os.urandom(300_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    pub.actor.client.put_blob(digest, data, repository=registry.repo(pub))
    dest = tmp_path / "x.bin"
    (tmp_path / ".x.bin.partial").write_bytes(data[:100_000])
    seen: list[int] = []
    pub.actor.client.download_blob(digest, dest, size=len(data), progress=seen.append)
    assert dest.read_bytes() == data
    assert sum(seen) == len(data) - 100_000  # only the rest came over the wire


def test_download_with_corrupt_partial_is_refused_and_removed(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    data = os.urandom(50_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    pub.actor.client.put_blob(digest, data, repository=registry.repo(pub))
    partial = tmp_path / ".x.bin.partial"
    partial.write_bytes(b"\0" * 1000)
    with pytest.raises(BlobIntegrityError) as info:
        pub.actor.client.download_blob(digest, tmp_path / "x.bin", size=len(data))
    assert info.value.digest == digest
    assert not partial.exists()
    assert not (tmp_path / "x.bin").exists()
    pub.actor.client.download_blob(digest, tmp_path / "x.bin", size=len(data))
    assert (tmp_path / "x.bin").read_bytes() == data


def test_parallel_upload_reports_every_byte(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "b")
    for i in range(6):
        (root / f"extra{i}.json").write_text(json.dumps({"i": i, "n": unique()}))
    client = registry.client(pub.actor.token, workers=4)
    seen: list[int] = []
    totals: list[int] = []
    result = client.push(root, repo, sign=pub.sign, progress=seen.append, on_total=totals.append)
    assert sum(seen) == totals[0] == result.total_bytes
    with pytest.warns(UnsafeFetchWarning, match="NOT verified"):
        pulled = client.unsafe_fetch(parse_reference(f"{repo}@{result.digest}"), tmp_path / "p")
    for name in ("config.json", "model.safetensors", "extra3.json"):
        assert (pulled.root / name).read_bytes() == (root / name).read_bytes()
    assert not hasattr(client, "pull")  # no verified-looking name for the unverified path


def _streaming(status: int, chunks: Iterator[bytes], **headers: str) -> RegistryClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, content=chunks)

    options = TransferOptions(max_response_bytes=64 * 1024)
    return RegistryClient(
        "http://r.test", "t", transport=httpx.MockTransport(handler), options=options
    )


def _endless(sent: list[int]) -> Iterator[bytes]:
    while True:
        sent.append(16 * 1024)
        yield b"[" * (16 * 1024)


def test_json_answer_over_limit_is_cut_off() -> None:
    sent: list[int] = []
    with pytest.raises(ResponseTooLarge) as info:
        _streaming(200, _endless(sent)).list_attestations("org/m", DIGEST)
    assert info.value.limit == 64 * 1024
    assert f"attestations of org/m@{DIGEST}" in str(info.value)
    assert "limit of 65536 bytes" in str(info.value)
    assert sum(sent) <= 64 * 1024 + 16 * 1024  # stopped at the first chunk past the limit


def test_json_answer_declaring_a_length_over_limit_is_refused_unread() -> None:
    sent: list[int] = []
    client = _streaming(200, _endless(sent), **{"Content-Length": str(2**40)})
    with pytest.raises(ResponseTooLarge):
        client.whoami()
    assert sent == []


def test_manifest_over_max_bytes_is_cut_off_in_memory() -> None:
    sent: list[int] = []
    with pytest.raises(ResponseTooLarge) as info:
        _streaming(200, _endless(sent)).get_manifest("org/m", DIGEST, max_bytes=1000)
    assert (info.value.limit, info.value.what) == (1000, f"manifest of org/m@{DIGEST}")
    assert sum(sent) <= 16 * 1024


def test_compressed_answer_is_refused() -> None:
    chunks = iter([b"\x1f\x8b" + b"\0" * 100])
    with pytest.raises(TransportError, match="Content-Encoding 'gzip'"):
        _streaming(200, chunks, **{"Content-Encoding": "gzip"}).whoami()


def test_oversized_error_answer_still_maps_to_its_status() -> None:
    sent: list[int] = []
    with pytest.raises(NotFoundError):
        _streaming(404, _endless(sent)).whoami()
    assert sum(sent) <= 2**20 + 16 * 1024


def test_registry_client_has_every_registry_source_method() -> None:
    """mypy checks the full signatures (loader/source.py); this checks names at runtime."""
    import inspect

    from modelward.loader.source import RegistrySource

    members = [n for n, v in vars(RegistrySource).items() if callable(v) and not n.startswith("_")]
    assert sorted(members) == sorted(
        [
            "resolve",
            "get_bundle",
            "get_manifest",
            "list_attestations",
            "download_blob",
            "add_attestation",
            "report_boot",
            "audit_checkpoint",
            "tuf_fetcher",
            "check_repository",
        ]
    )
    for name in members:
        wanted = inspect.signature(getattr(RegistrySource, name)).parameters
        have = inspect.signature(getattr(RegistryClient, name)).parameters
        assert list(wanted) == list(have)[: len(wanted)], name


def test_transfer_options_are_frozen() -> None:
    opts = TransferOptions()
    with pytest.raises(AttributeError):
        opts.workers = 9  # type: ignore[misc]


def _closing_server(answers: int) -> tuple[int, list[int]]:
    """A loopback HTTP server: on its first connection it answers ``answers`` requests
    (keep-alive), then reads one more and closes without a word, as a server closing an
    idle connection while the request was on its way does; later connections are answered.
    Returns its port and the number of requests it read on each connection."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    per_connection: list[int] = []

    def read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(rest) < length:
            rest += conn.recv(65536)
        return True

    def serve() -> None:
        first = True
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                per_connection.append(0)
                limit = answers if first else 1 << 30
                while read_request(conn):
                    per_connection[-1] += 1
                    if per_connection[-1] > limit:
                        break  # closes: no answer to this one
                    body = b'{"principal": "p", "role": "reader"}'
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                first = False

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], per_connection


def test_idempotent_request_on_a_connection_the_server_closed_is_sent_again() -> None:
    port, per_connection = _closing_server(answers=1)
    with RegistryClient(f"http://127.0.0.1:{port}", "t", timeout=10) as client:
        assert client.whoami()["role"] == "reader"
        assert client.whoami()["role"] == "reader"  # the first connection closed on it
    assert per_connection == [2, 1]


def test_a_write_on_a_connection_the_server_closed_is_not_sent_again() -> None:
    port, per_connection = _closing_server(answers=1)
    with RegistryClient(f"http://127.0.0.1:{port}", "t", timeout=10) as client:
        client.whoami()
        with pytest.raises(TransportError, match="Server disconnected"):
            client._json("POST", "/v1/keys", json_body={"public_key_pem": "x"})
    assert per_connection == [2]
