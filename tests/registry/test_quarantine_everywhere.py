"""Quarantine belongs to the digest: a quarantine applied through one repository holds in
every repository that holds (or will hold) the same bundle digest.

Before, quarantine was a flag on one repository's bundle row: another publisher could push the
quarantined digest into a repository of their own and it was live there, and the bundle record
still handed out the quarantined manifest. Each test quarantines through repository X and
attacks through repository Y, against a real ``modelward serve`` (SQLite and PostgreSQL).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import httpx
import pytest

from modelward.client.api import APIError, NotFoundError
from tests import forkserver
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    unique,
)


def _mark(registry: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in registry.admin.iter_audit())])


def _assert_denied(registry: Registry, mark: int, status: int, code: str, actor: str) -> None:
    hits = [
        e
        for e in registry.admin.iter_audit(after=mark)
        if e["action"] == "denied"
        and e["details"].get("status") == status
        and e["details"].get("code") == code
        and e["actor"] == actor
    ]
    assert hits, f"no denied {status} {code} event by {actor} after seq {mark}"


def _refused(exc: pytest.ExceptionInfo[APIError], status: int, code: str) -> None:
    assert (exc.value.status, exc.value.code) == (status, code), exc.value


def _get(registry: Registry, token: str, path: str) -> httpx.Response:
    return httpx.get(
        f"{registry.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def _two_repos(registry: Registry, tmp_path: Path) -> tuple[Publisher, str, Publisher, str, Path]:
    """Publisher A with repository X, publisher B with repository Y, and one bundle
    directory (not pushed yet)."""
    pub_a, pub_b = new_publisher(registry), new_publisher(registry)
    root = make_bundle_dir(tmp_path / unique("b"))
    return pub_a, registry.repo(pub_a), pub_b, registry.repo(pub_b), root


def _quarantine_in(registry: Registry, repo: str, digest: str, reason: str) -> None:
    reviewer = registry.actor("reviewer")
    record = reviewer.client.quarantine(repo, digest, reason)
    assert (record["quarantined"], record["quarantine_reason"]) == (True, reason)


def test_quarantined_digest_repushed_into_another_repo_is_refused(
    registry: Registry, tmp_path: Path
) -> None:
    pub_a, repo_x, pub_b, repo_y, root = _two_repos(registry, tmp_path)
    digest = pub_a.actor.client.push(root, repo_x, sign=pub_a.sign).digest
    _quarantine_in(registry, repo_x, digest, "backdoored weights")
    mark = _mark(registry)
    # a push that comes after the quarantine, into a repository that never held the digest
    with pytest.raises(APIError) as info:
        pub_b.actor.client.push(root, repo_y, sign=pub_b.sign)
    _refused(info, 409, "bundle_quarantined")
    assert "backdoored weights" in info.value.message
    assert info.value.detail["quarantined_in"] == repo_x
    with pytest.raises(NotFoundError):
        registry.admin.get_bundle(repo_y, digest)
    # nor again where it was quarantined (an idempotent re-push no longer answers 200)
    with pytest.raises(APIError) as info:
        pub_a.actor.client.push(root, repo_x, sign=pub_a.sign)
    _refused(info, 409, "bundle_quarantined")
    _assert_denied(registry, mark, 409, "bundle_quarantined", pub_b.name)
    _assert_denied(registry, mark, 409, "bundle_quarantined", pub_a.name)


def test_quarantined_digest_in_another_repo_cannot_take_an_alias(
    registry: Registry, tmp_path: Path
) -> None:
    pub_a, repo_x, pub_b, repo_y, root = _two_repos(registry, tmp_path)
    digest = pub_a.actor.client.push(root, repo_x, sign=pub_a.sign).digest
    assert pub_b.actor.client.push(root, repo_y, sign=pub_b.sign).digest == digest
    _quarantine_in(registry, repo_x, digest, "CVE-2026-0001")
    mark = _mark(registry)
    with pytest.raises(APIError) as info:
        pub_b.actor.client.set_alias(repo_y, "canary", digest)
    _refused(info, 409, "bundle_quarantined")
    with pytest.raises(NotFoundError):
        pub_b.actor.client.get_alias(repo_y, "canary")
    # nor an approval or a new attestation for it there
    with pytest.raises(APIError) as info:
        registry.actor("reviewer").client.approve(repo_y, digest, "prod")
    _refused(info, 409, "bundle_quarantined")
    with pytest.raises(APIError) as info:
        pub_b.actor.client.add_attestation(repo_y, digest, pub_b.sign_digest(digest))
    _refused(info, 409, "bundle_quarantined")
    # the record in Y says so: every worker refuses it (loader/pull.py step 2)
    record = pub_b.actor.client.get_bundle(repo_y, digest)
    assert (record["quarantined"], record["quarantine_reason"]) == (True, "CVE-2026-0001")
    _assert_denied(registry, mark, 409, "bundle_quarantined", pub_b.name)


def test_quarantined_manifest_not_readable_through_the_bundle_record(
    registry: Registry, tmp_path: Path
) -> None:
    pub_a, repo_x, pub_b, repo_y, root = _two_repos(registry, tmp_path)
    digest = pub_a.actor.client.push(root, repo_x, sign=pub_a.sign).digest
    pub_b.actor.client.push(root, repo_y, sign=pub_b.sign)
    _quarantine_in(registry, repo_x, digest, "exfiltration payload")
    reader = registry.actor("reader")
    config = "sha256:" + hashlib.sha256((root / "config.json").read_bytes()).hexdigest()
    mark = _mark(registry)
    for token in (reader.token, pub_a.actor.token, pub_b.actor.token):
        for repo in (repo_x, repo_y):
            record = _get(registry, token, f"/v1/repos/{repo}/bundles/{digest}")
            assert record.status_code == 200, record.text
            body = record.json()
            assert body["manifest"] is None, (repo, body)
            assert (body["quarantined"], body["quarantine_reason"]) == (
                True,
                "exfiltration payload",
            )
            manifest = _get(registry, token, f"/v1/repos/{repo}/bundles/{digest}/manifest")
            assert manifest.status_code == 409, manifest.text
            assert manifest.json()["error"]["code"] == "bundle_quarantined"
        # the files are withheld too: every bundle row of the digest is quarantined
        blob = _get(registry, token, f"/v1/blobs/{config}")
        assert blob.status_code == 409, blob.text
    _assert_denied(registry, mark, 409, "bundle_quarantined", reader.name)
    _assert_denied(registry, mark, 409, "bundle_quarantined", pub_b.name)


def test_reviewer_can_still_read_a_quarantined_manifest_for_forensics(
    registry: Registry, tmp_path: Path
) -> None:
    pub_a, repo_x, pub_b, repo_y, root = _two_repos(registry, tmp_path)
    digest = pub_a.actor.client.push(root, repo_x, sign=pub_a.sign).digest
    pub_b.actor.client.push(root, repo_y, sign=pub_b.sign)
    _quarantine_in(registry, repo_x, digest, "under investigation")
    reviewer = registry.actor("reviewer")
    for client in (reviewer.client, registry.admin):
        for repo in (repo_x, repo_y):
            raw = client.get_manifest(repo, digest)
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest
            record = client.get_bundle(repo, digest)
            assert base64.b64decode(record["manifest"]) == raw
            assert record["quarantined"] is True
        layers = {layer["digest"] for layer in json.loads(raw)["layers"]}
        config = "sha256:" + hashlib.sha256((root / "config.json").read_bytes()).hexdigest()
        assert config in layers
        assert client.get_blob(config) == (root / "config.json").read_bytes()
    # quarantining it again (through either repository) is a conflict that names the first
    with pytest.raises(APIError) as info:
        reviewer.client.quarantine(repo_y, digest, "again")
    _refused(info, 409, "conflict")
    assert info.value.detail["reason"] == "under investigation"


def test_quarantined_digest_pull_is_refused_through_the_cli(
    registry: Registry, tmp_path: Path
) -> None:
    """A worker pulling through repository Y, where the digest was pushed before the
    quarantine and is on an alias, refuses it: Y's record reports the quarantine."""
    from modelward.attest.keys import public_key_pem

    pub_a, repo_x, pub_b, repo_y, root = _two_repos(registry, tmp_path)
    digest = pub_a.actor.client.push(root, repo_x, sign=pub_a.sign).digest
    pub_b.actor.client.push(root, repo_y, sign=pub_b.sign, alias="dev")
    _quarantine_in(registry, repo_x, digest, "malware found in repo X")
    pem = tmp_path / "pub_b.pem"
    pem.write_bytes(public_key_pem(pub_b.key.public_key()))
    cache = tmp_path / "cache"
    worker = registry.actor("reader")
    env = {**os.environ, "MODELWARD_URL": registry.url, "MODELWARD_TOKEN": worker.token}
    result = forkserver.run(
        [
            "pull",
            f"{repo_y}@dev",
            "--unsigned-aliases",
            "--public-key",
            str(pem),
            "--cache-dir",
            str(cache),
        ],
        env,
        timeout=120,
    )
    assert result.returncode != 0, result.stdout
    assert "quarantined" in result.stderr, result.stderr
    assert "malware found in repo X" in result.stderr, result.stderr
    bundles = cache / "bundles" / "sha256"
    assert not bundles.exists() or not any(bundles.iterdir())
