"""Issue 30 item 6: stored state cannot freeze the registry, against a real ``modelward
serve`` (SQLite and PostgreSQL), the attacker writing garbage ``tuf_metadata`` rows:

- ``GET /v1/tuf/status`` and ``POST /v1/tuf/sync`` answer, naming each refused row
  (``MetadataRowRefused``); the registry signs new snapshot and timestamp versions over the
  garbage; workers are served the newest timestamp that verifies meanwhile; a signed
  ``alias set --key`` publishes and prints no traceback;
- a refresh that fails is reported: the log, ``/metrics`` and ``trust status``.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tuf.api.metadata import Metadata

from modelward.attest.keys import save_private_key
from modelward.attest.tuf import open_role
from modelward.client.api import APIError
from tests.registry.conftest import (
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
    unique,
)
from tests.tuf.test_registry_attacks_tuf import KINDS, attacker, resolve, sign, uncached_registry


@pytest.fixture(scope="module", params=KINDS)
def registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """This module's own registry (``tuf_freshness_seconds`` 0): ``attacker`` rewrites its
    stored rows behind its back (docs/tuf.md#serving)."""
    yield from uncached_registry(request, tmp_path_factory)


GARBAGE = b"\x00not json{"


def test_garbage_metadata_rows_do_not_freeze_the_registry(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    first = push_new(pub, repo, tmp_path / unique("w"))
    answer = pub.actor.client.set_alias(repo, "dev", first)
    assert sign(pub, int(answer["proposal"]))["state"] == "published"
    root = registry.admin.tuf_file("1.root.json")
    assert resolve(registry.admin, root, repo, "dev", tmp_path / "seen") == first
    versions = {r["role"]: r["version"] for r in registry.admin.tuf_status()["roles"]}
    role = open_role(repo)
    with attacker(registry) as db:
        for name in ("snapshot", "timestamp", "targets", role):
            db.write(name, versions[name] + 1, GARBAGE)
        # workers are served the newest timestamp that verifies, never the garbage
        assert resolve(registry.admin, root, repo, "dev", tmp_path / "seen") == first
        # status names every refused row instead of a 500
        shown = {r["role"]: r for r in registry.admin.tuf_status()["roles"]}
        for name in ("snapshot", "timestamp", "targets", role):
            assert shown[name]["version"] == versions[name] + 1
            assert "refused: not TUF metadata" in shown[name]["refused"], shown[name]
        text = registry.cli("trust", "status")
        assert text.returncode == 0, text.stderr
        assert "REFUSED" in text.stdout
        assert "Traceback" not in text.stdout + text.stderr
        # sync signs snapshot and timestamp again, over the garbage
        synced = registry.admin.tuf_sync()
        after = {r["role"]: r for r in synced["roles"]}
        for name in ("snapshot", "timestamp"):
            assert after[name]["version"] > versions[name] + 1
            assert "refused" not in after[name]
            Metadata.from_bytes(db.metadata(name))  # the newest row parses again
        # a signed move (the CLI, with --key) publishes past the garbage role row
        second = push_new(pub, repo, tmp_path / unique("w"))
        key = tmp_path / "pub.key"
        save_private_key(pub.key, key)
        moved = registry.cli(
            "alias", "set", f"{repo}@dev", second, "--key", str(key), token=pub.actor.token
        )
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert "Traceback" not in moved.stdout + moved.stderr
        assert resolve(registry.admin, root, repo, "dev", tmp_path / "seen") == second
        assert resolve(registry.admin, root, repo, "dev", tmp_path / "fresh") == second


@pytest.mark.sqlite_only
def test_a_refresh_that_fails_is_reported_by_log_metric_and_trust_status(
    registry: Registry,
) -> None:
    key = registry.server.data_dir / "tuf-keys" / "snapshot.key"
    mode = stat.S_IMODE(key.stat().st_mode)
    key.chmod(0o644)  # open to others: the registry refuses to sign with it
    try:
        with pytest.raises(APIError) as info:
            registry.admin.tuf_sync()
        assert (info.value.status, info.value.code) == (503, "tuf_key_unavailable")
        refresh = registry.admin.tuf_status()["refresh"]
        assert refresh["failing"] is True
        assert refresh["failures"] >= 1
        assert "snapshot.key" in refresh["last_error"]
        headers = {"authorization": f"Bearer {registry.server.admin_token}"}
        metrics = httpx.get(f"{registry.url}/metrics", headers=headers, timeout=60).text
        assert "modelward_tuf_refresh_failing 1.0" in metrics
        assert "modelward_tuf_refresh_failures_total" in metrics
        assert '"event": "tuf_refresh_failed"' in registry.server.log()
        text = registry.cli("trust", "status")
        assert "re-signing snapshot and timestamp is FAILING" in text.stdout
        assert "Traceback" not in text.stdout + text.stderr
        as_json = json.loads(registry.cli("trust", "status", "--json", check=True).stdout)
        assert as_json["refresh"]["failing"] is True
    finally:
        key.chmod(mode)
    registry.admin.tuf_sync()
    assert registry.admin.tuf_status()["refresh"]["failing"] is False
