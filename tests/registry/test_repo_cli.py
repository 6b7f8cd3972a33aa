"""``modelward repo create|add-publisher`` through the real CLI against a real server."""

from __future__ import annotations

from pathlib import Path

from tests.registry.conftest import Registry, new_publisher, push_new, unique


def test_admin_adds_a_publisher_who_can_then_push(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = f"{unique('o')}/{unique('m')}"
    registry.cli("repo", "create", repo, check=True)
    refused = registry.cli("repo", "add-publisher", repo, pub.name, token=pub.actor.token)
    assert refused.returncode == 1
    assert "forbidden" in refused.stderr.lower()

    registry.cli("repo", "add-publisher", repo, pub.name, check=True)
    digest = push_new(pub, repo, tmp_path)
    assert registry.admin.get_bundle(repo, digest)["digest"] == digest


def test_add_publisher_names_an_unknown_principal(registry: Registry) -> None:
    repo = f"{unique('o')}/{unique('m')}"
    registry.cli("repo", "create", repo, check=True)
    result = registry.cli("repo", "add-publisher", repo, "nobody-by-that-name")
    assert result.returncode == 1
    assert "nobody-by-that-name" in result.stderr
