"""Issue 37 item 7: a ``db downgrade`` below the rollout tables ran without a flag under a
signed canary; afterwards ``rollout status`` and ``abort`` answered 404 while the workers
stayed split. Through the CLI against a real ``serve`` on SQLite and PostgreSQL: the
downgrade refuses while a rollout is under way, naming it; with ``--destroy-signed-state
--export-to DIR`` it exports the rollout's rows first (docs/operations.md#downgrade)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from modelward.attest.keys import save_private_key
from modelward.registry.db import head_revision
from tests.registry.conftest import MODELWARD, new_publisher, push_new, start_registry, unique

OPEN = (
    "version: 1\ntrust_registered_signers: true\naliases:\n  - {pattern: '*', roles: [publisher]}\n"
)


def _db(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MODELWARD, "db", *args], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_downgrade_during_a_rollout_is_refused_unless_exported(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("pg_cluster") if kind == "postgres" else None
    reg = start_registry(kind, tmp_path / "reg", pg, extra_env={"MODELWARD_WORKERS": "1"})
    try:
        pub = new_publisher(reg)
        repo = reg.repo(pub, policy_yaml=OPEN)
        key = tmp_path / "pub.key"
        save_private_key(pub.key, key)
        root = tmp_path / "root.json"
        reg.cli("trust", "root", "--out", str(root), check=True)
        env = {"MODELWARD_TRUST_ROOT": str(root)}
        stable, candidate = push_new(pub, repo, tmp_path), push_new(pub, repo, tmp_path)
        ref = f"{repo}@{unique('a')}"
        token = pub.actor.token
        reg.cli("alias", "set", ref, stable, "--key", str(key), token=token, env=env, check=True)
        reg.cli(
            "rollout", "start", ref, "--to", candidate, "--steps", "50,100", "--key", str(key),
            token=token, env=env, check=True,
        )  # fmt: skip
        reg.cli("rollout", "advance", ref, "--reason", "canary", token=token, check=True)
        reg.server.stop()
        where = ["--data-dir", str(reg.server.data_dir), "--database-url", reg.database_url]

        refused = _db("downgrade", "0013_private_repositories", *where)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "drops the rows of 1 rollout(s) under way" in refused.stderr
        assert f"{ref} (running at step 0)" in refused.stderr
        assert "modelward rollout abort" in refused.stderr
        assert "--destroy-signed-state --export-to DIR" in refused.stderr
        assert f"current: {head_revision()}" in _db("current", *where).stdout

        export = tmp_path / "rollout-state"
        down = _db(
            "downgrade", "0013_private_repositories", "--destroy-signed-state", "--export-to",
            str(export), *where,
        )  # fmt: skip
        assert down.returncode == 0, down.stderr
        assert f"exported the rows of 1 rollout(s) ({ref} (running at step 0) under way)" in (
            down.stdout
        )
        assert "database downgraded to 0013_private_repositories (Private repositories)" in (
            down.stdout
        )
        rows = json.loads((export / "rollouts.json").read_bytes())
        [rollout] = rows["rollouts"]
        assert (rollout["stable"], rollout["candidate"], rollout["state"]) == (
            stable,
            candidate,
            "running",
        )
        assert [s["weight"] for s in rows["rollout_steps"]] == [50]
        assert (export / "rollouts.sha256").read_text().startswith("sha256:")
        assert _db("upgrade", *where).returncode == 0
    finally:
        reg.close()
        reg.server.stop()
