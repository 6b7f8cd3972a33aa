"""``modelward rollout ...`` as a user runs it, against the shared registry (SQLite only:
the command line is the same over either database)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelward.attest.keys import save_private_key
from tests.registry.conftest import Registry, new_publisher, push_new, unique

pytestmark = pytest.mark.sqlite_only

OPEN = (
    "version: 1\ntrust_registered_signers: true\naliases:\n  - {pattern: '*', roles: [publisher]}\n"
)


def test_rollout_commands_from_start_to_abort(registry: Registry, tmp_path: Path) -> None:
    publisher = new_publisher(registry)
    repo = registry.repo(publisher, policy_yaml=OPEN)
    key = tmp_path / "pub.key"
    save_private_key(publisher.key, key)
    stable = push_new(publisher, repo, tmp_path)
    token = publisher.actor.token
    alias = unique("a")
    registry.cli(
        "alias", "set", f"{repo}@{alias}", stable, "--key", str(key), token=token, check=True
    )
    candidate = push_new(publisher, repo, tmp_path)
    bad = tmp_path / "analysis.yaml"
    bad.write_text("thresholds:\n  made_up: {max: 1}\n")
    refused = registry.cli(
        "rollout",
        "start",
        f"{repo}@{alias}",
        "--to",
        candidate,
        "--analysis",
        str(bad),
        token=token,
    )
    assert refused.returncode == 2
    assert "thresholds.made_up" in refused.stderr
    no_100 = ("--steps", "5,20")
    assert (
        registry.cli("rollout", "start", f"{repo}@{alias}", "--to", candidate, *no_100).returncode
        == 2
    )
    started = registry.cli(
        "rollout", "start", f"{repo}@{alias}", "--to", candidate, "--steps", "10,100",
        "--window", "10m", "--key", str(key), token=token, check=True,
    )  # fmt: skip
    assert "signed by the alias's role" in started.stdout
    registry.cli("rollout", "advance", f"{repo}@{alias}", "--reason", "go", token=token, check=True)
    weights = json.loads(
        registry.cli(
            "rollout", "weights", f"{repo}@{alias}", "--json", token=token, check=True
        ).stdout
    )
    assert weights["backends"] == [
        {"digest": stable, "weight": 90},
        {"digest": candidate, "weight": 10},
    ]
    registry.cli(
        "rollout", "abort", f"{repo}@{alias}", "--reason", "p95 up", token=token, check=True
    )
    status = json.loads(
        registry.cli(
            "rollout", "status", f"{repo}@{alias}", "--json", token=token, check=True
        ).stdout
    )
    assert status["state"] == "aborted"
    assert status["plan"]["window_seconds"] == 600
    assert [(h["weight"], h["state"]) for h in status["history"]] == [
        (10, "running"),
        (0, "aborted"),
    ]
    text = registry.cli("rollout", "status", f"{repo}@{alias}", token=token, check=True).stdout
    assert "aborted" in text
    assert "p95 up" in text
    assert "analysis  none: each step advances by hand" in text
    # a second rollout, with thresholds: the text shows them; history lists both rollouts
    good = tmp_path / "good.yaml"
    good.write_text("thresholds:\n  error_rate: {max: 0.05}\n")
    second = registry.cli(
        "rollout", "start", f"{repo}@{alias}", "--to", candidate, "--analysis", str(good),
        "--no-fleet-yet", "--key", str(key), token=token, check=True,
    )  # fmt: skip
    assert "analysis  thresholds: error_rate max 0.05" in second.stdout
    history = registry.cli("rollout", "history", f"{repo}@{alias}", token=token, check=True)
    assert history.stdout.count(f"of {repo}@{alias}: ") == 2
    assert status["rollout_id"] in history.stdout
    assert "p95 up" in history.stdout
    never = registry.cli("rollout", "history", f"{repo}@{unique('a')}", token=token, check=True)
    assert "has never had a rollout" in never.stdout
