"""Finding things: ``modelward repo list``, ``bundle list REPO``, ``alias list REPO`` and their
API (``GET /v1/repos``, ``.../bundles``, ``.../aliases``): paging with ``next``, states and
alias names, authorization in the query, and a mistyped alias's suggestions. Through the real
``modelward`` CLI against a real ``modelward serve``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.registry.conftest import (
    Actor,
    Publisher,
    Registry,
    new_publisher,
    push_new,
    start_registry,
    unique,
)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    registry = start_registry("sqlite", tmp_path_factory.mktemp("listing"), None)
    try:
        yield registry
    finally:
        registry.close()
        registry.server.stop()


def _json(reg: Registry, *args: str, token: str | None = None) -> Any:
    out = reg.cli(*args, "--json", token=token, check=True)
    return json.loads(out.stdout)


def _org_with_repos(reg: Registry, *names: str) -> str:
    org = unique("o")
    for name in names:
        reg.admin.create_repo(f"{org}/{name}")
    return org


def _set_prod(reg: Registry, pub: Publisher, repo: str, digest: str) -> None:
    reviewer = reg.actor("reviewer")
    reviewer.client.approve(repo, digest, "prod")
    pub.actor.client.set_alias(repo, "prod", digest)


@pytest.fixture(scope="module")
def history(reg: Registry, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A repository with three bundles, oldest first: d1 (aliases canary, staging; then
    deleted), d2 (quarantined), d3 (alias beta)."""
    tmp = tmp_path_factory.mktemp("bundles")
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    d1, d2, d3 = (push_new(pub, repo, tmp) for _ in range(3))
    for alias, digest in (("staging", d1), ("canary", d1), ("beta", d3)):
        pub.actor.client.set_alias(repo, alias, digest)
    reg.actor("reviewer").client.quarantine(repo, d2, "a finding")
    reg.admin.tombstone(repo, d1, "superseded")
    return {"repo": repo, "digests": [d1, d2, d3], "publisher": pub}


# -- repositories --------------------------------------------------------------------------
def test_repo_list_pages_by_name_and_follows_next(reg: Registry) -> None:
    org = _org_with_repos(reg, "c", "a", "b")
    first = _json(reg, "repo", "list", "--org", org, "--limit", "2")
    assert [r["name"] for r in first["repositories"]] == [f"{org}/a", f"{org}/b"]
    assert first["next"]
    rest = _json(reg, "repo", "list", "--org", org, "--cursor", first["next"])
    assert [r["name"] for r in rest["repositories"]] == [f"{org}/c"]
    assert rest["next"] is None
    assert rest["repositories"][0] == {
        **rest["repositories"][0],
        "org": org,
        "bundles": 0,
        "aliases": 0,
        "may_publish": True,
    }


def test_repo_list_prints_a_table_and_says_how_to_continue(reg: Registry) -> None:
    org = _org_with_repos(reg, "x", "y")
    out = reg.cli("repo", "list", "--org", org, "--limit", "1", check=True)
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["REPOSITORY", "BUNDLES", "ALIASES"]
    assert lines[1].split()[:4] == [f"{org}/x", "0", "0", "yes"]
    assert len(lines) == 2
    assert f"modelward repo list --org {org} --cursor " in out.stderr


def test_repo_list_is_scoped_to_the_caller(registry: Registry) -> None:
    """Authorization in the query, on SQLite and PostgreSQL: ``may_publish`` and
    ``--publishable`` are the caller's own."""
    org = _org_with_repos(registry, "mine", "theirs")
    bob = registry.actor("publisher")
    registry.admin.add_publisher(f"{org}/mine", bob.name)
    reader = registry.actor("reader")

    def listed(actor: Actor | None, *flags: str) -> dict[str, bool]:
        token = actor.token if actor else None
        doc = _json(registry, "repo", "list", "--org", org, *flags, token=token)
        return {r["name"]: r["may_publish"] for r in doc["repositories"]}

    assert listed(bob) == {f"{org}/mine": True, f"{org}/theirs": False}
    assert listed(bob, "--publishable") == {f"{org}/mine": True}
    assert listed(reader) == {f"{org}/mine": False, f"{org}/theirs": False}
    assert listed(reader, "--publishable") == {}
    assert listed(None, "--publishable") == {f"{org}/mine": True, f"{org}/theirs": True}


def test_listing_needs_a_token(reg: Registry, history: dict[str, Any]) -> None:
    repo = history["repo"]
    for path in ("/v1/repos", f"/v1/repos/{repo}/bundles", f"/v1/repos/{repo}/aliases"):
        answer = httpx.get(reg.url + path, timeout=30)
        assert answer.status_code == 401, path
        assert answer.json()["error"]["code"] == "unauthenticated"


def test_page_size_above_the_maximum_is_refused(reg: Registry, history: dict[str, Any]) -> None:
    repo = history["repo"]
    headers = {"Authorization": f"Bearer {reg.server.admin_token}"}
    for path in ("/v1/repos", f"/v1/repos/{repo}/bundles", f"/v1/repos/{repo}/aliases"):
        for limit in (0, 1001):
            answer = httpx.get(reg.url + path, params={"limit": limit}, headers=headers)
            assert answer.status_code == 422, (path, limit)
        assert httpx.get(reg.url + path, params={"limit": 1000}, headers=headers).is_success


