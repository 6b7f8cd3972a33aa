"""Per-repository storage quotas against a real ``modelward serve``
(docs/registry.md#storage-hygiene): set and shown through ``modelward repo quota``, enforced at
upload and at push with 413 ``repository_quota_exceeded``, shared blobs counted once per
repository, and no overshoot under concurrent uploads (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.registry.conftest import Registry, make_bundle_dir, new_publisher, push_new
from tests.registry.test_gc import key_file, layer_digests

CODE = "repository_quota_exceeded"


def quota(reg: Registry, *args: str, token: str | None = None) -> dict[str, Any]:
    out = reg.cli("repo", "quota", *args, "--json", token=token)
    assert out.returncode == 0, out.stdout + out.stderr
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


def usage(reg: Registry, repo: str) -> int:
    return int(quota(reg, "show", repo)["usage_bytes"])


def charged_size(reg: Registry, repo: str, *digests: str) -> int:
    """The distinct blobs of these bundles, summed."""
    blobs: set[str] = set()
    for digest in digests:
        blobs |= set(layer_digests(reg, repo, digest).values())
    return sum(reg.admin.blob_size(b) or 0 for b in blobs)


def http(reg: Registry, token: str) -> httpx.Client:
    return httpx.Client(base_url=reg.url, headers={"authorization": f"Bearer {token}"}, timeout=60)


def random_blob(size: int) -> tuple[str, bytes]:
    data = secrets.token_bytes(size)
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_quota_set_and_show_through_cli_admins_only(registry: Registry) -> None:
    pub = registry.actor("publisher")
    repo = registry.repo(pub)
    assert quota(registry, "show", repo) == {
        "repository": repo,
        "quota_bytes": None,
        "usage_bytes": 0,
    }
    assert quota(registry, "set", repo, "2MiB")["quota_bytes"] == 2 * 2**20
    assert quota(registry, "show", repo, token=pub.token)["quota_bytes"] == 2 * 2**20
    refused = registry.cli("repo", "quota", "set", repo, "10", token=pub.token)
    assert refused.returncode == 1
    assert "403" in refused.stderr, refused.stderr
    reader = registry.actor("reader")
    hidden = registry.cli("repo", "quota", "show", repo, token=reader.token)
    assert hidden.returncode == 1
    assert "may not read the quota" in hidden.stderr, hidden.stderr
    bad = registry.cli("repo", "quota", "set", repo, "ten")
    assert bad.returncode == 2
    assert "'ten' is not a size" in bad.stderr, bad.stderr
    assert quota(registry, "clear", repo)["quota_bytes"] is None
    events = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "repo.quota" and e["subject"] == repo
    ]
    assert [e["details"]["to"] for e in events] == [2 * 2**20, None]


def test_push_past_quota_is_refused_naming_repository_quota_usage_and_size(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    first = push_new(pub, repo, tmp_path)
    used = usage(registry, repo)
    assert used == charged_size(registry, repo, first)
    limit = used + 100
    quota(registry, "set", repo, str(limit))
    root = make_bundle_dir(tmp_path / "big", big=200_000)
    key = key_file(pub, tmp_path)
    out = registry.cli("push", str(root), repo, "--sign", "--key", str(key), token=pub.actor.token)
    assert out.returncode == 1, out.stdout
    assert "413" in out.stderr, out.stderr
    assert CODE in out.stderr, out.stderr
    for fact in (repo, f"{limit} bytes", "more bytes asked"):
        assert fact in out.stderr, (fact, out.stderr)
    # The CLI names the repository as it uploads, so the big blob was refused before it was
    # stored (not uploaded, then refused at the manifest). The small blobs that fitted are
    # charged until a push records them or GC collects them; the quota still holds.
    assert used <= usage(registry, repo) <= limit
    big = "sha256:" + hashlib.sha256((root / "big.safetensors").read_bytes()).hexdigest()
    head = httpx.head(
        f"{registry.url}/v1/blobs/{big}", headers={"Authorization": f"Bearer {pub.actor.token}"}
    )
    assert head.status_code == 404, head.status_code
    # raising the quota lets the same push through: nothing was lost on the way
    quota(registry, "set", repo, "1GB")
    again = registry.cli(
        "push", str(root), repo, "--sign", "--key", str(key), token=pub.actor.token
    )
    assert again.returncode == 0, again.stderr


def test_shared_blobs_count_once_per_repository(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo_a = registry.repo(pub)
    repo_b = registry.repo(pub)
    root1 = make_bundle_dir(tmp_path / "one")
    root2 = make_bundle_dir(tmp_path / "two")  # same model.safetensors, other config.json
    d1 = pub.actor.client.push(root1, repo_a, sign=pub.sign).digest
    d2 = pub.actor.client.push(root2, repo_a, sign=pub.sign).digest
    shared = layer_digests(registry, repo_a, d1)["model.safetensors"]
    assert shared == layer_digests(registry, repo_a, d2)["model.safetensors"]
    both = charged_size(registry, repo_a, d1, d2)
    assert usage(registry, repo_a) == both
    assert both < charged_size(registry, repo_a, d1) + charged_size(registry, repo_a, d2)
    pub.actor.client.push(root1, repo_b, sign=pub.sign)
    assert usage(registry, repo_b) == charged_size(registry, repo_a, d1)
    assert usage(registry, repo_a) == both  # another repository's copy changes nothing here


def test_upload_naming_repository_past_quota_is_refused_before_any_byte(
    registry: Registry,
) -> None:
    pub = registry.actor("publisher")
    repo = registry.repo(pub)
    quota(registry, "set", repo, "1000")
    digest, data = random_blob(2000)
    with http(registry, pub.token) as client:
        started = client.post(
            "/v1/uploads", json={"digest": digest, "size": len(data), "repository": repo}
        )
        assert started.status_code == 413, started.text
        error = started.json()["error"]
        assert error["code"] == CODE
        assert error["detail"] == {
            "repository": repo,
            "quota_bytes": 1000,
            "usage_bytes": 0,
            "requested_bytes": 2000,
        }
        put = client.put(f"/v1/blobs/{digest}", params={"repository": repo}, content=data)
        assert put.status_code == 413, put.text
        assert put.json()["error"]["code"] == CODE
        other = registry.repo()
        foreign = client.post(
            "/v1/uploads", json={"digest": digest, "size": 10, "repository": other}
        )
        assert foreign.status_code == 403, foreign.text
    assert registry.admin.blob_size(digest) is None


def test_committed_upload_stays_charged_until_its_push(registry: Registry) -> None:
    """A blob uploaded for a repository counts against its quota before any bundle names it
    (a lease), so uploads cannot run past the quota by never pushing a manifest."""
    pub = registry.actor("publisher")
    repo = registry.repo(pub)
    quota(registry, "set", repo, "1500")
    digest, data = random_blob(1000)
    with http(registry, pub.token) as client:
        put = client.put(f"/v1/blobs/{digest}", params={"repository": repo}, content=data)
        assert put.status_code == 201, put.text
        assert usage(registry, repo) == 1000
        again = client.put(f"/v1/blobs/{digest}", params={"repository": repo}, content=data)
        assert again.status_code == 200, again.text  # the same blob costs nothing more
        assert usage(registry, repo) == 1000
        digest2, data2 = random_blob(1000)
        refused = client.put(f"/v1/blobs/{digest2}", params={"repository": repo}, content=data2)
        assert refused.status_code == 413, refused.text


def test_concurrent_uploads_cannot_overshoot_quota(registry: Registry) -> None:
    pub = registry.actor("publisher")
    repo = registry.repo(pub)
    size, room, tries = 1000, 6, 14
    quota(registry, "set", repo, str(size * room))
    statuses: list[int] = []
    lock = threading.Lock()

    def start() -> None:
        digest, _ = random_blob(size)
        with http(registry, pub.token) as client:
            answer = client.post(
                "/v1/uploads", json={"digest": digest, "size": size, "repository": repo}
            )
        with lock:
            statuses.append(answer.status_code)

    threads = [threading.Thread(target=start) for _ in range(tries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [201] * room + [413] * (tries - room)
    assert usage(registry, repo) == size * room
