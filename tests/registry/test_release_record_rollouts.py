"""The rollouts of a release in its record (docs/release.md#rollouts), against a real
``serve`` on SQLite and PostgreSQL, driven by ``modelward rollout start/advance/abort``.

The story, once per database: ``A`` moves to d1 (signed move 1); a rollout to d2 goes 5%,
20%, then aborts; a rollout to d3 goes 5 -> 20 -> 50 -> 100; ``A`` moves to d3 (signed move
2); a rollout to d1 starts from d3 and is aborted: a canary after the alias's last move. The
record of move 2 holds the two rollouts between the moves, with their signed plans and
steps and the abort reason, and (``later_rollouts``) the canary run from d3 since;
``release verify`` checks them offline. Each tampering test is named after its attack.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.keys import load_private_key, save_private_key
from tests.registry.conftest import Publisher, Registry, new_publisher, push_new, unique

OFFLINE = {"MODELWARD_URL": "http://127.0.0.1:9"}  # verify never reaches a registry
OPEN = (
    "version: 1\ntrust_registered_signers: true\naliases:\n  - {pattern: '*', roles: [publisher]}\n"
)
ABORT_REASON = "TTFT p95 over 800ms at 20%"
LATE_REASON = "canary after the last move: errors up"


@dataclass
class World:
    reg: Registry
    tmp: Path
    repo: str
    alias: str
    pub: Publisher
    key: Path
    root: Path
    d1: str
    d2: str
    d3: str
    record: Path  # the record of signed move 2
    record_out: str  # what `release record` printed
    statuses: list[dict[str, Any]]  # the registry's rollout history when the record was made

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.reg.cli(*args, token=self.pub.actor.token, check=check)

    def verify(self, path: Path) -> subprocess.CompletedProcess[str]:
        return self.reg.cli(
            "release", "verify", str(path), "--trust-root", str(self.root), "--json", env=OFFLINE
        )


def _roll(world: World, to: str, advances: int, abort: str | None = None) -> None:
    ref = f"{world.repo}@{world.alias}"
    world.cli("rollout", "start", ref, "--to", to, "--key", str(world.key))
    for n in range(advances):
        world.cli("rollout", "advance", ref, "--reason", f"step {n}: errors flat")
    if abort is not None:
        world.cli("rollout", "abort", ref, "--reason", abort)


def _make_record(world: World, version: int) -> tuple[Path, str]:
    out = world.tmp / f"{unique('rec')}.json"
    made = world.reg.cli(
        "release", "record", f"{world.repo}@{world.alias}", "--version", str(version),
        "--key", str(world.key), "--out", str(out), "--markdown", str(out.with_suffix(".md")),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return out, made.stdout


@pytest.fixture(scope="module")
def world(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> World:
    tmp = tmp_path_factory.mktemp(f"release-rollouts-{registry.kind}")
    pub = new_publisher(registry)
    repo = registry.repo(pub, policy_yaml=OPEN)
    key = tmp / "pub.key"
    save_private_key(pub.key, key)
    root = tmp / "root.json"
    assert registry.cli("trust", "root", "--out", str(root)).returncode == 0
    d1, d2, d3 = (push_new(pub, repo, tmp) for _ in range(3))
    world = World(registry, tmp, repo, unique("a"), pub, key, root, d1, d2, d3, root, "", [])
    ref = f"{repo}@{world.alias}"
    world.cli("alias", "set", ref, d1, "--key", str(key))  # signed move 1
    _roll(world, d2, 2, abort=ABORT_REASON)  # 5%, 20%, aborted
    _roll(world, d3, 4)  # 5 -> 20 -> 50 -> 100, completed
    world.cli("alias", "set", ref, d3, "--key", str(key))  # signed move 2
    _roll(world, d1, 1, abort=LATE_REASON)  # from d3, after the last move: a later rollout
    world.statuses = pub.actor.client.rollout_history(repo, world.alias)["rollouts"]
    world.record, world.record_out = _make_record(world, 2)
    return world


def _predicate(path: Path) -> dict[str, Any]:
    statement = json.loads(base64.b64decode(json.loads(path.read_bytes())["payload"]))
    predicate: dict[str, Any] = statement["predicate"]
    return predicate


def _decoded(entry: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(base64.b64decode(entry["data"]))
    return doc


def _resign(world: World, change: Callable[[dict[str, Any]], None]) -> Path:
    """The record of move 2 with its predicate changed by ``change`` and signed again with
    the same key: what someone holding a record-signing key, but not the TUF keys (nor the
    registry's online key), could make."""
    return _resigned(world.record, world.key, world.tmp, change)


def _resigned(record: Path, key: Path, tmp: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    from modelward.attest.release import write_record

    envelope = json.loads(record.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    change(statement["predicate"])
    out = tmp / f"{unique('forged')}.json"
    out.write_bytes(write_record(json.dumps(statement).encode(), [load_private_key(key)]))
    return out


def _refused(world: World, path: Path) -> dict[str, Any]:
    done = world.verify(path)
    assert done.returncode == 1, done.stdout + done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def _blob(data: bytes, **extra: Any) -> dict[str, Any]:
    from modelward.attest.release._model import blob

    return blob(data, **extra)


# -- the record ----------------------------------------------------------------------------
def test_record_after_an_aborted_and_a_completed_rollout_verifies_offline(world: World) -> None:
    done = world.verify(world.record)
    assert done.returncode == 0, done.stdout + done.stderr
    notes = json.loads(done.stdout)["notes"]
    assert any("rollouts[0].registry" in n and "unsigned" in n for n in notes)
    rollouts = _predicate(world.record)["rollouts"]
    assert [r["outcome"] for r in rollouts] == ["aborted", "promoted"]
    plans = [_decoded(r["plan"]) for r in rollouts]
    assert [(p["stable"], p["candidate"]) for p in plans] == [
        (world.d1, world.d2),
        (world.d1, world.d3),
    ]
    steps = [
        [(s["index"], s["weight"], s["state"]) for s in map(_decoded, r["steps"])] for r in rollouts
    ]
    assert steps == [
        [(0, 5, "running"), (1, 20, "running"), (1, 0, "aborted")],
        [(0, 5, "running"), (1, 20, "running"), (2, 50, "running"), (3, 100, "completed")],
    ]
    assert rollouts[0]["abort_reason"] == ABORT_REASON
    assert rollouts[1]["abort_reason"] is None
    # the registry's word, carried and labelled: times, verdicts, the rollback figures
    by_id = {s["rollout_id"]: s for s in world.statuses}
    for r in rollouts:
        status = by_id[r["rollout_id"]]
        assert r["registry"]["signed"] is False
        assert r["registry"]["history"] == status["history"]
        assert r["registry"]["rollback"] == status.get("rollback")
        assert [s["tuf_version"] for s in r["steps"]] == [
            h["tuf_version"] for h in status["history"]
        ]
    # the rollouts' audit events travel with them (verbatim, their hashes checked)
    events = [
        (e["action"], e["details"].get("rollout_id"), e["details"].get("reason"))
        for e in _predicate(world.record)["audit"]["events"]
        if e["action"].startswith("rollout.")
    ]
    ids = [r["rollout_id"] for r in rollouts + _predicate(world.record)["later_rollouts"]]
    assert ("rollout.abort", ids[0], ABORT_REASON) in events
    assert {a for a, _, _ in events} == {"rollout.start", "rollout.advance", "rollout.abort"}
    assert {i for _, i, _ in events} == set(ids)
    # the next release's rollout (from d3) is not this one's
    assert plans[0]["rollout_id"] != world.statuses[-1]["rollout_id"]
    assert len(world.statuses) == 3
    assert f"rollout {rollouts[0]['rollout_id']} (aborted)" in world.record_out
    assert f"abort reason (signed): {ABORT_REASON}" in world.record_out
    markdown = world.record.with_suffix(".md").read_text()
    assert "## Rollouts" in markdown
    assert f"abort reason (signed): {ABORT_REASON}" in markdown
    assert "registry (unsigned)" in markdown


def test_record_of_the_first_move_holds_no_rollout(world: World) -> None:
    path, _ = _make_record(world, 1)
    assert world.verify(path).returncode == 0
    predicate = _predicate(path)
    assert predicate["rollouts"] == []
    # the rollouts run from d1 before move 2: the same ones move 2's record led with
    later = predicate["later_rollouts"]
    assert [(r["rollout_id"], r["outcome"]) for r in later] == [
        (r["rollout_id"], r["outcome"]) for r in _predicate(world.record)["rollouts"]
    ]


def test_a_canary_aborted_after_the_last_move_is_in_the_latest_record(world: World) -> None:
    """Issue 37 item 6: the canary from d3 aborted after move 2 (the alias's last) was in no
    record ("no rollout of the alias between the previous move and this one")."""
    (late,) = _predicate(world.record)["later_rollouts"]
    assert late["rollout_id"] == world.statuses[-1]["rollout_id"]
    assert late["outcome"] == "aborted"
    assert late["abort_reason"] == LATE_REASON
    assert _decoded(late["plan"])["stable"] == world.d3
    assert [(s["index"], s["state"]) for s in map(_decoded, late["steps"])] == [
        (0, "running"),
        (0, "aborted"),
    ]
    assert late["verdicts"] == []  # a person's steps: no verdict the analysis acted on
    assert "run from this release since its move:" in world.record_out
    assert f"abort reason (signed): {LATE_REASON}" in world.record_out
    done = world.verify(world.record)
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(n.startswith("later_rollouts[0]:") for n in json.loads(done.stdout)["notes"])


@pytest.mark.sqlite_only
def test_a_canary_after_the_last_move_hidden_from_the_record_is_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        del p["later_rollouts"][0]

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "later_rollouts")
    assert world.statuses[-1]["rollout_id"] in answer["error"]


@pytest.mark.sqlite_only
def test_a_later_canary_abort_reason_edited_is_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        p["later_rollouts"][0]["abort_reason"] = "planned stop"

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "later_rollouts[0].abort_reason")


# -- attacks: each re-signs the record of move 2 with a record-signing key ----------------
@pytest.mark.sqlite_only
def test_a_step_not_signed_is_refused(world: World) -> None:
    from modelward.attest.rollout import make_step, parse_plan

    def forge(p: dict[str, Any]) -> None:
        r = p["rollouts"][0]
        plan = parse_plan(base64.b64decode(r["plan"]["data"]))
        jump = make_step(plan, index=2, state="running", reason="straight to 50%")
        r["steps"][2] = _blob(jump.raw, tuf_version=r["steps"][2]["tuf_version"])
        r["abort_reason"] = None

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[0].steps[2]")
    assert "a step not signed" in answer["error"]


@pytest.mark.sqlite_only
def test_steps_reordered_are_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        steps = p["rollouts"][1]["steps"]
        steps[1], steps[2] = steps[2], steps[1]

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[1].steps[1]")


@pytest.mark.sqlite_only
def test_a_step_replayed_is_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        steps = p["rollouts"][1]["steps"]
        steps.append(steps[0])  # 5% again after 100%

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[1].steps[4]")


@pytest.mark.sqlite_only
def test_an_abort_reason_edited_is_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        p["rollouts"][0]["abort_reason"] = "routine maintenance"

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[0].abort_reason")
    assert ABORT_REASON in answer["error"]


@pytest.mark.sqlite_only
def test_a_plan_swapped_for_another_signed_plan_of_another_rollout_is_refused(
    world: World,
) -> None:
    """The aborted rollout's plan (signed by the alias's role, too) in place of the one
    that promoted d3: the record would say the promoted rollout was another."""

    def forge(p: dict[str, Any]) -> None:
        p["rollouts"][1]["plan"] = p["rollouts"][0]["plan"]

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[1].plan")


@pytest.mark.sqlite_only
def test_a_plan_of_the_next_release_is_refused(world: World) -> None:
    """The rollout from d3 (signed after move 2) claimed as one of move 2's."""
    nxt = world.statuses[-1]
    plan_bytes = json.dumps(nxt["plan"], sort_keys=True, separators=(",", ":")).encode()

    def forge(p: dict[str, Any]) -> None:
        p["rollouts"][1]["plan"] = _blob(
            plan_bytes, role_version=p["rollouts"][1]["plan"]["role_version"]
        )

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[1].plan")


@pytest.mark.sqlite_only
def test_an_aborted_rollout_hidden_from_the_record_is_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        del p["rollouts"][0]

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[0].plan")


@pytest.mark.sqlite_only
def test_an_outcome_edited_is_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        p["rollouts"][0]["outcome"] = "superseded"

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[0].outcome")


@pytest.mark.sqlite_only
def test_figures_edited_are_not_a_signature_failure_but_are_labelled_unsigned(
    world: World,
) -> None:
    def forge(p: dict[str, Any]) -> None:
        p["rollouts"][0]["registry"]["rollback"] = {"detection_seconds": 0.1}
        p["rollouts"][0]["registry"]["history"][0]["verdict"] = "pass"

    done = world.verify(_resign(world, forge))
    assert done.returncode == 0, done.stdout + done.stderr
    notes = json.loads(done.stdout)["notes"]
    assert any(
        n.startswith("rollouts[0].registry:") and "registry's measurements (unsigned)" in n
        for n in notes
    )


@pytest.mark.sqlite_only
def test_registry_context_claimed_as_signed_is_refused(world: World) -> None:
    def forge(p: dict[str, Any]) -> None:
        p["rollouts"][0]["registry"]["signed"] = True

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[0].registry.signed")


@pytest.mark.sqlite_only
def test_a_step_the_online_key_signed_after_an_abort_is_refused(world: World) -> None:
    """Whoever holds the registry's online key signs one more version of
    ``ORG:NAME@=rollout``: the aborted rollout at 50% again. Every signature holds; the
    record still fails, as a worker that saw the abort would refuse the step."""
    from tuf.api.metadata import Metadata, TargetFile, Targets

    from modelward.attest.rollout import make_step, parse_plan
    from modelward.attest.rollout.paths import step_path
    from modelward.attest.tuf import tuf_signer

    online = load_private_key(world.reg.server.data_dir / "tuf-keys" / "aliases.key")

    def forge(p: dict[str, Any]) -> None:
        r = p["rollouts"][0]
        plan = parse_plan(base64.b64decode(r["plan"]["data"]))
        restart = make_step(plan, index=2, state="running", reason="back on, quietly")
        last = Metadata[Targets].from_bytes(
            base64.b64decode(r["rollout_role"]["versions"][-1]["data"])
        )
        path = step_path(world.repo, world.alias)
        last.signed.version += 1
        last.signed.targets[path] = TargetFile.from_data(path, restart.raw, ["sha256"])
        last.signed.targets[path].unrecognized_fields["custom"] = {"step": restart.raw.decode()}
        last.signatures.clear()
        last.sign(tuf_signer(online))
        r["rollout_role"]["versions"].append(_blob(last.to_bytes(), version=last.signed.version))
        r["steps"].append(_blob(restart.raw, tuf_version=last.signed.version))

    answer = _refused(world, _resign(world, forge))
    assert (answer["check"], answer["field"]) == (6, "rollouts[0].steps[3]")
    assert "after the rollout was aborted" in answer["error"]


@dataclass
class RealAbort:
    reg: Registry
    record: Path
    root: Path
    key: Path
    status: dict[str, Any]
    out: str


@pytest.fixture(scope="module")
def real_abort(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> RealAbort:
    """Workers send signed reports, the analysis fails the 5% step and aborts, the canary
    comes back to the stable digest (the route converged); then the alias moves on, and the
    record of that move is made."""
    from tests.rollouts.test_analysis import analysis_canary, analyze, good

    tmp_path = tmp_path_factory.mktemp(f"real-abort-{registry.kind}")
    c = analysis_canary(registry, tmp_path)
    canary, stable = c.worker(candidate=True), c.worker(candidate=False)
    canary.report(c.candidate, requests=500, errors=100, retries=40)
    good(stable, c.stable)
    analyze(c)
    good(canary, c.stable)
    good(stable, c.stable)
    analyze(c)
    status = c.status()
    assert status["state"] == "aborted"
    assert status["rollback"]["converged_at"] is not None
    later = push_new(c.publisher, c.repo, tmp_path)
    c.publisher.actor.client.set_alias(c.repo, c.alias, later)  # online: signed at once
    out, root = tmp_path / "rec.json", tmp_path / "root.json"
    assert registry.cli("trust", "root", "--out", str(root)).returncode == 0
    targets_key = registry.server.data_dir / "tuf-keys" / "targets.key"
    made = registry.cli(
        "release", "record", f"{c.repo}@{c.alias}", "--key", str(targets_key), "--out", str(out)
    )
    assert made.returncode == 0, made.stderr
    return RealAbort(registry, out, root, targets_key, status, made.stdout)


def test_figures_of_a_real_abort_are_carried_labelled_unsigned(real_abort: RealAbort) -> None:
    """The record carries the signed abort reason, the verdict the abort acted on (signed in
    its reason) and the registry's rollback figures exactly as its status shows them,
    labelled unsigned."""
    registry, out, root, status = (
        real_abort.reg,
        real_abort.record,
        real_abort.root,
        real_abort.status,
    )
    assert "rollback figures (the registry's measurements, unsigned)" in real_abort.out
    assert "verdict (signed): fail at step 0: analysis failed at step 0 (5%)" in real_abort.out
    done = registry.cli("release", "verify", str(out), "--trust-root", str(root), env=OFFLINE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "registry's measurements (unsigned)" in done.stdout
    (rollout,) = _predicate(out)["rollouts"]
    assert rollout["outcome"] == "aborted"
    assert rollout["abort_reason"] == status["history"][-1]["reason"]
    assert "analysis failed at step 0 (5%)" in rollout["abort_reason"]
    assert rollout["registry"]["signed"] is False
    carried = rollout["registry"]["rollback"]
    fixed = ("detected_at", "decided_at", "converged_at", "capacity_before", "retry_volume")
    # (the controller may fill recovered_at meanwhile: a later figure, not a changed one)
    assert {k: carried[k] for k in fixed} == {k: status["rollback"][k] for k in fixed}
    assert carried["detected_at"] is not None
    assert [h["verdict"] for h in rollout["registry"]["history"]] == [
        h["verdict"] for h in status["history"]
    ]
    (verdict,) = rollout["verdicts"]
    assert (verdict["step"], verdict["index"], verdict["verdict"]) == (0, 0, "fail")
    assert verdict["reason"] == rollout["abort_reason"]


@pytest.mark.sqlite_only
def test_a_verdict_edited_is_refused(real_abort: RealAbort) -> None:
    """The analysis failed the step and the registry signed the abort with that reason: a
    record that says the step passed (in its signed verdicts, or on the registry's row of
    the judged step) fails, naming the field."""
    tmp = real_abort.record.parent

    def signed_verdict(p: dict[str, Any]) -> None:
        p["rollouts"][0]["verdicts"][0]["verdict"] = "pass"

    def row_verdict(p: dict[str, Any]) -> None:
        p["rollouts"][0]["registry"]["history"][0]["verdict"] = "pass"

    for change, field in (
        (signed_verdict, "rollouts[0].verdicts[0]"),
        (row_verdict, "rollouts[0].registry.history[0].verdict"),
    ):
        forged = _resigned(real_abort.record, real_abort.key, tmp, change)
        done = real_abort.reg.cli(
            "release", "verify", str(forged), "--trust-root", str(real_abort.root), "--json",
            env=OFFLINE,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        answer = json.loads(done.stdout)
        assert (answer["check"], answer["field"]) == (6, field)
        assert "analysis failed at step 0" in answer["error"]
