"""Fleets of 3 and of 20 serving workers following a rollout end to end (docs/rollouts.md,
docs/loader.md#following-a-rollout): a real registry (``modelward serve``, SQLite, its
rollout controller judging every second), worker processes (``python -m
modelward.rehearsal worker``: the real ``loader.follow.Follower``, real TUF resolution from
a pinned root, real pulls and verification, each with its own cache and its own registered
worker key, each under its own principal) serving the rehearsal's stand-in engine whose
latency and errors come from the bundle it serves, and real signed reports every second.

A good candidate goes 5 -> 20 -> 50 -> 100, each step's cohort the one the signed plan's
fleet gives (``attest.rollout.resolve_digest``: at 5% one worker of 3 and one of 20, never
none); a bad one (errors and TTFT over the thresholds) aborts at 5 with the reason, every
worker back on the stable digest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.keys import generate_private_key, keyid, public_key_pem, save_private_key
from modelward.attest.rollout import (
    RolloutPlan,
    canonical_json,
    make_step,
    parse_plan,
    resolve_digest,
)
from modelward.attest.spec import render_spec_template
from modelward.client.api import RegistryClient
from modelward.client.errors import ConflictError
from modelward.loader.tuf_resolve import metadata_dir
from modelward.registry.settings import Settings
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    start_registry,
    unique,
)
from tests.tuf.test_registry_attacks_tuf import new_reviewer, sign

pytestmark = [pytest.mark.sqlite_only, pytest.mark.xdist_group("fleet")]

ROOT = Path(__file__).resolve().parents[2]
FLEET = 20
STEPS = [5, 20, 50, 100]
WINDOW = 3  # seconds: the plan's analysis window
POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, reviewer], protected: true, approvals: 1}\n"
    "  - {pattern: '*', roles: [publisher]}\n"
)
ANALYSIS = json.dumps({"thresholds": {"error_rate": {"max": 0.1}, "ttft_p95_ms": {"max": 250}}})
GOOD = {"latency_ms": 40, "error_rate": 0.0}
BAD = {"latency_ms": 400, "error_rate": 0.4}
CONTROLLER = "rollout_analysis_seconds" in Settings.model_fields
DEADLINE = 300.0  # seconds for a rollout or a boot: a hang guard on a shared machine


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """One registry for the module; its controller judges every second."""
    env = {"MODELWARD_ROLLOUT_SILENT_AFTER_SECONDS": "5"}
    if CONTROLLER:
        env["MODELWARD_ROLLOUT_ANALYSIS_SECONDS"] = "1"
    registry = start_registry("sqlite", tmp_path_factory.mktemp("fleet"), None, extra_env=env)
    try:
        yield registry
    finally:
        registry.close()
        registry.server.stop()


def _push(publisher: Publisher, repo: str, root: Path, behaviour: dict[str, float]) -> str:
    directory = make_bundle_dir(root / unique("b"))
    (directory / "modelward.yaml").write_text(render_spec_template(dtype="float32"))
    (directory / "standin.json").write_text(json.dumps(behaviour))
    return publisher.actor.client.push(directory, repo, sign=publisher.sign).digest


@dataclass
class Worker:
    keyid: str
    ready: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def digest(self) -> str | None:
        try:
            return str(json.loads(self.ready.read_text())["digest"])
        except (FileNotFoundError, ValueError, KeyError):
            return None  # switching (the readiness file is removed meanwhile)


@dataclass
class Fleet:
    reg: Registry
    repo: str
    publisher: Publisher
    reviewer: Publisher
    stable: str
    tmp: Path
    workers: list[Worker] = field(default_factory=list)
    plan: RolloutPlan | None = None  # the plan of the rollout started last

    @property
    def client(self) -> RegistryClient:
        return self.publisher.actor.client

    def spawn(self, count: int = FLEET) -> None:
        reader = self.reg.actor("reader").client
        root = self.tmp / "root.json"
        root.write_bytes(reader.tuf_file("1.root.json"))
        reader.close()
        pem = self.tmp / "publisher.pem"
        pem.write_bytes(public_key_pem(self.publisher.key.public_key()))
        for i in range(count):
            actor = self.reg.actor("reader", unique(f"w{i}"))
            key = generate_private_key()
            self.reg.admin.register_key(
                public_key_pem(key.public_key()).decode(), principal=actor.name
            )
            home = self.tmp / f"w{i:02d}"
            home.mkdir()
            save_private_key(key, home / "worker.key")
            log = home / "worker.log"
            env = {
                **os.environ,
                "MODELWARD_URL": self.reg.url,
                "MODELWARD_TOKEN": actor.token,
                "PYTHONPATH": str(ROOT),
            }
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "modelward.rehearsal",
                        "worker",
                        f"{self.repo}@prod",
                        "--cache-dir",
                        str(home / "cache"),
                        "--trust-root",
                        str(root),
                        "--public-key",
                        str(pem),
                        "--worker-key",
                        str(home / "worker.key"),
                        "--ready-file",
                        str(home / "ready.json"),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.workers.append(Worker(keyid(key.public_key()), home / "ready.json", log, proc))
        self.wait_for(lambda: all(w.digest() == self.stable for w in self.workers), "boot")

    def stop(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        for w in self.workers:
            try:
                w.proc.wait(20)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    def logs(self) -> str:
        return "\n".join(f"--- {w.keyid[:12]}\n{w.log.read_text()[-1500:]}" for w in self.workers)

    def wait_for(self, done: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            for w in self.workers:
                assert w.proc.poll() is None, f"a worker exited during {what}:\n{self.logs()}"
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not reached in {timeout:.0f} s\n{self.logs()}\n{self.status()}"
                )
            time.sleep(0.25)

    def fleet_digests(self) -> dict[str, str | None]:
        return {w.keyid: w.digest() for w in self.workers}

    def predicted(self, weight: int) -> dict[str, str | None]:
        """What each worker runs at ``weight``, as it computes it from the signed plan."""
        assert self.plan is not None
        step = make_step(self.plan, index=self.plan.steps.index(weight), state="running")
        return {w.keyid: resolve_digest(self.plan, step, w.keyid) for w in self.workers}

    def start_rollout(self, candidate: str) -> str:
        """A signed plan whose fleet is the whole fleet (every worker has reported), and
        whose 5% step holds at least one of its workers."""
        for _attempt in range(20):
            try:
                started = self.client.start_rollout(
                    self.repo,
                    "prod",
                    candidate,
                    steps=STEPS,
                    window_seconds=WINDOW,
                    min_samples=20,
                    analysis=ANALYSIS,
                )
            except ConflictError as refused:  # booted, but no report has arrived yet
                if "no worker has reported" not in str(refused):
                    raise
                time.sleep(1)
                continue
            rollout_id = str(started["rollout_id"])
            if started["plan"].get("fleet") == sorted(w.keyid for w in self.workers):
                self.plan = parse_plan(canonical_json(started["plan"]))
                assert started["cohorts"]["steps"][0]["workers"] >= 1, started["cohorts"]
                assert sign(self.reviewer, int(started["proposal"]))["state"] == "published"
                return rollout_id
            self.client.abort_rollout(self.repo, "prod", "a worker has not reported yet")
            time.sleep(1)
        raise AssertionError("the registry did not learn the whole fleet from its reports")

    def status(self) -> dict[str, Any]:
        return self.client.rollout_status(self.repo, "prod")

    def promote_and_record(self, digest: str) -> list[dict[str, Any]]:
        """Move ``prod`` to ``digest`` (the reviewer signs), export the release record of
        that move (``modelward release record``) and return its ``rollouts``."""
        proposal = self.client.set_alias(self.repo, "prod", digest, propose=True)["pending"]
        assert sign(self.reviewer, int(proposal["id"]))["state"] == "published"
        self.stable = digest  # the alias names it now: every worker goes (or stays) there
        key, out = self.tmp / "reviewer.key", self.tmp / f"{unique('record')}.dsse.json"
        if not key.exists():  # the fleet, and its reviewer, serve several tests
            save_private_key(self.reviewer.key, key)
        self.reg.cli(
            "release",
            "record",
            f"{self.repo}@prod",
            "--key",
            str(key),
            "--out",
            str(out),
            token=self.reviewer.actor.token,
            check=True,
        )
        payload = base64.b64decode(json.loads(out.read_bytes())["payload"])
        return list(json.loads(payload)["predicate"]["rollouts"])


def _serving(reg: Registry, tmp_path: Path, count: int) -> Iterator[Fleet]:
    """``count`` workers serving ``prod`` at a good stable bundle of a new repository."""
    publisher, reviewer = new_publisher(reg), new_reviewer(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    stable = _push(publisher, repo, tmp_path, GOOD)
    proposal = publisher.actor.client.set_alias(repo, "prod", stable, propose=True)["pending"]
    assert sign(reviewer, int(proposal["id"]))["state"] == "published"
    f = Fleet(reg, repo, publisher, reviewer, stable, tmp_path)
    try:
        f.spawn(count)
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="module")
def shared_fleet(reg: Registry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """20 workers serving ``prod``, booted once for the module (twenty processes cost)."""
    yield from _serving(reg, tmp_path_factory.mktemp("fleet20"), FLEET)


@pytest.fixture(scope="module")
def trio(reg: Registry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """3 workers serving ``prod`` (a small fleet: no hash bucket of 3 falls in 5% most of
    the time), booted once for the module."""
    yield from _serving(reg, tmp_path_factory.mktemp("fleet3"), 3)


@pytest.fixture(params=["trio", "shared_fleet"], ids=["3-workers", "20-workers"])
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """3 or 20 workers, each serving ``prod``'s stable digest (the one the last test
    promoted, whichever ran before: tests do not depend on their order)."""
    serving: Fleet = request.getfixturevalue(request.param)
    serving.wait_for(
        lambda: all(d == serving.stable for d in serving.fleet_digests().values()),
        "every worker on the stable digest",
    )
    return serving


@pytest.fixture
def lone(reg: Registry, tmp_path: Path) -> Iterator[Fleet]:
    """One worker serving ``prod``."""
    yield from _serving(reg, tmp_path, 1)


def _signed_weight(status: dict[str, Any]) -> tuple[int, str] | None:
    step = status.get("signed_step") or {}
    if "weight" not in step:
        return None
    return int(step["weight"]), str(step["state"])


def test_good_candidate_goes_5_20_50_100(fleet: Fleet, tmp_path: Path) -> None:
    candidate = _push(fleet.publisher, fleet.repo, tmp_path, GOOD)
    rollout_id = fleet.start_rollout(candidate)
    # the first step is a person's (rollout advance); the controller takes the rest
    fleet.client.advance_rollout(fleet.repo, "prod", "start")
    seen: list[int] = []  # the weights whose cohort the fleet ran, in order

    def progressed() -> bool:
        signed = _signed_weight(fleet.status())
        if signed is None:
            return False
        weight, state = signed
        assert state != "aborted", f"the good candidate was aborted: {fleet.status()}"
        if weight not in seen and fleet.fleet_digests() == fleet.predicted(weight):
            seen.append(weight)
            if not CONTROLLER and weight != STEPS[-1]:
                time.sleep(WINDOW)  # a window of reports before the next step
                fleet.client.advance_rollout(fleet.repo, "prod", f"{weight}%: fine")
        return state == "completed" and STEPS[-1] in seen

    fleet.wait_for(progressed, "the good rollout")
    assert seen == STEPS
    assert all(d == candidate for d in fleet.fleet_digests().values())
    status = fleet.status()
    assert status["state"] == "completed"
    assert [h["weight"] for h in status["history"] if h.get("state") != "aborted"][-4:] == STEPS
    if CONTROLLER:  # each step after the first taken by the controller on a passed analysis
        actors = [h.get("actor") for h in status["history"]]
        assert actors.count("rollout-controller") >= len(STEPS) - 1, status["history"]
    # the registry's view of the fleet: every worker reports the candidate
    fleet.wait_for(
        lambda: {w["digest"] for w in fleet.status()["fleet"]["workers"]} == {candidate},
        "every report on the candidate",
    )
    workers = fleet.status()["fleet"]["workers"]
    assert {w["keyid"] for w in workers} == {w.keyid for w in fleet.workers}
    assert all(w["assigned"] == candidate and not w["silent"] for w in workers)
    # the candidate is promoted by a signed move; its release record holds the rollout
    record = next(r for r in fleet.promote_and_record(candidate) if r["rollout_id"] == rollout_id)
    assert record["outcome"] == "promoted"
    steps = [json.loads(base64.b64decode(step["data"])) for step in record["steps"]]
    assert [step["weight"] for step in steps] == STEPS
    assert steps[-1]["state"] == "completed"
    assert record["abort_reason"] is None


def test_bad_candidate_aborts_at_5(fleet: Fleet, tmp_path: Path) -> None:
    candidate = _push(fleet.publisher, fleet.repo, tmp_path, BAD)
    rollout_id = fleet.start_rollout(candidate)
    at_5 = fleet.predicted(STEPS[0])
    canaries = {k for k, d in at_5.items() if d == candidate}
    assert canaries, at_5  # one worker of 3, one of 20
    fleet.client.advance_rollout(fleet.repo, "prod", "start")
    fleet.wait_for(
        lambda: fleet.fleet_digests() == at_5,
        "the 5% cohort on the bad candidate",
    )
    if not CONTROLLER:
        time.sleep(WINDOW)
        fleet.client.abort_rollout(fleet.repo, "prod", "error_rate over 0.05")
    fleet.wait_for(lambda: fleet.status()["state"] == "aborted", "the abort")
    fleet.wait_for(
        lambda: all(d == fleet.stable for d in fleet.fleet_digests().values()),
        "every worker back on the stable digest",
    )
    status = fleet.status()
    weights = [h["weight"] for h in status["history"]]
    assert max(weights) == STEPS[0], status["history"]  # never beyond 5%
    aborted = [h for h in status["history"] if h.get("state") == "aborted"]
    assert aborted, status["history"]
    reason = str(aborted[-1].get("reason") or "")
    assert "error_rate" in reason or "ttft" in reason, reason
    if CONTROLLER:
        assert aborted[-1].get("actor") == "rollout-controller", aborted[-1]
        # the observable rollback: detection and decision times now; convergence (the last
        # canary reporting the stable digest) and recovery from the controller's later ticks
        fleet.wait_for(
            lambda: (fleet.status().get("rollback") or {}).get("convergence_seconds") is not None,
            "the route convergence figure",
        )
        rollback = fleet.status()["rollback"]
        for name in ("detection_seconds", "decision_seconds", "convergence_seconds"):
            assert rollback[name] is not None, rollback
            assert rollback[name] >= 0, rollback
        # detected (a failing report), decided (the abort signed), converged (the last
        # canary reporting the stable digest): in that order
        assert rollback["detected_at"] <= rollback["decided_at"], rollback
        assert rollback["decided_at"] <= rollback["converged_at"], rollback
        assert rollback["capacity_before"]["candidate"] >= 1, rollback
    # every canary reported the stable digest again, in the registry's view
    fleet.wait_for(
        lambda: all(
            w["digest"] == fleet.stable
            for w in fleet.status()["fleet"]["workers"]
            if w["keyid"] in canaries
        ),
        "the canaries' reports on the stable digest",
    )
    # the next signed move of prod (to another good bundle) carries the aborted rollout in
    # its release record: the signed steps, the abort reason, the registry's figures
    promoted = _push(fleet.publisher, fleet.repo, tmp_path, GOOD)
    record = next(r for r in fleet.promote_and_record(promoted) if r["rollout_id"] == rollout_id)
    assert record["outcome"] == "aborted"
    assert record["abort_reason"] == reason
    steps = [json.loads(base64.b64decode(step["data"])) for step in record["steps"]]
    assert [step["weight"] for step in steps] == [STEPS[0], 0]
    if CONTROLLER:
        assert record["registry"]["rollback"]["convergence_seconds"] is not None, record


def test_worker_that_saw_an_abort_refuses_the_restarted_plan_and_keeps_serving(
    lone: Fleet, tmp_path: Path
) -> None:
    """A refused assignment never switches: this worker remembers the rollout aborted
    (its memory under the cache, docs/rollouts.md#what-a-worker-checks), so the signed step
    that restarts it at 100% is refused; the worker logs it and keeps serving stable."""
    candidate = _push(lone.publisher, lone.repo, tmp_path, GOOD)
    started = lone.client.start_rollout(lone.repo, "prod", candidate, steps=[100])
    rollout_id = str(started["rollout_id"])
    (worker,) = lone.workers
    metadata = metadata_dir(tmp_path / "w00" / "cache", lone.reg.url)
    name = hashlib.sha256(f"{lone.repo}@prod".encode()).hexdigest()[:16]
    memory = metadata / "rollouts" / f"{name}.json"
    memory.parent.mkdir(parents=True, exist_ok=True)
    memory.write_text(json.dumps({"rollout_id": rollout_id, "index": 0, "state": "aborted"}))
    assert sign(lone.reviewer, int(started["proposal"]))["state"] == "published"
    lone.client.advance_rollout(lone.repo, "prod", "all at once")  # 100%: every worker
    lone.wait_for(lambda: "REFUSED" in worker.log.read_text(), "the refusal", timeout=30)
    assert "aborted" in worker.log.read_text()
    assert worker.digest() == lone.stable  # still serving, never switched
    # it keeps serving and reporting the stable digest while assigned the candidate
    lone.wait_for(
        lambda: (
            [(w["digest"], w["assigned"]) for w in lone.status()["fleet"]["workers"]]
            == [(lone.stable, candidate)]
        ),
        "the report of the stable digest under the candidate's step",
        timeout=30,
    )
    assert worker.proc.poll() is None
    assert worker.digest() == lone.stable


def test_a_bundle_whose_load_is_refused_is_not_switched_to_and_the_old_one_serves_again(
    lone: Fleet, tmp_path: Path
) -> None:
    """A switch whose new engine is refused at load (here its baseline diverges, as an
    enforced divergence refuses it) starts the old bundle again, and the worker does not
    retry that digest at every poll: it keeps serving, and reporting, the stable digest."""
    candidate = _push(lone.publisher, lone.repo, tmp_path, {**GOOD, "baseline_diverges": 1})
    started = lone.client.start_rollout(lone.repo, "prod", candidate, steps=[100])
    assert sign(lone.reviewer, int(started["proposal"]))["state"] == "published"
    lone.client.advance_rollout(lone.repo, "prod", "all at once")  # 100%: every worker
    (worker,) = lone.workers
    lone.wait_for(
        lambda: "failed to load here before" in worker.log.read_text(), "the second refusal"
    )
    log = worker.log.read_text()
    assert f"REFUSED: {candidate} did not start" in log
    assert "the stand-in's baseline diverges" in log
    assert log.count("switching ") == 1  # one attempt, not one per poll
    lone.wait_for(lambda: worker.digest() == lone.stable, "the stable bundle serving again")
    lone.wait_for(
        lambda: (
            [(w["digest"], w["assigned"]) for w in lone.status()["fleet"]["workers"]]
            == [(lone.stable, candidate)]
        ),
        "a report of the stable digest under the candidate's step",
        timeout=30,
    )
