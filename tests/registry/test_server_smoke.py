"""`modelward serve` as a real subprocess on loopback, driven with httpx."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from modelward.attest.audit.chain import BrokenChain, event_from_json, verify_chain
from tests import forkserver

MODELWARD = str(Path(sys.executable).parent / "modelward")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, url: str, token: str, data_dir: Path, proc: forkserver.Process):
        self.url, self.token, self.data_dir, self.proc = url, token, data_dir, proc

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {} if token == "" else {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def start_server(data_dir: Path, token: str | None, *extra: str) -> Server:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELWARD_")}
    if token is not None:
        env["MODELWARD_BOOTSTRAP_TOKEN"] = token
    log = data_dir.parent / f"serve-{port}.log"
    proc = forkserver.spawn(
        ["serve", "--port", str(port), "--data-dir", str(data_dir), *extra], env, stdout=log
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}: {log.name}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return Server(url, token or "", data_dir, proc)
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("server did not come up")


def stop(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data", "mwt_boot_" + secrets.token_urlsafe(32))
    yield srv
    stop(srv)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _bundle(root: Path) -> tuple[object, bytes]:
    import numpy as np
    from safetensors.numpy import save_file

    from modelward.attest.manifest import build_bundle

    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    save_file({"w": np.arange(2048, dtype=np.float32)}, str(root / "model.safetensors"))
    built = build_bundle(root)
    return built, built.config_bytes


def _provenance(key: object, digest: str) -> bytes:
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.provenance import make_provenance
    from modelward.attest.statement import PredicateType, make_statement

    now = datetime.now(UTC)
    predicate = make_provenance(started_on=now, finished_on=now)
    payload = make_statement("acme/tiny", digest, PredicateType.PROVENANCE, predicate)
    return sign_envelope(payload, [key])  # type: ignore[list-item]


def _error(resp: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return body["error"]


def test_publish_flow_end_to_end(server: Server, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    from modelward.attest.keys import generate_private_key

    admin = server.client()
    anon = server.client("")
    assert anon.get("/healthz").status_code == 200
    _error(anon.get("/v1/whoami"), 401, "unauthenticated")
    _error(server.client("mwt_nope_" + "x" * 40).get("/v1/whoami"), 401, "unauthenticated")
    assert admin.get("/v1/whoami").json() == {"principal": "admin", "role": "admin"}
    _error(anon.get("/metrics"), 401, "unauthenticated")
    assert "modelward_http_requests" in admin.get("/metrics").text

    tokens = {}
    for name, role in (("pub", "publisher"), ("rev", "reviewer"), ("worker", "reader")):
        assert (
            admin.post("/v1/admin/principals", json={"name": name, "role": role}).status_code == 201
        )
        tokens[name] = admin.post(f"/v1/admin/principals/{name}/tokens", json={}).json()["token"]
    pub, rev, worker = (server.client(tokens[n]) for n in ("pub", "rev", "worker"))
    _error(pub.get("/v1/admin/principals"), 403, "forbidden")

    key = generate_private_key("ed25519")
    pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    assert pub.post("/v1/keys", json={"public_key_pem": pem}).status_code == 201
    # a publisher creates repositories only in orgs it owns (docs/registry.md#orgs)
    _error(pub.post("/v1/repos", json={"name": "acme/tiny"}), 403, "forbidden")
    assert admin.put("/v1/orgs/acme", json={"owners": ["pub"]}).status_code in (200, 201)
    assert pub.post("/v1/repos", json={"name": "acme/tiny"}).status_code == 201
    _error(worker.post("/v1/repos", json={"name": "acme/other"}), 403, "forbidden")

    built, config_bytes = _bundle(tmp_path / "bundle")
    manifest = built.manifest  # type: ignore[attr-defined]
    weights = (tmp_path / "bundle" / "model.safetensors").read_bytes()
    config_json = (tmp_path / "bundle" / "config.json").read_bytes()

    # blobs, each for the repository it is pushed to: a digest mismatch is refused and
    # nothing becomes visible
    tiny = {"repository": "acme/tiny"}
    wrong = _digest(b"something else")
    _error(pub.put(f"/v1/blobs/{wrong}", params=tiny, content=config_json), 400, "digest_mismatch")
    assert pub.head(f"/v1/blobs/{wrong}").status_code == 404
    _error(
        worker.put(f"/v1/blobs/{_digest(config_json)}", params=tiny, content=config_json),
        403,
        "forbidden",
    )
    for blob in (config_bytes, config_json):
        assert pub.put(f"/v1/blobs/{_digest(blob)}", params=tiny, content=blob).status_code == 201
    again = pub.put(f"/v1/blobs/{_digest(config_json)}", params=tiny, content=config_json)
    assert again.status_code == 200
    # the weights go through a resumable upload session in two chunks
    wd = _digest(weights)
    up = pub.post("/v1/uploads", json={"digest": wd, "size": len(weights), **tiny}).json()
    half = len(weights) // 2
    r = pub.patch(f"/v1/uploads/{up['id']}", content=weights[:half], headers={"Upload-Offset": "0"})
    assert r.json()["offset"] == half
    _error(
        pub.patch(
            f"/v1/uploads/{up['id']}", content=weights[half:], headers={"Upload-Offset": "0"}
        ),
        409,
        "offset_mismatch",
    )
    assert pub.get(f"/v1/uploads/{up['id']}").json()["offset"] == half
    _error(rev.get(f"/v1/uploads/{up['id']}"), 403, "forbidden")
    pub.patch(
        f"/v1/uploads/{up['id']}", content=weights[half:], headers={"Upload-Offset": str(half)}
    ).raise_for_status()
    assert pub.post(f"/v1/uploads/{up['id']}/commit").status_code == 201
    head = worker.head(f"/v1/blobs/{wd}")
    assert head.status_code == 200
    assert int(head.headers["content-length"]) == len(weights)
    assert worker.get(f"/v1/blobs/{wd}").content == weights
    part = worker.get(f"/v1/blobs/{wd}", headers={"Range": "bytes=100-199"})
    assert part.status_code == 206
    assert part.content == weights[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(weights)}"

    # bundle: unsigned is refused by the default policy; signed is recorded; idempotent
    url = f"/v1/repos/acme/tiny/bundles/{manifest.digest}"
    body = {"manifest": base64.b64encode(manifest.raw).decode(), "attestations": []}
    _error(pub.put(url, json=body), 422, "policy_denied")
    _error(pub.put(f"/v1/repos/acme/tiny/bundles/{wrong}", json=body), 400, "digest_mismatch")
    body["attestations"] = [base64.b64encode(_provenance(key, manifest.digest)).decode()]
    r = pub.put(url, json=body)
    assert r.status_code == 201, r.text
    assert r.json()["decision"]["allowed"] is True
    assert pub.put(url, json=body).status_code == 200
    assert worker.get(f"{url}/manifest").content == manifest.raw
    assert worker.get(url).json()["created_by"] == "pub"
    assert len(worker.get(f"{url}/attestations").json()) == 1

    # alias compare-and-swap: a stale writer gets 409 with the current state
    alias = "/v1/repos/acme/tiny/aliases/staging"
    assert (
        pub.put(alias, json={"digest": manifest.digest, "expected_version": 0}).json()["version"]
        == 1
    )
    stale = _error(
        pub.put(alias, json={"digest": manifest.digest, "expected_version": 0}),
        409,
        "stale_version",
    )
    assert stale["detail"] == {"alias": "staging", "digest": manifest.digest, "version": 1}
    # the same move again (a retried CI job) changes nothing and says so: no new version
    again = pub.put(alias, json={"digest": manifest.digest, "expected_version": 1})
    assert again.status_code == 200, again.text
    assert (again.json()["version"], again.json()["unchanged"]) == (1, True)
    assert [h["version"] for h in worker.get(f"{alias}/history").json()] == [1]
    _error(
        worker.put(alias, json={"digest": manifest.digest, "expected_version": 1}), 403, "forbidden"
    )

    # prod is protected: one approval by a reviewer who is not the publisher
    prod = "/v1/repos/acme/tiny/aliases/prod"
    _error(
        pub.put(prod, json={"digest": manifest.digest, "expected_version": 0}),
        403,
        "approvals_required",
    )
    assert rev.post(f"{url}/approvals", json={"alias": "prod"}).status_code == 201
    assert pub.put(prod, json={"digest": manifest.digest, "expected_version": 0}).status_code == 200

    # quarantine makes it unassignable and unloadable for workers
    assert rev.post(f"{url}/quarantine", json={"reason": "suspicious"}).status_code == 200
    _error(worker.get(f"{url}/manifest"), 409, "bundle_quarantined")
    _error(
        pub.put(alias, json={"digest": manifest.digest, "expected_version": 1}),
        409,
        "bundle_quarantined",
    )

    # the audit log pages, verifies, and holds the refusals too
    _error(pub.get("/v1/audit"), 403, "forbidden")
    events, after = [], 0
    while True:
        page = rev.get("/v1/audit", params={"after": after, "limit": 7}).json()
        events += page["events"]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    chain = [event_from_json(e) for e in events]
    assert verify_chain(chain) == len(chain)
    actions = [e.action for e in chain]
    for action in ("bundle.push", "alias.set", "bundle.approve", "bundle.quarantine", "denied"):
        assert action in actions
    assert not any(tokens["pub"] in json.dumps(e) for e in events)

    # one JSON log line per request, with a request id; never a token
    stop(server)
    log = (server.data_dir.parent / f"serve-{server.url.rsplit(':', 1)[1]}.log").read_text()
    requests = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(r.get("event") == "request" and r["request_id"] for r in requests)
    for secret in (server.token, *tokens.values()):
        assert secret not in log

    # a row edited straight in the database breaks the chain at that row
    db = sqlite3.connect(server.data_dir / "registry.db")
    target = chain[len(chain) // 2].seq
    db.execute("UPDATE audit_events SET actor = 'mallory' WHERE seq = ?", (target,))
    db.commit()
    rows = db.execute(
        "SELECT seq, at, actor, action, subject, details, prev_hash, hash FROM audit_events "
        "ORDER BY seq"
    ).fetchall()
    db.close()
    tampered = [
        event_from_json(
            {
                "seq": r[0],
                "at": r[1],
                "actor": r[2],
                "action": r[3],
                "subject": r[4],
                "details": json.loads(r[5]),
                "prev_hash": r[6],
                "hash": r[7],
            }
        )
        for r in rows
    ]
    with pytest.raises(BrokenChain) as info:
        verify_chain(tampered)
    assert info.value.seq == target


def test_bad_blob_bodies(server: Server) -> None:
    admin = server.client()
    repo = "bodies/bad"  # the repository the blobs are for (charged to its quota)
    assert admin.post("/v1/repos", json={"name": repo}).status_code == 201
    data = b"x" * 1000
    d = _digest(data)
    # truncated: fewer bytes than Content-Length, then the client goes away
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as s:
        s.sendall(
            f"PUT /v1/blobs/{d}?repository={repo} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {server.token}\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data[:500]
        )
        s.shutdown(socket.SHUT_WR)
        s.settimeout(10)
        reply = s.recv(65536)
    assert reply == b"" or b" 400 " in reply.split(b"\r\n", 1)[0]
    assert admin.head(f"/v1/blobs/{d}").status_code == 404
    # no Content-Length
    r = admin.put(f"/v1/blobs/{d}", params={"repository": repo}, content=iter([data]))
    _error(r, 400, "length_required")
    # a session larger than the limit
    too_big = {"digest": d, "size": 2**62, "repository": repo}
    _error(admin.post("/v1/uploads", json=too_big), 413, "too_large")
    assert admin.head(f"/v1/blobs/{d}").status_code == 404
    leftovers = list((server.data_dir / "blobs" / "_tmp").iterdir())
    assert leftovers == []


def test_oversized_blob_and_outdated_schema(tmp_path: Path) -> None:
    token = "mwt_boot_" + secrets.token_urlsafe(32)
    data_dir = tmp_path / "data"
    (tmp_path / "small.toml").write_text("max_blob_bytes = 100\n")
    srv = start_server(data_dir, token, "--config", str(tmp_path / "small.toml"))
    try:
        big = b"y" * 101
        admin = srv.client()
        assert admin.post("/v1/repos", json={"name": "small/blobs"}).status_code == 201
        put = admin.put(
            f"/v1/blobs/{_digest(big)}", params={"repository": "small/blobs"}, content=big
        )
        _error(put, 413, "too_large")
    finally:
        stop(srv)
    db = sqlite3.connect(data_dir / "registry.db")
    db.execute("UPDATE alembic_version SET version_num = '0000'")
    db.commit()
    db.close()
    out = subprocess.run(
        [MODELWARD, "serve", "--port", str(_free_port()), "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1
    assert "modelward db upgrade" in out.stderr


def test_admin_cli_creates_principal_and_token(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    run = lambda *a: subprocess.run(  # noqa: E731
        [MODELWARD, *a, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run("db", "upgrade").returncode == 0
    assert run("admin", "principal", "create", "ci", "--role", "publisher").returncode == 0
    assert "ci\tpublisher" in run("admin", "principal", "list").stdout
    out = run("admin", "token", "create", "ci", "--expires-in", "3600")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    assert token.startswith("mwt_")
    assert len(token) >= 43
    srv = start_server(data_dir, "mwt_boot_" + secrets.token_urlsafe(32))
    try:
        assert srv.client(token).get("/v1/whoami").json() == {
            "principal": "ci",
            "role": "publisher",
        }
        # principals existed, so the bootstrap token created nothing
        _error(srv.client().get("/v1/whoami"), 401, "unauthenticated")
        token_id = out.stdout.strip().splitlines()[-2].split()[-1]
        assert run("admin", "token", "revoke", token_id).returncode == 0
        _error(srv.client(token).get("/v1/whoami"), 401, "unauthenticated")
    finally:
        stop(srv)


def test_first_start_prints_a_one_time_admin_token(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", None)
    try:
        log = tmp_path / f"serve-{srv.url.rsplit(':', 1)[1]}.log"
        lines = log.read_text().splitlines()
        at = lines.index("admin token (shown once, store it now):")
        token = lines[at + 1]
        assert f"modelward registry at {srv.url}" in lines
        assert srv.client(token).get("/v1/whoami").json()["role"] == "admin"
        assert srv.client("").get("/readyz").json() == {"status": "ready"}
        assert srv.client("").get("/openapi.json").status_code == 200
    finally:
        stop(srv)
    again = start_server(tmp_path / "data", None)  # principals exist: no new token
    try:
        log = tmp_path / f"serve-{again.url.rsplit(':', 1)[1]}.log"
        assert "admin token" not in log.read_text()
    finally:
        stop(again)


def test_oms_signature_verifies_against_stored_blobs(
    server: Server, tmp_path: Path, shared_fixtures: Path
) -> None:
    """An OMS model.sig is checked against the bundle's stored files (no tree on the server)."""
    import shutil

    from cryptography.hazmat.primitives import serialization

    from modelward.attest.keys import generate_private_key
    from modelward.attest.manifest import build_bundle

    src = shared_fixtures / "oms" / "v1.1.0-certificate"
    root = tmp_path / "oms-bundle"
    root.mkdir()
    for name in ("signme-1", "signme-2"):
        shutil.copyfile(src / name, root / name)
    built = build_bundle(root)
    manifest = built.manifest
    admin = server.client()
    admin.post("/v1/admin/principals", json={"name": "pub", "role": "publisher"})
    pub = server.client(admin.post("/v1/admin/principals/pub/tokens", json={}).json()["token"])
    key = generate_private_key("ed25519")
    pem = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    assert pub.post("/v1/keys", json={"public_key_pem": pem}).status_code == 201
    assert admin.put("/v1/orgs/acme", json={"owners": ["pub"]}).status_code in (200, 201)

    def pem(name: str) -> str:  # the fixture files start with certtool's text dump
        text = (shared_fixtures / "oms" / "keys" / name).read_text()
        return json.dumps(text[text.index("-----BEGIN") :])

    policy = (
        "version: 1\ntrust_registered_signers: true\n"
        f"signers:\n  cas:\n    - name: oms-ca\n      roots: [{pem('ca-cert.pem')}]\n"
        f"      intermediates: [{pem('int-ca-cert.pem')}]\n"
        "files:\n  allow_globs: ['signme-*']\n"
        "aliases:\n  - pattern: '*'\n    roles: [publisher]\n"
    )
    assert (
        pub.post("/v1/repos", json={"name": "acme/oms", "policy_yaml": policy}).status_code == 201
    )
    for blob in (built.config_bytes, *((root / n).read_bytes() for n in ("signme-1", "signme-2"))):
        pub.put(
            f"/v1/blobs/{_digest(blob)}", params={"repository": "acme/oms"}, content=blob
        ).raise_for_status()
    url = f"/v1/repos/acme/oms/bundles/{manifest.digest}"
    body = {
        "manifest": base64.b64encode(manifest.raw).decode(),
        "attestations": [base64.b64encode(_provenance(key, manifest.digest)).decode()],
    }
    assert pub.put(url, json=body).status_code == 201
    sig = (src / "model.sig").read_bytes()
    r = pub.post(f"{url}/attestations", content=sig)
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "oms"
    # a model.sig by a signer nobody trusts is refused, and nothing is stored
    other = (shared_fixtures / "oms" / "v1.1.0-elliptic-key" / "model.sig").read_bytes()
    _error(pub.post(f"{url}/attestations", content=other), 422, "attestation_untrusted")
    assert [a["kind"] for a in pub.get(f"{url}/attestations").json()] == ["dsse", "oms"]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _worker_pids(parent: int) -> list[int]:
    """The uvicorn worker processes of ``parent`` (spawned: ``spawn_main`` in the command
    line; multiprocessing's resource tracker is a child as well and is not a worker)."""
    pids = []
    for pid in _children(parent):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            pids.append(pid)
    return pids


