"""One test per attack on the registry, each against a real ``modelward serve`` subprocess.

A single server (SQLite + file blobs in a temp dir, small JSON limits) is shared by the module;
principals come from the ``modelward admin`` CLI. Each test asserts the attack is refused with
the right status and the one JSON error shape, that nothing was stored, and (where the docs say
refusals are audited) that the refusal is in ``GET /v1/audit``. Shared helpers and the attacks
on tokens, authorization, approvals and aliases live here; blobs, uploads, limits, logs and
error hygiene in test_registry_attacks_io.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import forkserver

MODELWARD = str(Path(sys.executable).parent / "modelward")
LIMIT_JSON = 1 << 20  # the server's max_request_json_bytes in these tests
ROLES = {
    "pub_a": "publisher",
    "pub_b": "publisher",
    "rev1": "reviewer",
    "rev2": "reviewer",
    "worker": "reader",
    "admin2": "admin",
}


# -- the server ------------------------------------------------------------------------------
@dataclass
class Actor:
    name: str
    token: str
    token_id: str
    client: httpx.Client
    key: Any = None


@dataclass
class Reg:
    url: str
    data_dir: Path
    log: Path
    admin: httpx.Client
    boot_token: str
    actors: dict[str, Actor]
    tmp: Path

    def cli(self, *args: str) -> list[str]:
        out = subprocess.run(
            [MODELWARD, *args, "--data-dir", str(self.data_dir)],
            capture_output=True,
            text=True,
            env=_env(),
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout.strip().splitlines()

    def client(self, token: str | None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def new_token(self, name: str) -> tuple[str, str]:
        lines = self.cli("admin", "token", "create", name)
        return lines[0].removeprefix("token id: ").strip(), lines[-1]

    def audit(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self.admin.get("/v1/audit", params={"after": after, "limit": 1000}).json()
            events += page["events"]
            if page["next_after"] is None:
                return events
            after = page["next_after"]

    def last_seq(self) -> int:
        events = self.audit()
        return int(events[-1]["seq"]) if events else 0

    def denials_since(self, seq: int) -> list[dict[str, Any]]:
        return [e for e in self.audit() if e["seq"] > seq and e["action"] == "denied"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MODELWARD_")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pem(key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    return str(
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def start_registry(
    base: Path,
    settings: dict[str, str] | None = None,
) -> tuple[Reg, subprocess.Popen[bytes]]:
    data_dir, port = base / "data", _free_port()
    boot = "mwt_boot_" + secrets.token_urlsafe(32)
    env = (
        _env()
        | {
            "MODELWARD_BOOTSTRAP_TOKEN": boot,
            "MODELWARD_MAX_REQUEST_JSON_BYTES": str(LIMIT_JSON),
            "MODELWARD_MAX_ATTESTATION_BYTES": str(256 * 1024),
            "MODELWARD_MAX_MANIFEST_BYTES": str(256 * 1024),
        }
        | (settings or {})
    )
    log = base / "serve.log"
    proc = forkserver.spawn(
        ["serve", "--port", str(port), "--data-dir", str(data_dir)], env, stdout=log
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "server did not come up"
        time.sleep(0.2)
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {boot}"}, timeout=60)
    reg = Reg(url, data_dir, log, admin, boot, {}, base)
    creates = [
        forkserver.spawn(
            ["admin", "principal", "create", name, "--role", role, "--data-dir", str(data_dir)],
            _env(),
            stdout=base / f"create-{name}.log",
        )
        for name, role in ROLES.items()
    ]
    assert all(p.wait() == 0 for p in creates)
    for name in ROLES:
        r = admin.post(f"/v1/admin/principals/{name}/tokens", json={})
        assert r.status_code == 201, r.text
        token_id, token = r.json()["id"], r.json()["token"]
        reg.actors[name] = Actor(name, token, token_id, reg.client(token))
    return reg, proc


@contextlib.contextmanager
def open_registry(base: Path, settings: dict[str, str] | None = None) -> Iterator[Reg]:
    """A running registry with keys for pub_a, pub_b and admin2, the org acme (owners pub_a
    and pub_b), repos acme/a (pub_a, admin2) and acme/b (pub_b); stopped on exit.
    ``settings``: extra MODELWARD_* variables."""
    from modelward.attest.keys import generate_private_key

    registry, proc = start_registry(base, settings)
    try:
        for name in ("pub_a", "pub_b", "admin2"):
            actor = registry.actors[name]
            actor.key = generate_private_key("ed25519")
            r = actor.client.post("/v1/keys", json={"public_key_pem": _pem(actor.key)})
            assert r.status_code == 201, r.text
        a, b = registry.actors["pub_a"].client, registry.actors["pub_b"].client
        r = registry.admin.put("/v1/orgs/acme", json={"owners": ["pub_a", "pub_b"]})
        assert r.status_code == 201, r.text
        assert a.post("/v1/repos", json={"name": "acme/a"}).status_code == 201
        assert b.post("/v1/repos", json={"name": "acme/b"}).status_code == 201
        r = registry.admin.post("/v1/repos/acme/a/publishers", json={"principal": "admin2"})
        assert r.status_code == 201, r.text
        yield registry
    finally:
        for actor in registry.actors.values():
            actor.client.close()
        registry.admin.close()
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    with open_registry(tmp_path_factory.mktemp("attacks")) as registry:
        yield registry


# -- bundles ---------------------------------------------------------------------------------
@dataclass
class Pushed:
    digest: str
    raw: bytes
    blobs: dict[str, bytes]

    def body(self, *attestations: bytes) -> dict[str, Any]:
        return {
            "manifest": base64.b64encode(self.raw).decode(),
            "attestations": [base64.b64encode(a).decode() for a in attestations],
        }


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_bundle(reg: Reg, repo: str = "acme/a") -> Pushed:
    """A fresh, scanner-clean bundle whose blobs are uploaded for ``repo`` (charged to its
    quota; not yet pushed)."""
    import numpy as np
    from safetensors.numpy import save_file

    from modelward.attest.manifest import build_bundle

    root = reg.tmp / f"b-{uuid.uuid4().hex[:10]}"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "n": uuid.uuid4().hex}))
    save_file({"w": np.arange(16, dtype=np.float32)}, str(root / "model.safetensors"))
    built = build_bundle(root)
    blobs = {built.manifest.config.digest: built.config_bytes}
    for layer in built.manifest.layers:
        blobs[layer.digest] = (root / layer.path).read_bytes()
    for digest, data in blobs.items():
        r = reg.admin.put(f"/v1/blobs/{digest}", params={"repository": repo}, content=data)
        assert r.status_code in (200, 201), r.text
    return Pushed(built.manifest.digest, built.manifest.raw, blobs)


def statement(key: Any, digest: str, predicate_type: str, predicate: dict[str, Any]) -> bytes:
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.statement import make_statement

    return sign_envelope(make_statement("bundle", digest, predicate_type, predicate), [key])


def provenance(key: Any, digest: str) -> bytes:
    from modelward.attest.provenance import make_provenance
    from modelward.attest.statement import PredicateType

    now = datetime.now(UTC)
    return statement(
        key, digest, PredicateType.PROVENANCE, make_provenance(started_on=now, finished_on=now)
    )


def push(reg: Reg, who: str, repo: str = "acme/a", key_of: str | None = None) -> Pushed:
    """Upload and push a fresh bundle as ``who``, signed with ``key_of``'s key (default: who)."""
    bundle = make_bundle(reg, repo)
    actor = reg.actors[who]
    key = reg.actors[key_of or who].key
    r = actor.client.put(
        f"/v1/repos/{repo}/bundles/{bundle.digest}",
        json=bundle.body(provenance(key, bundle.digest)),
    )
    assert r.status_code == 201, r.text
    return bundle


