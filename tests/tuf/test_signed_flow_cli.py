"""The signed alias flow through the real CLI against a real registry (SQLite, PostgreSQL):
a publisher proposes prod, two reviewers sign on their own machines, the registry publishes,
a worker resolves through TUF from a pinned root; quarantine and rollback the same way."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from modelward.attest.keys import save_private_key
from tests.registry.conftest import Publisher, Registry, new_publisher, push_new

POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, admin], protected: true, approvals: 2}\n"
    "  - {pattern: '*', roles: [publisher, admin]}\n"
)


def _key_file(who: Publisher, base: Path) -> Path:
    path = base / f"{who.name}.key"
    save_private_key(who.key, path)
    return path


class Flow:
    def __init__(self, registry: Registry, tmp: Path) -> None:
        self.reg, self.tmp = registry, tmp
        self.pub = new_publisher(registry)
        self.rev1 = new_publisher(registry, "reviewer")
        self.rev2 = new_publisher(registry, "reviewer")
        self.worker = registry.actor("reader")
        self.repo = registry.repo(self.pub, policy_yaml=POLICY)
        self.keys = {p.name: _key_file(p, tmp) for p in (self.pub, self.rev1, self.rev2)}
        self.pem = tmp / "publisher.pem"
        self.pem.write_bytes(self.keys[self.pub.name].with_suffix(".key.pub").read_bytes())
        self.root = tmp / "root.json"

    def cli(self, who: Publisher | None, *args: str) -> subprocess.CompletedProcess[str]:
        token = who.actor.token if who is not None else self.worker.token
        return self.reg.cli(*args, token=token)

    def as_json(self, who: Publisher | None, *args: str) -> dict[str, object]:
        result = self.cli(who, *args, "--json")
        assert result.returncode == 0, result.stderr
        answer: dict[str, object] = json.loads(result.stdout)
        return answer

    def pull(self, alias: str, cache: str = "cache") -> subprocess.CompletedProcess[str]:
        return self.cli(
            None,
            "pull",
            f"{self.repo}@{alias}",
            "--trust-root",
            str(self.root),
            "--public-key",
            str(self.pem),
            "--cache-dir",
            str(self.tmp / cache),
        )

    def approve(self, reviewer: Publisher, digest: str) -> dict[str, object]:
        return self.as_json(
            reviewer,
            "approve",
            f"{self.repo}@{digest}",
            "--alias",
            "prod",
            "--key",
            str(self.keys[reviewer.name]),
        )


def test_propose_two_reviewers_sign_worker_resolves_quarantine_and_rollback(
    registry: Registry, tmp_path: Path
) -> None:
    flow = Flow(registry, tmp_path)
    d1 = push_new(flow.pub, flow.repo, tmp_path)
    d2 = push_new(flow.pub, flow.repo, tmp_path)
    saved = flow.cli(None, "trust", "root", "--out", str(flow.root))
    assert saved.returncode == 0, saved.stderr
    assert "compare them with the ones your admins hold" in saved.stderr

    # dev: the publisher signs her own move (the repository's publishers' role, threshold 1)
    dev = flow.as_json(
        flow.pub, "alias", "set", f"{flow.repo}@dev", d1, "--key", str(flow.keys[flow.pub.name])
    )
    assert dev["signed"] is True
    pulled = flow.pull("dev")
    assert pulled.returncode == 0, pulled.stderr
    assert d1 in pulled.stdout

    # prod: a proposal, not a move; the worker sees nothing signed yet
    proposed = flow.as_json(flow.pub, "alias", "set", f"{flow.repo}@prod", d1)
    pending = proposed["pending"]
    assert isinstance(pending, dict)
    assert (pending["to_digest"], pending["threshold"], pending["state"]) == (d1, 2, "pending")
    listed = flow.cli(None, "alias", "pending", flow.repo)
    assert f"#{pending['id']} {flow.repo}@prod" in listed.stdout
    refused = flow.pull("prod")
    assert refused.returncode == 1
    assert "no signed target names this alias" in refused.stderr

    # the publisher's key is not a reviewer's: her signature does not count
    own = flow.cli(
        flow.pub,
        "approve",
        f"{flow.repo}@{d1}",
        "--alias",
        "prod",
        "--key",
        str(flow.keys[flow.pub.name]),
    )
    assert own.returncode == 1
    assert "is not one of the keys role" in own.stderr

    first = flow.approve(flow.rev1, d1)
    assert first["state"] == "pending"
    assert flow.pull("prod").returncode == 1  # one of two signatures is not a decision
    again = flow.cli(
        flow.rev1,
        "approve",
        f"{flow.repo}@{d1}",
        "--alias",
        "prod",
        "--key",
        str(flow.keys[flow.rev1.name]),
    )
    assert again.returncode == 0  # the same key again changes nothing
    assert "signatures 1/2" in again.stdout
    second = flow.approve(flow.rev2, d1)
    assert second["state"] == "published"
    state = flow.as_json(None, "alias", "get", f"{flow.repo}@prod")
    assert (state["digest"], state["signed"]) == (d1, True)
    pulled = flow.pull("prod")
    assert pulled.returncode == 0, pulled.stderr
    assert d1 in pulled.stdout

    # release 2, then a quarantine signed by one reviewer: workers refuse prod
    flow.as_json(flow.pub, "alias", "set", f"{flow.repo}@prod", d2, "--reason", "release 2")
    flow.approve(flow.rev1, d2)
    assert flow.approve(flow.rev2, d2)["state"] == "published"
    assert d2 in flow.pull("prod").stdout
    held = flow.as_json(
        flow.rev1,
        "quarantine",
        f"{flow.repo}@{d2}",
        "--reason",
        "bad weights",
        "--key",
        str(flow.keys[flow.rev1.name]),
    )
    assert held["signed"] is True
    refused = flow.pull("prod", cache="cache-2")
    assert refused.returncode == 1
    assert "listed by the signed quarantine role" in refused.stderr

    # rollback: proposed under the same rule, signed by both reviewers
    rolled = flow.as_json(
        flow.pub, "alias", "rollback", f"{flow.repo}@prod", d1, "--reason", "v2 quarantined"
    )
    assert isinstance(rolled["pending"], dict)
    flow.approve(flow.rev1, d1)
    assert flow.approve(flow.rev2, d1)["state"] == "published"
    pulled = flow.pull("prod", cache="cache-2")
    assert pulled.returncode == 0, pulled.stderr
    assert d1 in pulled.stdout
    history = flow.as_json(None, "alias", "history", f"{flow.repo}@prod")
    assert isinstance(history, list)
    assert [h["to_digest"] for h in history] == [d1, d2, d1]
    assert history[-1]["rollback"] is True

    actions = [
        e["action"]
        for e in registry.admin.iter_audit()
        if e["subject"].startswith(f"{flow.repo}@") or "proposal" in e["details"]
    ]
    assert {"alias.propose", "tuf.sign", "tuf.publish", "alias.rollback"} <= set(actions)


def test_push_to_a_protected_alias_proposes_the_move(registry: Registry, tmp_path: Path) -> None:
    from tests.registry.conftest import make_bundle_dir

    flow = Flow(registry, tmp_path)
    bundle = make_bundle_dir(tmp_path / "bundle")
    pushed = flow.cli(
        flow.pub,
        "push",
        str(bundle),
        flow.repo,
        "--sign",
        "--key",
        str(flow.keys[flow.pub.name]),
        "--alias",
        "prod",
    )
    assert pushed.returncode == 0, pushed.stderr
    assert "proposed #" in pushed.stdout
    assert f" {flow.repo}@prod: (unset) -> sha256:" in pushed.stdout
    assert f"modelward approve {flow.repo}@sha256:" in pushed.stdout
    unset = flow.cli(None, "alias", "get", f"{flow.repo}@prod")
    assert unset.returncode == 1  # a proposal, not a move
    assert "has no aliases yet" in unset.stderr
    listed = flow.cli(None, "alias", "pending", flow.repo)
    assert f"{flow.repo}@prod" in listed.stdout