def test_serve_workers_share_one_registry_without_the_bootstrap_token(tmp_path: Path) -> None:
    token = "mwt_boot_" + secrets.token_urlsafe(32)
    srv = start_server(tmp_path / "data", token, "--workers", "2")
    try:
        deadline = time.monotonic() + 60
        while len(_worker_pids(srv.proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = _worker_pids(srv.proc.pid)
        assert len(workers) == 2
        for pid in workers:  # bootstrapped by the parent: the secret never reaches a worker
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert b"_MODELWARD_WORKER_SETTINGS=" in environ
            assert token.encode() not in environ
        with srv.client() as admin:
            # a token issued through one worker authenticates on whichever worker answers,
            # and its revocation holds on every one of them at once
            admin.post("/v1/admin/principals", json={"name": "w", "role": "reader"})
            issued = admin.post("/v1/admin/principals/w/tokens", json={}).json()
            with srv.client(issued["token"]) as reader:
                for _ in range(20):
                    assert reader.get("/v1/whoami").json()["principal"] == "w"
                admin.delete(f"/v1/admin/tokens/{issued['id']}").raise_for_status()
                for _ in range(20):
                    assert reader.get("/v1/whoami").status_code == 401
        with srv.client("") as anonymous:
            assert anonymous.get("/v1/repos/a/b/aliases/prod").status_code == 401
    finally:
        stop(srv)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
