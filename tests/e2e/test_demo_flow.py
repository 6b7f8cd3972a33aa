"""The demo's whole scenario through the real CLI, in real processes (issue 6).

One module-scoped run of ``python -m demo --skip-vllm`` (registry subprocess, every step a
``modelward`` subprocess); each test asserts one outcome of the story from its output and its
step results, and a few facts are re-checked independently afterwards against the registry
database the demo left behind.

The demo's two vLLM steps (``modelward boot`` with a baseline, then a reply) are skipped here
to keep ``make test`` affordable: they run the same commands that tests/loader/
test_boot_vllm.py and test_engine_vllm.py run with real vLLM (boot, baseline recorded and
compared, a tampered file refused before vLLM opens it, generation under the hardened
environment); ``make demo`` runs them.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# one xdist worker runs the whole module, so the demo (its module fixture, ~3 min) runs once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo")]

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELWARD = str(Path(sys.executable).parent / "modelward")
STEPS = (
    "Start a registry",
    "Principals and tokens",
    "Build a bundle",
    "Signing keys",
    "Sign provenance",
    "Push",
    "Refused alias moves",
    "prod proposed",
    "Reviewers sign",
    "Worker pulls and verifies",
    "Boot vLLM and record a baseline",
    "Generate a reply",
    "Tampered blob refused",
    "Release v2",
    "Quarantine",
    "prod rolled back",
    "Canary rollout",
    "Canary aborted",
    "Audit",
)
VLLM_STEPS = {"Boot vLLM and record a baseline", "Generate a reply"}


@dataclass(frozen=True)
class DemoRun:
    returncode: int
    output: str
    steps: dict[str, dict[str, str]]
    workdir: Path

    def commands(self) -> list[str]:
        return [
            line.strip()[2:] for line in self.output.splitlines() if line.strip().startswith("$ ")
        ]


def audit_actions(demo: DemoRun) -> list[str]:
    """The actions of the audit log the demo left behind, in order."""
    db = sqlite3.connect(demo.workdir / "data" / "registry.db")
    try:
        return [row[0] for row in db.execute("SELECT action FROM audit_events ORDER BY seq")]
    finally:
        db.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    base = tmp_path_factory.mktemp("demo")
    workdir = base / "demo"
    summary = base / "summary.json"
    argv = [
        sys.executable,
        "-m",
        "demo",
        "--workdir",
        str(workdir),
        "--keep",
        "--summary-json",
        str(summary),
    ]
    argv.append("--skip-vllm")  # see the module doc
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELWARD_")}
    proc = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=3000, check=False
    )
    steps = {s["title"]: s for s in json.loads(summary.read_text())} if summary.exists() else {}
    return DemoRun(proc.returncode, proc.stdout + proc.stderr, steps, workdir)


def test_demo_exits_zero_and_every_step_has_its_outcome(demo: DemoRun) -> None:
    assert demo.returncode == 0, demo.output[-4000:]
    assert list(demo.steps) == list(STEPS)
    for number, (title, step) in enumerate(demo.steps.items(), start=1):
        assert f"Step {number}. {title}" in demo.output
        if title in VLLM_STEPS:
            assert step["status"] == "skipped"
            assert f"SKIPPED: {step['outcome']}" in demo.output
        else:
            assert step["status"] == "ok", (title, step["outcome"])
            assert f"OK: {step['outcome']}" in demo.output
    assert "every step had the expected outcome" in demo.output


def test_each_step_prints_the_command_it_ran(demo: DemoRun) -> None:
    commands = demo.commands()
    for expected in (
        "modelward serve --data-dir $DEMO/data",
        "modelward admin principal create",
        "modelward bundle init $DEMO/model",
        "modelward key register",
        "modelward bundle sign",
        "modelward push $DEMO/model acme/tiny-llama",
        "modelward approve",
        "modelward alias set acme/tiny-llama@prod",
        "modelward alias pending",
        "modelward trust root",
        "modelward pull acme/tiny-llama@prod",
        "modelward verify",
        "modelward quarantine",
        "modelward alias rollback",
        "modelward audit verify",
    ):
        assert any(expected in c for c in commands), expected


def test_no_secret_is_printed(demo: DemoRun) -> None:
    assert "mwt_" not in demo.output  # registry tokens are mwt_<id>_<secret>
    assert "MODELWARD_TOKEN=$ALICE_TOKEN" in demo.output
    body = [line for line in demo.output.splitlines() if not line.startswith(("DEMO=", "kept "))]
    assert not [line for line in body if str(demo.workdir) in line]


def test_refused_alias_moves_exit_1(demo: DemoRun) -> None:
    out = demo.output
    assert re.search(r"worker-1 \(reader\) may not move acme/tiny-llama@prod", out)
    assert "the publisher of a bundle may not approve" in out or "may not do this" in out
    assert "is not one of the keys role acme:tiny-llama@prod is delegated to" in out
    assert out.count("-> exit 1 (refused as expected)") >= 5


def test_prod_moves_only_with_two_reviewers_signatures(demo: DemoRun) -> None:
    out = demo.output
    assert "signatures 0/2" in out  # bob's move is a proposal
    assert "signatures 1/2" in out  # carol's signature alone publishes nothing
    assert out.count("published: #") >= 3  # v1, v2 and the rollback, each at two signatures
    assert "--trust-root" in out  # the worker resolves prod through the pinned root


def test_tampered_blob_refused(demo: DemoRun) -> None:
    assert re.search(r"model\.safetensors: digest mismatch", demo.output)
    assert demo.steps["Tampered blob refused"]["status"] == "ok"


def test_quarantine_and_rollback(demo: DemoRun) -> None:
    assert "reviewer found an unexpected weight change" in demo.output
    assert "listed by the signed quarantine role" in demo.output
    actions = audit_actions(demo)
    for action in (
        "repo.create",
        "bundle.quarantine",
        "alias.propose",
        "tuf.sign",
        "tuf.publish",
        "alias.rollback",
        "denied",
    ):
        assert action in actions, action


def test_canary_step_then_abort(demo: DemoRun) -> None:
    """A rollout of prod followed by a rehearsal fleet of 3 stand-in workers: the plan
    signed by both reviewers, one 5% step (one worker of 3), then the analysis's abort from
    the fleet's reports, every worker back on the stable bundle (issues 26, 37)."""
    commands = demo.commands()
    for expected in (
        "python -m modelward.rehearsal fleet acme/tiny-llama@prod",
        "modelward rollout start acme/tiny-llama@prod",
        "modelward trust sign",
        "modelward rollout advance acme/tiny-llama@prod",
    ):
        assert any(expected in c for c in commands), expected
    assert not any("modelward rollout abort" in c for c in commands)  # nobody typed a reason
    assert "5%: 1 of 3, 20%: 1 of 3, 50%: 2 of 3, 100%: 3 of 3 workers" in demo.output
    assert "signed step 0 (5% candidate), running" in demo.output
    assert "signed step 0 (0% candidate), aborted" in demo.output
    assert "from the fleet's reports" in demo.steps["Canary aborted"]["outcome"]
    db = sqlite3.connect(demo.workdir / "data" / "registry.db")
    try:  # the abort is the analysis's, with its reason: nobody typed one
        aborts = db.execute(
            "SELECT actor, details FROM audit_events WHERE action = 'rollout.abort'"
        ).fetchall()
    finally:
        db.close()
    assert [actor for actor, _ in aborts] == ["rollout-controller"], aborts
    assert "analysis failed at step 0 (5%)" in aborts[0][1], aborts
    actions = audit_actions(demo)
    for action in ("rollout.start", "rollout.advance", "rollout.abort"):
        assert action in actions, action


def test_audit_chain_verifies_and_catches_an_edit(demo: DemoRun) -> None:
    """Independent of the demo: its database verifies, and an edited row is named."""
    db_path = demo.workdir / "data" / "registry.db"
    url = f"sqlite:///{db_path}"
    ok = subprocess.run(
        [MODELWARD, "audit", "verify", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "audit chain ok" in ok.stdout
    db = sqlite3.connect(db_path)
    try:
        db.execute("UPDATE audit_events SET actor = 'mallory' WHERE seq = 5")
        db.commit()
    finally:
        db.close()
    broken = subprocess.run(
        [MODELWARD, "audit", "verify", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert broken.returncode == 1
    assert "5" in broken.stdout + broken.stderr
