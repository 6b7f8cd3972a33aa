"""``modelward trust sign ID --key KEY``, the command docs/rollouts.md gives a reviewer to
sign the rollout plan of a protected alias (and ``make demo`` runs). The plan's proposal
names the candidate as its ``to_digest``, while its target's digest is the plan's sha256:
the command must expect the plan, never the candidate. SQLite only: the command line is the
same over either database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelward.attest.keys import save_private_key
from tests.registry.conftest import Registry, new_publisher, push_new
from tests.tuf.test_registry_attacks_tuf import new_reviewer, sign

pytestmark = pytest.mark.sqlite_only

POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, reviewer], protected: true, approvals: 1}\n"
)


def test_a_reviewer_signs_a_rollout_plan_with_trust_sign(
    registry: Registry, tmp_path: Path
) -> None:
    publisher, reviewer = new_publisher(registry), new_reviewer(registry)
    repo = registry.repo(publisher, policy_yaml=POLICY)
    stable = push_new(publisher, repo, tmp_path)
    moved = publisher.actor.client.set_alias(repo, "prod", stable, propose=True)["pending"]
    assert sign(reviewer, int(moved["id"]))["state"] == "published"
    candidate = push_new(publisher, repo, tmp_path)
    started = publisher.actor.client.start_rollout(repo, "prod", candidate)
    assert not started["plan_signed"]
    # the plan waits for the alias's reviewers: `alias pending` lists it with the moves
    pending = registry.cli("alias", "pending", f"{repo}@prod", "--json", token=reviewer.actor.token)
    assert pending.returncode == 0, pending.stderr
    [listed] = json.loads(pending.stdout)
    assert (listed["id"], listed["kind"], listed["alias"]) == (
        started["proposal"],
        "rollout plan",
        "prod",
    )
    key = tmp_path / "reviewer.key"
    save_private_key(reviewer.key, key)
    signed = registry.cli(
        "trust", "sign", str(started["proposal"]), "--key", str(key), token=reviewer.actor.token
    )
    assert signed.returncode == 0, signed.stderr
    assert f"sha256:{started['plan_sha256']}" in signed.stderr + signed.stdout
    assert publisher.actor.client.rollout_status(repo, "prod")["plan_signed"]