def test_a_cursor_from_another_listing_is_refused(reg: Registry, history: dict[str, Any]) -> None:
    repo = history["repo"]
    _org_with_repos(reg, "p", "q")
    cursor = reg.admin.list_repos(limit=1)["next"]
    assert cursor
    for cli in (["bundle", "list", repo], ["alias", "list", repo], ["repo", "list"]):
        bad = cursor if cli[0] != "repo" else "bm90LWEtY3Vyc29y"
        out = reg.cli(*cli, "--cursor", bad)
        assert out.returncode == 1, cli
        assert "invalid_cursor" in out.stderr


# -- bundles -------------------------------------------------------------------------------
def test_bundle_list_is_newest_first_with_states_and_aliases(
    reg: Registry, history: dict[str, Any]
) -> None:
    d1, d2, d3 = history["digests"]
    reader = reg.actor("reader")
    doc = _json(reg, "bundle", "list", history["repo"], token=reader.token)
    assert doc["repository"] == history["repo"]
    assert doc["next"] is None
    rows = [(b["digest"], b["state"], b["aliases"]) for b in doc["bundles"]]
    assert rows == [
        (d3, "live", ["beta"]),
        (d2, "quarantined", []),
        (d1, "tombstoned", ["canary", "staging"]),
    ]
    assert doc["bundles"][1]["quarantine_reason"] == "a finding"
    assert doc["bundles"][2]["tombstone_reason"] == "superseded"
    assert {b["created_by"] for b in doc["bundles"]} == {history["publisher"].name}
    assert all("manifest" not in b for b in doc["bundles"])


def test_bundle_list_pages_with_next(reg: Registry, history: dict[str, Any]) -> None:
    d1, d2, d3 = history["digests"]
    first = _json(reg, "bundle", "list", history["repo"], "--limit", "2")
    assert [b["digest"] for b in first["bundles"]] == [d3, d2]
    rest = _json(reg, "bundle", "list", history["repo"], "--cursor", first["next"])
    assert [b["digest"] for b in rest["bundles"]] == [d1]
    assert rest["next"] is None
    client_pages = [b["digest"] for b in reg.admin.iter_bundles(history["repo"], page=1)]
    assert client_pages == [d3, d2, d1]


def test_bundle_list_prints_a_table(reg: Registry, history: dict[str, Any]) -> None:
    d1, d2, d3 = history["digests"]
    lines = reg.cli("bundle", "list", history["repo"], check=True).stdout.splitlines()
    assert lines[0].split()[:3] == ["DIGEST", "STATE", "ALIASES"]
    assert [line.split()[:3] for line in lines[1:]] == [
        [d3, "live", "beta"],
        [d2, "quarantined", "-"],
        [d1, "tombstoned", "canary,staging"],
    ]


def test_bundle_list_of_a_missing_repository_names_it(reg: Registry) -> None:
    missing = f"{unique('o')}/nothing"
    out = reg.cli("bundle", "list", missing)
    assert out.returncode == 1
    assert f"no repository {missing}" in out.stderr
    malformed = reg.cli("bundle", "list", "Not/A Repo")
    assert malformed.returncode == 2


# -- aliases -------------------------------------------------------------------------------
def test_alias_list_names_each_alias_and_its_bundle_state(
    reg: Registry, history: dict[str, Any]
) -> None:
    d1, _, d3 = history["digests"]
    doc = _json(reg, "alias", "list", history["repo"])
    rows = [(a["alias"], a["digest"], a["version"], a["bundle_state"]) for a in doc["aliases"]]
    assert rows == [
        ("beta", d3, 1, "live"),
        ("canary", d1, 1, "tombstoned"),
        ("staging", d1, 1, "tombstoned"),
    ]
    first = _json(reg, "alias", "list", history["repo"], "--limit", "2")
    assert [a["alias"] for a in first["aliases"]] == ["beta", "canary"]
    rest = _json(reg, "alias", "list", history["repo"], "--cursor", first["next"])
    assert [a["alias"] for a in rest["aliases"]] == ["staging"]
    table = reg.cli("alias", "list", history["repo"], check=True).stdout.splitlines()
    assert table[0].split()[:3] == ["ALIAS", "VERSION", "BUNDLE"]
    assert table[1].split()[:5] == ["beta", "1", "live", "UNSIGNED", d3]  # no key signed it


def test_mistyped_alias_suggests_the_close_names(reg: Registry, tmp_path: Path) -> None:
    pub = new_publisher(reg)
    repo = reg.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    _set_prod(reg, pub, repo, digest)
    pub.actor.client.set_alias(repo, "staging", digest)
    for command in ("get", "history"):
        out = reg.cli("alias", command, f"{repo}@prdo")
        assert out.returncode == 1
        said = " ".join(out.stderr.split())
        assert f"no alias {repo}@prdo; did you mean {repo}@prod?" in said
    answer = httpx.get(
        f"{reg.url}/v1/repos/{repo}/aliases/prdo",
        headers={"Authorization": f"Bearer {reg.server.admin_token}"},
    )
    assert answer.status_code == 404
    assert answer.json()["error"]["detail"]["suggestions"] == ["prod"]
    far = reg.cli("alias", "get", f"{repo}@zzzzzz")
    assert "did you mean" not in far.stderr
    assert f"modelward alias list {repo}" in " ".join(far.stderr.split())
