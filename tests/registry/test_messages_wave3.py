"""Messages, wave 3 (issue 22 item 5): what the CLI prints when it refuses, against a real
registry (``modelward serve`` on loopback, SQLite).

- a ``gates_failed`` refusal prints a table of the gates, not several KB of JSON on one line
  (``--json`` keeps the whole detail);
- ``eval attach`` says which gate verdicts of the repository's gated aliases it changed;
- ``audit key`` never reads, or offers to create, a key in the current directory's
  ``.modelward``: it needs to be told where the registry's data is;
- a policy file larger than the registry accepts is refused by its size before it is read or
  sent, naming the file and the limit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from modelward.attest.policy import MAX_POLICY_BYTES
from modelward.client.api import NotFoundError
from tests import forkserver
from tests.attest.test_evaluation import worked_example
from tests.registry.conftest import Registry, push_new, unique
from tests.registry.test_release_gates import _attach, _results, _setup

TABLE_HEADER = "gate"


def _gate_rows(stderr: str) -> dict[str, list[str]]:
    """The table's rows by gate name (the lines after the header, before the notes)."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["gate", "verdict"])
    rows = {}
    for line in lines[start + 1 :]:
        cells = line.split()
        if not cells or line.startswith(("evaluations counted", "not counted", "(")):
            break
        rows[cells[0]] = cells[1:]
    return rows


def test_gates_failed_prints_a_table_not_a_json_line(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    pub, evaluator, key, repo = _setup(fresh_registry, tmp_path)
    baseline = push_new(pub, repo, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    results = _results(tmp_path, worked_example())
    attached = _attach(
        fresh_registry, evaluator, key, f"{repo}@{digest}", results, "--baseline",
        f"{repo}@{baseline}",
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    moved = fresh_registry.cli("alias", "set", f"{repo}@prod", digest, token=pub.actor.token)
    assert moved.returncode == 1
    assert moved.stdout == ""
    assert moved.stderr.startswith("error: 422 gates_failed: "), moved.stderr
    assert "do not promote: max_critical_safety_failures FAIL" in moved.stderr
    assert '"gates"' not in moved.stderr
    assert '"not_counted"' not in moved.stderr
    rows = _gate_rows(moved.stderr)
    # gate, verdict, observed, bound (more cases: "-" when the gate has no interval)
    assert rows["max_critical_safety_failures"][:3] == ["FAIL", "2", "0"], rows
    assert rows["min_deterministic_pass_rate"][0] == "PASS", rows
    assert len(rows) == 10, rows  # the worked example's 10 gates, the three slices apart
    assert max(len(line) for line in moved.stderr.splitlines()[1:]) < 120
    # --json keeps the whole detail
    as_json = fresh_registry.cli(
        "alias", "set", f"{repo}@prod", digest, "--json", token=pub.actor.token
    )
    assert as_json.returncode == 1
    assert '"not_counted"' in as_json.stderr
    assert '"gates"' in as_json.stderr


def test_eval_attach_shows_the_gate_verdicts_it_changes(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    pub, evaluator, key, repo = _setup(fresh_registry, tmp_path)
    baseline = push_new(pub, repo, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    attached = _attach(
        fresh_registry, evaluator, key, f"{repo}@{digest}",
        _results(tmp_path, worked_example(critical=0)), "--baseline", f"{repo}@{baseline}",
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    out = attached.stdout
    assert f"gates of {repo}@prod for {digest}: do not promote -> promote" in out, out
    assert "  max_critical_safety_failures: FAIL -> PASS" in out, out
    assert "no gate verdict changed" not in out


def _audit_key(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELWARD_")}
    return forkserver.run(["audit", "key", *args], env, timeout=120, cwd=cwd)


def test_audit_key_never_reads_or_creates_a_stray_key_in_the_current_directory(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    # the registry signs a checkpoint: its key is in its own data dir
    signed = fresh_registry.admin.audit_checkpoint()
    here = tmp_path / "elsewhere"
    (here / ".modelward").mkdir(parents=True)
    stray = here / ".modelward" / "audit-checkpoint.key"
    made = _audit_key(here, "--key-file", str(stray), "--create", "--name", "stray.example/a")
    assert made.returncode == 0, made.stderr
    stray_key = made.stdout.strip()
    # with no flag: a usage error naming what to give, neither the stray key nor a new one
    for args in ((), ("--create",)):
        refused = _audit_key(here, *args)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stdout == ""
        assert "--data-dir" in refused.stderr
        assert ".modelward is never assumed" in refused.stderr
        assert "--create" not in refused.stderr
    assert sorted(p.name for p in (here / ".modelward").iterdir()) == ["audit-checkpoint.key"]
    # a data dir with no key yet: no suggestion to create one there
    empty = tmp_path / "empty-data"
    empty.mkdir()
    missing = _audit_key(here, "--data-dir", str(empty))
    assert missing.returncode == 1
    assert f"no checkpoint key at {empty.resolve()}" in missing.stderr, missing.stderr
    assert "--create" not in missing.stderr
    assert not any(empty.iterdir())
    # the registry's data dir: the key its checkpoints are signed with
    real = _audit_key(here, "--data-dir", str(fresh_registry.server.data_dir))
    assert real.returncode == 0, real.stderr
    assert real.stdout.strip() == signed["verifier_key"] != stray_key


def test_oversized_policy_is_refused_by_size_before_upload(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    policy = tmp_path / "huge-policy.yaml"
    with policy.open("wb") as fh:  # 47 MB, sparse: only its size is ever looked at
        fh.truncate(47_000_000)
    name = f"{unique('o')}/{unique('m')}"
    mark = max([0, *(int(e["seq"]) for e in fresh_registry.admin.iter_audit())])
    refused = fresh_registry.cli("repo", "create", name, "--policy", str(policy))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert str(policy) in refused.stderr
    assert f"larger than the {MAX_POLICY_BYTES} bytes" in refused.stderr
    assert "47000000 bytes" in refused.stderr
    with pytest.raises(NotFoundError):
        fresh_registry.admin.get_repo(name)
    assert list(fresh_registry.admin.iter_audit(after=mark)) == []
    # a policy within the limit is read and sent
    small = tmp_path / "small.yaml"
    small.write_text(
        "version: 1\ntrust_registered_signers: true\n"
        "aliases:\n  - {pattern: '*', roles: [publisher]}\n"
    )
    created = fresh_registry.cli("repo", "create", name, "--policy", str(small))
    assert created.returncode == 0, created.stderr