def error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert the one JSON error shape with this status and code."""
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "detail"}, body
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    err: dict[str, Any] = body["error"]
    return err


def assert_denied(reg: Reg, since: int, status: int, code: str, actor: str | None = None) -> None:
    """The refusal is in the audit log as a ``denied`` event."""
    hits = [
        e
        for e in reg.denials_since(since)
        if e["details"].get("status") == status and e["details"].get("code") == code
    ]
    assert hits, f"no denied {status} {code} event after seq {since}"
    if actor is not None:
        assert any(e["actor"] == actor for e in hits), hits


def alias_put(
    c: httpx.Client, repo: str, alias: str, digest: str, expected: int = 0, **kw: Any
) -> httpx.Response:
    body = {"digest": digest, "expected_version": expected, **kw}
    return c.put(f"/v1/repos/{repo}/aliases/{alias}", json=body)


def alias_version(reg: Reg, repo: str, alias: str) -> int:
    r = reg.admin.get(f"/v1/repos/{repo}/aliases/{alias}")
    return 0 if r.status_code == 404 else int(r.json()["version"])


# -- authentication --------------------------------------------------------------------------
def test_forged_token_with_a_real_token_id_is_refused(reg: Reg) -> None:
    real = reg.actors["pub_a"]
    prefix, _, secret = real.token.rpartition("_")
    since = reg.last_seq()
    forgeries = [
        f"{prefix}_{'A' * len(secret)}",  # the real id, another secret
        real.token[:-1],  # a prefix of the real token
        real.token + "x",  # the real token plus a suffix
        real.token.upper(),
        f"mwt_{real.token_id}",
        real.token_id,
    ]
    for forged in forgeries:
        with reg.client(forged) as c:
            err = error(c.get("/v1/whoami"), 401, "unauthenticated")
            assert real.token not in json.dumps(err)
    for header in (f"Basic {real.token}", real.token, "Bearer", f"Token {real.token}"):
        r = httpx.get(f"{reg.url}/v1/whoami", headers={"Authorization": header})
        error(r, 401, "unauthenticated")
        assert r.headers["www-authenticate"] == "Bearer"
    assert_denied(reg, since, 401, "unauthenticated", actor="anonymous")


def test_revoked_token_is_refused(reg: Reg) -> None:
    token_id, token = reg.new_token("pub_b")
    with reg.client(token) as c:
        assert c.get("/v1/whoami").json()["principal"] == "pub_b"
        reg.cli("admin", "token", "revoke", token_id)
        since = reg.last_seq()
        err = error(c.get("/v1/whoami"), 401, "unauthenticated")
        error(c.post("/v1/repos", json={"name": "acme/revoked"}), 401, "unauthenticated")
    assert token not in json.dumps(err)
    assert reg.admin.get("/v1/repos/acme/revoked").status_code == 404
    assert_denied(reg, since, 401, "unauthenticated")


def test_expired_token_is_refused(reg: Reg) -> None:
    r = reg.admin.post("/v1/admin/principals/pub_b/tokens", json={"expires_in_seconds": 1})
    assert r.status_code == 201, r.text
    with reg.client(r.json()["token"]) as c:
        time.sleep(1.5)
        since = reg.last_seq()
        error(c.get("/v1/whoami"), 401, "unauthenticated")
    assert_denied(reg, since, 401, "unauthenticated")


# -- authorization across repositories -------------------------------------------------------
def test_publisher_of_other_repo_cannot_push_bundle(reg: Reg) -> None:
    bundle = make_bundle(reg)
    key = reg.actors["pub_b"].key
    since = reg.last_seq()
    r = reg.actors["pub_b"].client.put(
        f"/v1/repos/acme/a/bundles/{bundle.digest}",
        json=bundle.body(provenance(key, bundle.digest)),
    )
    error(r, 403, "forbidden")
    assert reg.admin.get(f"/v1/repos/acme/a/bundles/{bundle.digest}").status_code == 404
    assert_denied(reg, since, 403, "forbidden", actor="pub_b")


def test_signature_by_publisher_of_other_repo_does_not_count(reg: Reg) -> None:
    bundle = make_bundle(reg)
    since = reg.last_seq()
    r = reg.actors["pub_a"].client.put(
        f"/v1/repos/acme/a/bundles/{bundle.digest}",
        json=bundle.body(provenance(reg.actors["pub_b"].key, bundle.digest)),
    )
    error(r, 422, "policy_denied")
    assert reg.admin.get(f"/v1/repos/acme/a/bundles/{bundle.digest}").status_code == 404
    assert_denied(reg, since, 422, "policy_denied", actor="pub_a")


def test_publisher_of_other_repo_cannot_move_alias(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    since = reg.last_seq()
    error(alias_put(reg.actors["pub_b"].client, "acme/a", "dev", bundle.digest), 403, "forbidden")
    assert alias_version(reg, "acme/a", "dev") == 0
    assert_denied(reg, since, 403, "forbidden", actor="pub_b")


def test_publisher_of_other_repo_cannot_attach_attestation(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    url = f"/v1/repos/acme/a/bundles/{bundle.digest}/attestations"
    before = reg.admin.get(url).json()
    since = reg.last_seq()
    att = provenance(reg.actors["pub_b"].key, bundle.digest)
    error(reg.actors["pub_b"].client.post(url, content=att), 403, "forbidden")
    assert reg.admin.get(url).json() == before
    assert_denied(reg, since, 403, "forbidden", actor="pub_b")


def test_bundle_of_other_repo_cannot_be_aliased(reg: Reg) -> None:
    bundle_b = push(reg, "pub_b", repo="acme/b")
    error(
        alias_put(reg.actors["pub_a"].client, "acme/a", "dev2", bundle_b.digest), 404, "not_found"
    )
    assert alias_version(reg, "acme/a", "dev2") == 0


def test_publisher_cannot_approve_quarantine_tombstone_or_replace_policy(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    pub = reg.actors["pub_a"].client
    base = f"/v1/repos/acme/a/bundles/{bundle.digest}"
    since = reg.last_seq()
    error(pub.post(f"{base}/approvals", json={"alias": "prod"}), 403, "forbidden")
    error(pub.post(f"{base}/quarantine", json={"reason": "x"}), 403, "forbidden")
    error(pub.request("DELETE", base, json={"reason": "x"}), 403, "forbidden")
    error(pub.put("/v1/repos/acme/a/policy", json={"policy_yaml": "version: 1"}), 403, "forbidden")
    error(pub.post("/v1/repos/acme/a/publishers", json={"principal": "pub_b"}), 403, "forbidden")
    error(
        pub.post("/v1/keys", json={"public_key_pem": "x", "principal": "pub_b"}), 403, "forbidden"
    )
    error(pub.get("/v1/audit"), 403, "forbidden")
    record = reg.admin.get(base).json()
    assert record["quarantined"] is False
    assert record["tombstoned"] is False
    assert reg.admin.get("/v1/repos/acme/a").json()["publishers"] == ["admin2", "pub_a"]
    assert len(reg.denials_since(since)) >= 7
