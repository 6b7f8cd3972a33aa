"""push / pull / alias / bundle show / approve / quarantine through the real CLI and server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelward.client.api import APIError, ConflictError, NotFoundError
from modelward.client.config import parse_reference
from modelward.client.errors import UnsafeFetchWarning
from tests.registry.conftest import (
    Registry,
    make_bundle_dir,
    new_publisher,
    push_new,
    unique,
)


def _json_out(text: str) -> object:
    return json.loads(text)


def test_cli_push_with_sign_and_alias_then_pull(registry: Registry, tmp_path: Path) -> None:
    from modelward.attest.keys import save_private_key

    pub = new_publisher(registry)
    key_file = tmp_path / "signing.pem"
    save_private_key(pub.key, key_file)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "bundle")
    out = registry.cli(
        "push",
        str(root),
        repo,
        "--alias",
        "staging",
        "--sign",
        "--key",
        str(key_file),
        "--reason",
        "first",
        token=pub.actor.token,
    )
    assert out.returncode == 0, out.stderr
    digest = out.stdout.split(f"pushed {repo}@")[1].split()[0]
    state = pub.actor.client.get_alias(repo, "staging")
    assert (state["digest"], state["version"]) == (digest, 1)
    # pull through the alias with another (reader) principal: bytes identical
    reader = registry.actor("reader")
    with pytest.warns(UnsafeFetchWarning):
        pulled = reader.client.unsafe_fetch(parse_reference(f"{repo}@staging"), tmp_path / "pulled")
    assert pulled.digest == digest
    for name in ("config.json", "model.safetensors"):
        assert (pulled.root / name).read_bytes() == (root / name).read_bytes()
    # a second push sends nothing again
    again = registry.cli(
        "push", str(root), repo, "--sign", "--key", str(key_file), token=pub.actor.token
    )
    assert again.returncode == 0, again.stderr
    assert "0 uploaded" in again.stdout


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_cli_push_with_attestation_file(registry: Registry, tmp_path: Path) -> None:
    from modelward.attest.manifest import build_bundle

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "bundle")
    att = tmp_path / "prov.dsse.json"
    att.write_bytes(pub.sign(build_bundle(root))[0])
    out = registry.cli("push", str(root), repo, "--attestation", str(att), token=pub.actor.token)
    assert out.returncode == 0, out.stderr
    digest = out.stdout.split(f"pushed {repo}@")[1].split()[0]
    atts = pub.actor.client.list_attestations(repo, digest)
    assert len(atts) == 1
    assert atts[0]["kind"] == "dsse"


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_cli_alias_set_get_history_rollback(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    d1 = push_new(pub, repo, tmp_path)
    d2 = push_new(pub, repo, tmp_path)
    tok = pub.actor.token
    assert (
        registry.cli("alias", "set", f"{repo}@beta", d1, "--reason", "r1", token=tok).returncode
        == 0
    )
    assert (
        registry.cli("alias", "set", f"{repo}@beta", d2, "--reason", "r2", token=tok).returncode
        == 0
    )
    got = registry.cli("alias", "get", f"{repo}@beta", "--json", token=tok)
    assert _json_out(got.stdout) == {"alias": "beta", "digest": d2, "version": 2, "signed": False}
    rb = registry.cli("alias", "rollback", f"{repo}@beta", "--reason", "bad release", token=tok)
    assert rb.returncode == 0, rb.stderr
    hist = _json_out(registry.cli("alias", "history", f"{repo}@beta", "--json", token=tok).stdout)
    assert isinstance(hist, list)
    moves = [(h["from_digest"], h["to_digest"], h["rollback"], h["reason"]) for h in hist]
    assert moves == [(None, d1, False, "r1"), (d1, d2, False, "r2"), (d2, d1, True, "bad release")]
    assert all(h["actor"] == pub.actor.name for h in hist)
    # a stale explicit version is refused with the current state printed
    stale = registry.cli("alias", "set", f"{repo}@beta", d2, "--expected-version", "1", token=tok)
    assert stale.returncode == 1
    assert "stale" in stale.stderr.lower() or "409" in stale.stderr
    assert d1 in stale.stderr


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_cli_bad_reference_is_a_clear_error(registry: Registry) -> None:
    out = registry.cli("alias", "get", "not-a-repo@prod")
    assert out.returncode == 2  # a usage error (docs/cli.md#exit-codes)
    assert "invalid reference" in out.stderr
    out = registry.cli("approve", "org/name@prod", "--alias", "prod")
    assert out.returncode == 2
    assert "digest" in out.stderr


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_cli_bundle_show_by_alias_and_digest(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path, alias="dev")
    for ref in (f"{repo}@dev", f"{repo}@{digest}"):
        out = registry.cli("bundle", "show", ref, "--json", token=pub.actor.token)
        assert out.returncode == 0, out.stderr
        shown = json.loads(out.stdout)
        assert shown["digest"] == digest
        assert shown["quarantined"] is False
        assert shown["manifest"]["layers"]
        assert shown["attestations"][0]["kind"] == "dsse"


def test_prod_needs_an_approval_by_another_reviewer(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(repo, "prod", digest)
    assert info.value.status in (403, 422)
    reviewer = registry.actor("reviewer")
    out = registry.cli("approve", f"{repo}@{digest}", "--alias", "prod", token=reviewer.token)
    assert out.returncode == 0, out.stderr
    moved = pub.actor.client.set_alias(repo, "prod", digest, reason="approved")
    assert moved["digest"] == digest


def test_quarantined_bundle_cannot_take_an_alias(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    reviewer = registry.actor("reviewer")
    out = registry.cli("quarantine", f"{repo}@{digest}", "--reason", "CVE-1", token=reviewer.token)
    assert out.returncode == 0, out.stderr
    record = pub.actor.client.get_bundle(repo, digest)
    assert (record["quarantined"], record["quarantine_reason"]) == (True, "CVE-1")
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(repo, "canary", digest)
    assert 400 <= info.value.status < 500
    with pytest.raises(NotFoundError):
        pub.actor.client.get_alias(repo, "canary")


def test_blobs_of_a_quarantined_bundle_are_only_for_reviewers(
    registry: Registry, tmp_path: Path
) -> None:
    import hashlib

    import httpx

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "b")
    digest = pub.actor.client.push(root, repo, sign=pub.sign).digest
    own = "sha256:" + hashlib.sha256((root / "config.json").read_bytes()).hexdigest()
    shared = "sha256:" + hashlib.sha256((root / "model.safetensors").read_bytes()).hexdigest()
    live = push_new(pub, repo, tmp_path)  # holds the same model.safetensors
    reader, reviewer = registry.actor("reader"), registry.actor("reviewer")

    def get(token: str, blob: str) -> httpx.Response:
        return httpx.get(
            f"{registry.url}/v1/blobs/{blob}",
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
        )

    assert get(reader.token, own).content == (root / "config.json").read_bytes()
    out = registry.cli("quarantine", f"{repo}@{digest}", "--reason", "CVE-2", token=reviewer.token)
    assert out.returncode == 0, out.stderr
    for token in (reader.token, pub.actor.token):
        refused = get(token, own)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "bundle_quarantined"
        assert own in refused.json()["error"]["message"]
    # reviewers and admins may still inspect it; a blob a live bundle holds stays readable
    assert get(reviewer.token, own).content == (root / "config.json").read_bytes()
    assert get(registry.server.admin_token, own).status_code == 200
    assert get(reader.token, shared).status_code == 200
    # HEAD only says the blob exists (publishers skip uploads with it)
    head = httpx.head(
        f"{registry.url}/v1/blobs/{own}",
        timeout=30,
        headers={"Authorization": f"Bearer {reader.token}"},
    )
    assert head.status_code == 200
    denied = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "denied"
        and e["details"].get("code") == "bundle_quarantined"
        and own in e["subject"]
    ]
    assert denied
    assert get(reader.token, own).status_code == 409
    assert pub.actor.client.get_bundle(repo, live)["quarantined"] is False


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_cli_repo_create_and_key_commands(registry: Registry, tmp_path: Path) -> None:
    from modelward.attest.keys import generate_private_key, public_key_pem

    name = f"{unique('o')}/{unique('m')}"
    assert registry.cli("repo", "create", name).returncode == 0
    assert registry.admin.get_repo(name)
    dup = registry.cli("repo", "create", name)
    assert dup.returncode == 1
    assert "409" in dup.stderr or "exists" in dup.stderr
    pub = registry.actor("publisher")
    pem = tmp_path / "k.pub"
    pem.write_bytes(public_key_pem(generate_private_key().public_key()))
    reg = registry.cli("key", "register", str(pem), "--json", token=pub.token)
    assert reg.returncode == 0, reg.stderr
    keyid = json.loads(reg.stdout)["keyid"]
    listed = registry.cli("key", "list", token=pub.token)
    assert keyid in listed.stdout
    assert registry.cli("key", "revoke", keyid, token=pub.token).returncode == 0


def test_conflict_from_concurrent_writer_carries_current(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    d1 = push_new(pub, repo, tmp_path, alias="x")
    d2 = push_new(pub, repo, tmp_path)
    with pytest.raises(ConflictError) as info:
        pub.actor.client.set_alias(repo, "x", d2, expected_version=0)
    assert info.value.current is not None
    assert info.value.current["digest"] == d1
    assert info.value.current["version"] == 1
