"""Issue 37 item 5: a rollback no promotion gate blocks
(docs/operations.md#rolling-back-a-release).

After a quarantine, ``alias rollback`` to the previous release was refused ``422
gates_failed … its baseline is None``: the release gates judged the old release against the
quarantined one. Moving an alias back to a release it held under valid signatures (a signed
version of its TUF role named it), and that is not quarantined, is a rollback: the gates do
not apply, the alias's signers still sign it, and it is audited as an emergency. A
"rollback" to a digest the alias never held under valid signatures, or to a quarantined
one, is refused. Through the real CLI against a real registry (SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from modelward.attest.keys import save_private_key
from modelward.registry.db import make_engine
from tests.attest.test_evaluation import HEADER, cases, jsonl
from tests.registry.conftest import Publisher, Registry, new_publisher, push_new, unique


def _policy(evaluator: str) -> str:
    return "\n".join(
        [
            "version: 1",
            "trust_registered_signers: true",
            f"evidence: {{principals: [{evaluator}]}}",
            "aliases:",
            "  - {pattern: prod, roles: [publisher], protected: true, approvals: 2, "
            "gates: {max_critical_safety_failures: 0}}",
            "  - {pattern: '*', roles: [publisher]}",
            "",
        ]
    )


class Release:
    """A protected ``prod`` (two reviewers sign, a release gate) and its signers' keys."""

    def __init__(self, registry: Registry, tmp: Path) -> None:
        self.reg, self.tmp = registry, tmp
        self.pub = new_publisher(registry)
        self.rev1, self.rev2 = (
            new_publisher(registry, "reviewer"),
            new_publisher(registry, "reviewer"),
        )
        self.repo = registry.repo(self.pub, policy_yaml=_policy(self.rev1.name))
        self.keys: dict[str, Path] = {}
        for who in (self.pub, self.rev1, self.rev2):
            self.keys[who.name] = tmp / f"{who.name}.key"
            save_private_key(who.key, self.keys[who.name])

        # the signers' own pinned root: what each signing command verifies first
        self.root = tmp / "root.json"
        registry.cli("trust", "root", "--out", str(self.root), check=True)

    def cli(self, who: Publisher, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"MODELWARD_TRUST_ROOT": str(self.root)}
        return self.reg.cli(*args, token=who.actor.token, env=env)

    def evaluate(self, digest: str, baseline: str | None) -> None:
        results = self.tmp / f"{unique('results')}.jsonl"
        results.write_bytes(jsonl(HEADER, cases("billing", "human", (10, 0, 0, 0))))
        extra = ("--baseline", f"{self.repo}@{baseline}") if baseline else ()
        key = str(self.keys[self.rev1.name])
        ref = f"{self.repo}@{digest}"
        attached = self.cli(
            self.rev1, "eval", "attach", ref, "--results", str(results), "--key", key, *extra
        )
        assert attached.returncode == 0, attached.stderr

    def sign(self, digest: str) -> dict[str, object]:
        answer: dict[str, object] = {}
        for reviewer in (self.rev1, self.rev2):
            signed = self.cli(
                reviewer,
                "approve",
                f"{self.repo}@{digest}",
                "--alias",
                "prod",
                "--key",
                str(self.keys[reviewer.name]),
                "--json",
            )
            assert signed.returncode == 0, signed.stderr
            answer = json.loads(signed.stdout)
        return answer

    def promote(self, digest: str) -> None:
        moved = self.cli(self.pub, "alias", "set", f"{self.repo}@prod", digest)
        assert moved.returncode == 0, moved.stderr
        assert self.sign(digest)["state"] == "published"

    def quarantine(self, digest: str) -> None:
        held = self.cli(
            self.rev1,
            "quarantine",
            f"{self.repo}@{digest}",
            "--reason",
            "bad weights",
            "--key",
            str(self.keys[self.rev1.name]),
        )
        assert held.returncode == 0, held.stderr

    def rollback(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli(self.pub, "alias", "rollback", f"{self.repo}@prod", *args)


def _released_then_quarantined(registry: Registry, tmp_path: Path) -> tuple[Release, str, str]:
    """Release 1 then release 2 promoted through their gates and signed; release 2 then
    quarantined (signed)."""
    r = Release(registry, tmp_path)
    d1, d2 = push_new(r.pub, r.repo, tmp_path), push_new(r.pub, r.repo, tmp_path)
    r.evaluate(d1, None)
    r.promote(d1)
    r.evaluate(d2, d1)
    r.promote(d2)
    r.quarantine(d2)
    return r, d1, d2


def test_rollback_after_quarantine_needs_no_new_evaluation(
    registry: Registry, tmp_path: Path
) -> None:
    r, d1, d2 = _released_then_quarantined(registry, tmp_path)
    # release 1 carries no evaluation against release 2: a promotion would be refused
    dry = r.cli(r.pub, "alias", "set", f"{r.repo}@prod", d1, "--dry-run")
    assert "skip (4c) gates: step (4c) gates: not judged: a rollback" in dry.stdout, dry.stdout
    assert "ok   (5) rollback" in dry.stdout
    assert [line[5:9] for line in dry.stdout.splitlines() if line.startswith("FAIL")] == ["(6) "]

    rolled = r.rollback("--reason", "release 2 quarantined")  # default: the previous release
    assert rolled.returncode == 0, rolled.stderr
    assert f"rollback: {r.repo}@prod -> {d1}" in rolled.stdout
    assert "promotion gates (baseline, replay, release gates) do not apply" in rolled.stdout
    assert "who must sign: the alias's signers, 2 signature(s)" in rolled.stdout
    # nothing changes about signing: proposed, until the alias's signers sign it
    assert registry.admin.get_alias(r.repo, "prod")["digest"] == d2
    assert r.sign(d1)["state"] == "published"
    state = registry.admin.get_alias(r.repo, "prod")
    assert (state["digest"], state["signed"]) == (d1, True)

    history = registry.admin.alias_history(r.repo, "prod")
    assert [h["to_digest"] for h in history] == [d1, d2, d1]
    assert history[-1]["rollback"] is True
    assert history[-1]["signed"] is not None
    events = [e for e in registry.admin.iter_audit() if e["subject"] == f"{r.repo}@prod"]
    proposed = [e for e in events if e["action"] == "alias.propose"][-1]
    assert proposed["details"]["rollback"] is True
    assert proposed["details"]["gates_skipped"] == ["4a", "4b", "4c"]
    [back] = [e for e in events if e["action"] == "alias.rollback"]
    assert back["details"]["emergency"] is True
    assert back["details"]["reason"] == "release 2 quarantined"
    assert (back["details"]["from"], back["details"]["to"]) == (d2, d1)

    # back to release 2: held under valid signatures, but quarantined
    refused = r.rollback(d2, "--json")
    assert refused.returncode == 1
    assert "bundle_quarantined" in refused.stderr, refused.stderr
    assert registry.admin.get_alias(r.repo, "prod")["digest"] == d1


def test_rollback_to_a_digest_never_held_under_valid_signatures_is_refused(
    registry: Registry, tmp_path: Path
) -> None:
    r = Release(registry, tmp_path)
    d1, d2, d3 = (push_new(r.pub, r.repo, tmp_path) for _ in range(3))
    r.evaluate(d1, None)
    r.promote(d1)

    never = r.rollback(d2, "--json")  # the alias never pointed at it: judged as a promotion
    assert never.returncode == 1
    assert "gates_failed" in never.stderr, never.stderr

    # a database writer records d3 as an earlier target: no signed version named it, so the
    # "rollback" is judged as a promotion, and its gates refuse it
    engine = make_engine(registry.database_url)
    try:
        with engine.begin() as conn:
            alias_id = conn.execute(
                text(
                    "SELECT a.id FROM aliases a JOIN repositories r ON r.id = a.repo_id "
                    "WHERE r.name = :repo AND a.name = 'prod'"
                ),
                {"repo": r.repo},
            ).scalar_one()
            conn.execute(
                text(
                    "INSERT INTO alias_history (alias_id, version, from_digest, to_digest, "
                    "actor, at, reason, rollback) VALUES (:a, 1000, NULL, :d, 'writer', :at, "
                    "NULL, false)"
                ),
                {"a": alias_id, "d": d3, "at": datetime.now(UTC)},
            )
    finally:
        engine.dispose()
    forged = r.rollback(d3, "--json")
    assert forged.returncode == 1
    assert "gates_failed" in forged.stderr, forged.stderr
    assert registry.admin.get_alias(r.repo, "prod")["digest"] == d1
