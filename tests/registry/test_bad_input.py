"""Bad input: each a 4xx with the JSON error shape, nothing stored, and the refusal audited."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from modelward.client.api import APIError, NotFoundError
from tests.registry.conftest import Publisher, Registry, make_bundle_dir, new_publisher


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def audit_mark(reg: Registry) -> int:
    events = list(reg.admin.iter_audit())
    return int(events[-1]["seq"]) if events else 0


def assert_refused_and_audited(
    reg: Registry, mark: int, actor: str, call: Callable[[], Any]
) -> APIError:
    with pytest.raises(APIError) as info:
        call()
    err = info.value
    assert 400 <= err.status < 500, err
    assert not err.code.startswith("http_"), f"not the JSON error shape: {err}"
    assert err.message
    events = [e for e in reg.admin.iter_audit(after=mark) if e["actor"] == actor]
    assert events, f"refusal {err.code} by {actor} not in /v1/audit"
    text = json.dumps(events).lower()
    assert any(w in text for w in ("denied", "refused", "rejected", err.code.lower())), events
    return err


@pytest.fixture
def pub(registry: Registry) -> Publisher:
    return new_publisher(registry)


@pytest.fixture
def upload_repo(registry: Registry, pub: Publisher) -> str:
    """A repository ``pub`` may publish to: the one its loose blobs are uploaded for."""
    return registry.repo(pub)


@pytest.fixture
def staged(pub: Publisher, upload_repo: str, tmp_path: Path) -> Any:
    """A built bundle whose blobs are uploaded, manifest not yet PUT."""
    from modelward.attest.manifest import build_bundle
    from modelward.client.blobs import BlobSource

    built = build_bundle(make_bundle_dir(tmp_path / "b"))
    blobs = [
        BlobSource(
            built.manifest.config.digest,
            len(built.config_bytes),
            data=built.config_bytes,
            repository=upload_repo,
        )
    ]
    by_path = {f.path: f for f in built.files}
    blobs += [
        BlobSource(
            layer.digest,
            layer.size,
            path=Path(by_path[layer.path].abspath),
            repository=upload_repo,
        )
        for layer in built.manifest.layers
    ]
    pub.actor.client.blobs.upload_many(blobs)
    return built


def test_blob_digest_mismatch(registry: Registry, pub: Publisher, upload_repo: str) -> None:
    data = os.urandom(1000)
    wrong = sha(b"something else " + os.urandom(8))
    mark = audit_mark(registry)
    err = assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client.put_blob(wrong, data, repository=upload_repo),
    )
    assert err.status == 400
    assert pub.actor.client.blob_size(wrong) is None
    assert pub.actor.client.blob_size(sha(data)) is None


def _raw_http(url: str, head: str, body: bytes, *, wait_first: float = 0.0) -> tuple[int, bytes]:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(head.encode())
        if wait_first:
            sock.settimeout(wait_first)
            try:
                early = sock.recv(65536)
            except TimeoutError:
                early = b""
            if early:
                return int(early.split()[1]), early
            sock.settimeout(10)
        sock.sendall(body)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    return (int(raw.split()[1]) if raw else 0), raw


def test_blob_truncated_body(registry: Registry, pub: Publisher, upload_repo: str) -> None:
    """The client sends 4000 of 10000 declared bytes and stops: refused, nothing kept, audited.

    No response may reach a client that hung up; the refusal must still be in the audit log.
    """
    data = os.urandom(10_000)
    digest = sha(data)
    mark = audit_mark(registry)
    head = (
        f"PUT /v1/blobs/{digest}?repository={upload_repo} HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {pub.actor.token}\r\nContent-Length: {len(data)}\r\n"
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    status, raw = _raw_http(registry.url, head, data[:4000])
    assert status == 0 or 400 <= status < 500, raw[:300]
    assert pub.actor.client.blob_size(digest) is None
    # The server may close the connection before it writes the refusal: wait for the entry.
    deadline = time.monotonic() + 10
    while True:
        events = [e for e in registry.admin.iter_audit(after=mark) if e["actor"] == pub.actor.name]
        if events or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert events, "truncated upload refusal not audited"


def test_upload_session_committed_short(
    registry: Registry, pub: Publisher, upload_repo: str
) -> None:
    """A resumable session committed before all declared bytes arrived: 4xx, nothing kept."""
    data = os.urandom(10_000)
    digest = sha(data)
    client = pub.actor.client
    session = client._request(
        "POST",
        "/v1/uploads",
        json_body={"digest": digest, "size": len(data), "repository": upload_repo},
    ).json()
    client._request(
        "PATCH",
        f"/v1/uploads/{session['id']}",
        content=data[:4000],
        headers={"Upload-Offset": "0"},
    )
    mark = audit_mark(registry)
    assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: client._request("POST", f"/v1/uploads/{session['id']}/commit"),
    )
    assert client.blob_size(digest) is None


def test_blob_oversized_body(registry: Registry, pub: Publisher, upload_repo: str) -> None:
    # declared larger than the server's blob limit: refused from the headers, before the body
    digest = sha(b"x")
    mark = audit_mark(registry)
    err = assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client._request(
            "POST",
            "/v1/uploads",
            json_body={"digest": digest, "size": 2**62, "repository": upload_repo},
        ),
    )
    assert err.status in (400, 413, 422)
    # a chunk that runs past the session's declared size
    data = os.urandom(1000)
    session = pub.actor.client._request(
        "POST",
        "/v1/uploads",
        json_body={"digest": sha(data), "size": len(data), "repository": upload_repo},
    ).json()
    with pytest.raises(APIError) as info:
        pub.actor.client._request(
            "PATCH",
            f"/v1/uploads/{session['id']}",
            content=data + b"extra",
            headers={"Upload-Offset": "0"},
        )
    assert 400 <= info.value.status < 500
    assert pub.actor.client.blob_size(sha(data)) is None


def test_manifest_oversized(registry: Registry, pub: Publisher) -> None:
    repo = registry.repo(pub)
    manifest = b'{"x": "' + b"a" * (17 * 2**20) + b'"}'
    mark = audit_mark(registry)
    err = assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client.put_bundle(repo, sha(manifest), manifest),
    )
    assert err.status in (400, 413)
    with pytest.raises(NotFoundError):
        pub.actor.client.get_bundle(repo, sha(manifest))


def _bad_manifest_cases(built: Any) -> dict[str, bytes]:
    ann = "org.cncf.model.filepath"

    def with_layers(mutate: Callable[[list[dict[str, Any]]], None]) -> bytes:
        d = json.loads(built.manifest.raw)
        mutate(d["layers"])
        return json.dumps(d).encode()

    missing = os.urandom(32).hex()

    def set_path(p: str) -> Callable[[list[dict[str, Any]]], None]:
        return lambda ls: ls[0]["annotations"].__setitem__(ann, p)

    return {
        "invalid_json": b'{"schemaVersion": 2, "layers": [',
        "missing_blob": with_layers(lambda ls: ls[0].__setitem__("digest", f"sha256:{missing}")),
        "dotdot_path": with_layers(set_path("../../etc/passwd")),
        "absolute_path": with_layers(set_path("/etc/passwd")),
        "backslash_path": with_layers(set_path("sub\\model.safetensors")),
        "duplicate_path": with_layers(lambda ls: ls.append(dict(ls[0]))),
        "unknown_media_type": with_layers(
            lambda ls: ls[0].__setitem__("mediaType", "application/x-python-pickle")
        ),
        "wrong_size": with_layers(lambda ls: ls[0].__setitem__("size", ls[0]["size"] + 1)),
    }


@pytest.mark.parametrize(
    "case",
    [
        "invalid_json",
        "missing_blob",
        "dotdot_path",
        "absolute_path",
        "backslash_path",
        "duplicate_path",
        "unknown_media_type",
        "wrong_size",
    ],
)
def test_bad_manifest_refused(registry: Registry, pub: Publisher, staged: Any, case: str) -> None:
    repo = registry.repo(pub)
    manifest = _bad_manifest_cases(staged)[case]
    digest = sha(manifest)
    att = pub.sign_digest(digest)
    mark = audit_mark(registry)
    err = assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client.put_bundle(repo, digest, manifest, [att]),
    )
    assert err.status in (400, 409, 413, 422)
    with pytest.raises(NotFoundError):
        pub.actor.client.get_bundle(repo, digest)


def test_manifest_bytes_not_matching_url_digest(
    registry: Registry, pub: Publisher, staged: Any
) -> None:
    repo = registry.repo(pub)
    other = sha(b"not the manifest")
    mark = audit_mark(registry)
    assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client.put_bundle(repo, other, staged.manifest.raw, pub.sign(staged)),
    )
    with pytest.raises(NotFoundError):
        pub.actor.client.get_bundle(repo, staged.manifest.digest)


def test_attestation_by_untrusted_key(registry: Registry, pub: Publisher, staged: Any) -> None:
    from modelward.attest.keys import generate_private_key

    stranger = Publisher(pub.actor, generate_private_key(), keyid="unregistered")
    repo = registry.repo(pub)
    mark = audit_mark(registry)
    err = assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client.put_bundle(
            repo, staged.manifest.digest, staged.manifest.raw, stranger.sign(staged)
        ),
    )
    assert err.status in (400, 403, 422)
    with pytest.raises(NotFoundError):
        pub.actor.client.get_bundle(repo, staged.manifest.digest)


def test_alias_moved_by_principal_the_policy_does_not_allow(
    registry: Registry, pub: Publisher, staged: Any
) -> None:
    allowed = new_publisher(registry)
    policy = (
        "version: 1\ntrust_registered_signers: true\n"
        f"aliases:\n  - pattern: 'release*'\n    principals: [{allowed.actor.name}]\n"
    )
    repo = registry.repo(pub, allowed, policy_yaml=policy)
    pub.actor.client.put_bundle(repo, staged.manifest.digest, staged.manifest.raw, pub.sign(staged))
    mark = audit_mark(registry)
    err = assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client.set_alias(repo, "release-1", staged.manifest.digest),
    )
    assert err.status == 403
    with pytest.raises(NotFoundError):
        pub.actor.client.get_alias(repo, "release-1")
    assert allowed.actor.client.set_alias(repo, "release-1", staged.manifest.digest)["version"] == 1


def test_attestation_body_is_base64_checked(registry: Registry, pub: Publisher) -> None:
    repo = registry.repo(pub)
    digest = sha(b"{}")
    mark = audit_mark(registry)
    body = {"manifest": "***not base64***", "attestations": []}
    assert_refused_and_audited(
        registry,
        mark,
        pub.actor.name,
        lambda: pub.actor.client._request(
            "PUT", f"/v1/repos/{repo}/bundles/{digest}", json_body=body
        ),
    )
