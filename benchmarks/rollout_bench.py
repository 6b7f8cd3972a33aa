"""Rollout benchmark (issue 26): route convergence and registry CPU against fleet size.

For each fleet size in ``--workers`` (default 100 and 1,000) a repository gets a stable and a
candidate bundle, its alias ``live`` is signed at the stable one and a rollout plan (steps
``--steps``, default 5,20,50,100) is signed by its publisher, all with the real ``modelward``
commands (``alias set --key``, ``rollout start --key``). Then a fleet of simulated workers
polls the registry's TUF metadata the way a serving worker's refresh does
(``loader/tuf_resolve.py``): every ``--poll-seconds`` (default 10, each worker with its own
random phase) ``timestamp.json`` with ``If-None-Match``; on a new timestamp the versioned
snapshot, then only the roles whose version the snapshot changed (top-level targets, the
alias's role with the plan, ``ORG:NAME@=rollout`` with the step). Each worker has its own
ed25519 worker key and computes its own digest from the step with ``attest.rollout``
(``resolve_digest``: its bucket from its key id). The simulated workers parse the metadata
but do not verify its signatures (a worker's CPU, not the registry's). Each worker also
sends one signed fleet report per poll (``POST .../rollouts/ALIAS/reports``: an envelope of
``loader.statements.sign_predicate``, predicate ``ROLLOUT_REPORT``; ``--no-reports``: none),
its keys registered to the fleet's reader principal.

Once every worker holds the plan, the benchmark runs ``modelward rollout advance`` for each
step but the last (``--advances``, default 3: 5, 20 and 50%), then ``modelward rollout
abort``, one poll interval (plus ``--settle-seconds``) apart. Measured:

- **route convergence**: from the command returning (the step is signed and published) to
  each worker whose assignment the step changes observing the new step: the workers that
  join the candidate at an advance, and every candidate worker at the abort (the rollback's
  route convergence); p50, p95 and max over all of them, and the max per transition;
- **registry CPU**, cores (CPU seconds per wall second) of the ``modelward serve`` process
  and its children, from ``/proc``: idle (no fleet), under the steady fleet (one interval
  before the first advance), and over the steps;
- **report ingest** latency p50/p95 (send to answer) and the answers' status codes;
- the polls, the fetches a refresh made, errors, and the fleet's own lag behind its schedule
  (above a few hundred ms the client, not the registry, is the bottleneck).

``--quick`` runs 20 workers polling every second through one advance (50%) and the abort
(under a minute; what ``make test`` runs). ``--databases sqlite,postgres`` runs each fleet
size on each database (PostgreSQL in a throw-away cluster, as benchmarks/tuf_bench.py does;
the PostgreSQL server's own CPU is not counted). The simulated workers are ``--procs``
processes of asyncio tasks over ``--connections`` keep-alive connections with fleet_bench's
minimal HTTP/1.1 client. Prints a Markdown table and writes JSON to ``--out``.

    .venv/bin/python benchmarks/rollout_bench.py --workers 100,1000 --out /tmp/rollout.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from fleet_bench import Connection, cpu_seconds, percentile
from registry_bench import MODELWARD, REPO, Postgres, Serve
from tuf.api.metadata import Metadata, Snapshot, Targets, Timestamp

from modelward.attest.keys import keyid, public_key_pem, save_private_key
from modelward.attest.rollout import (
    RolloutPlan,
    RolloutStep,
    in_candidate_cohort,
    make_report_predicate,
    parse_plan,
    parse_step,
    resolve_digest,
)
from modelward.attest.rollout.paths import rollout_path, rollout_role, step_path
from modelward.attest.statement import PredicateType
from modelward.attest.trust import TrustSet
from modelward.attest.tuf import alias_path, open_role
from modelward.client.api import RegistryClient
from modelward.loader.statements import WorkerKey, sign_predicate

ALIAS = "live"
OPEN_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n  - {pattern: '*', roles: [publisher]}\n"
)


# -- the simulated workers -------------------------------------------------------------------
@dataclass
class Sim:
    """What one process of simulated workers is told (picklable)."""

    host: str
    port: int
    tokens: list[str]
    repo: str
    keys: list[bytes]  # raw ed25519 private keys, one per worker of this process
    phases: list[float]  # each worker's first poll, seconds after ``start``
    poll: float
    start: float  # time.time() of the first poll
    end: float  # time.time() the polls stop
    connections: int
    reports: bool
    prefix: str = "/tuf/"


@dataclass
class Observed:
    """What one process of simulated workers measured."""

    polls: int = 0
    fetches: int = 0
    errors: int = 0
    lag_ms: list[float] = field(default_factory=list)
    report_ms: list[float] = field(default_factory=list)
    report_status: dict[int, int] = field(default_factory=dict)
    report_refusals: list[str] = field(default_factory=list)  # the first few answers
    # worker key id -> [(time.time(), rollout id, index, state, digest)], one per change
    timeline: dict[str, list[tuple[float, str, int | None, str, str]]] = field(default_factory=dict)


@dataclass
class Worker:
    """One simulated worker's state: what a real worker keeps in its TUF cache."""

    key: WorkerKey
    keyid: str
    etag: str = ""
    held: dict[str, int] = field(default_factory=dict)  # role -> version held
    seen: tuple[str, int | None, str] | None = None
    digest: str = ""
    rollout_id: str | None = None
    seq: int = 0


class Roles:
    """The metadata of one process's fleet, parsed once per version (the workers share it)."""

    def __init__(self, repo: str) -> None:
        self.repo = repo
        self.alias_role = open_role(repo)
        self.step_role = rollout_role(repo)
        self.snapshots: dict[int, dict[str, int]] = {}
        self.alias: dict[int, tuple[str, RolloutPlan | None]] = {}  # version -> digest, plan
        self.steps: dict[int, RolloutStep | None] = {}

    def custom(self, body: bytes, path: str, key: str) -> str | None:
        target = Metadata[Targets].from_bytes(body).signed.targets.get(path)
        if target is None:
            return None
        custom: Any = target.unrecognized_fields.get("custom")
        value = custom.get(key) if isinstance(custom, dict) else None
        return value if isinstance(value, str) else None

    def read_alias(self, version: int, body: bytes) -> None:
        if version not in self.alias:
            target = Metadata[Targets].from_bytes(body).signed.targets[alias_path(self.repo, ALIAS)]
            plan = self.custom(body, rollout_path(self.repo, ALIAS), "plan")
            digest = "sha256:" + target.hashes["sha256"]
            self.alias[version] = (digest, parse_plan(plan.encode()) if plan else None)

    def read_step(self, version: int, body: bytes) -> None:
        if version not in self.steps:
            step = self.custom(body, step_path(self.repo, ALIAS), "step")
            self.steps[version] = parse_step(step.encode()) if step else None


async def run_sim(sim: Sim) -> Observed:
    observed = Observed()
    roles = Roles(sim.repo)
    workers = []
    for raw in sim.keys:
        private = Ed25519PrivateKey.from_private_bytes(raw)
        workers.append(Worker(WorkerKey(private, TrustSet()), keyid(private.public_key())))
    queue: asyncio.Queue[tuple[float, int]] = asyncio.Queue(maxsize=sim.connections * 4)
    report_path = f"/v1/repos/{quote(sim.repo, safe='/')}/rollouts/{quote(ALIAS, safe='')}/reports"

    async def schedule() -> None:
        order = sorted(range(len(workers)), key=lambda i: sim.phases[i])
        rounds = 0
        while True:
            for i in order:
                due = sim.start + sim.phases[i] + rounds * sim.poll
                if due >= sim.end:
                    return
                delay = due - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await queue.put((due, i))
            rounds += 1

    async def fetch(conn: Connection, auth: str, role: str, version: int) -> bytes | None:
        name = quote(role, safe="")
        status, _, body = await conn.get(f"{sim.prefix}{version}.{name}.json", auth)
        observed.fetches += 1
        if status != 200:
            observed.errors += 1
            return None
        return body

    async def refresh(conn: Connection, worker: Worker, auth: str, timestamp: bytes) -> None:
        # a refresh: the versioned snapshot, then each role whose version it changed
        version = Metadata[Timestamp].from_bytes(timestamp).signed.snapshot_meta.version
        if worker.held.get("snapshot") == version:
            return
        body = await fetch(conn, auth, "snapshot", version)
        if body is None:
            return
        if version not in roles.snapshots:
            meta = Metadata[Snapshot].from_bytes(body).signed.meta
            roles.snapshots[version] = {n.removesuffix(".json"): m.version for n, m in meta.items()}
        listing = roles.snapshots[version]
        worker.held["snapshot"] = version
        for role in ("targets", roles.alias_role, roles.step_role):
            held = listing.get(role)
            if held is None or worker.held.get(role) == held:
                continue
            body = await fetch(conn, auth, role, held)
            if body is None:
                return
            if role == roles.alias_role:
                roles.read_alias(held, body)
            elif role == roles.step_role:
                roles.read_step(held, body)
            worker.held[role] = held
        # the worker's own assignment, from its own key id (attest.rollout)
        digest, plan = roles.alias[worker.held[roles.alias_role]]
        held_step = worker.held.get(roles.step_role)
        step = roles.steps.get(held_step) if held_step is not None else None
        if plan is not None and (step is None or step.rollout_id != plan.rollout_id):
            step = None
        if plan is not None and plan.stable == digest:
            digest = resolve_digest(plan, step, worker.keyid)
        seen = (
            (step.rollout_id, step.index, step.state)
            if step is not None
            else ("", None, "planned" if plan is not None else "none")
        )
        worker.rollout_id = step.rollout_id if step is not None else None
        worker.digest = digest
        if seen != worker.seen:
            worker.seen = seen
            observed.timeline.setdefault(worker.keyid, []).append((time.time(), *seen, digest))

    async def report(conn: Connection, worker: Worker, auth: str) -> None:
        worker.seq += 1
        predicate = make_report_predicate(
            repository=sim.repo,
            alias=ALIAS,
            rollout_id=worker.rollout_id,
            digest=worker.digest,
            worker_keyid=worker.keyid,
            seq=worker.seq,
            interval_seconds=sim.poll,
            requests=120,
            ttft_p50_ms=80.0,
            ttft_p95_ms=140.0,
            itl_p95_ms=12.0,
            queue_age_p95_ms=5.0,
            task_checks_passed=4,
            capacity=64,
            inflight_peak=9,
            stable_warm=True,
        )
        envelope = sign_predicate(
            worker.key,
            sim.repo,
            worker.digest,
            PredicateType.ROLLOUT_REPORT,
            predicate,
        )
        sent = time.time()
        status, _, body = await conn.request(
            "POST", report_path, f"{auth}Content-Type: application/json\r\n", envelope
        )
        observed.report_ms.append((time.time() - sent) * 1000)
        observed.report_status[status] = observed.report_status.get(status, 0) + 1
        if status != 201 and len(observed.report_refusals) < 3:
            observed.report_refusals.append(f"{status} {body[:300].decode(errors='replace')}")

    async def connection() -> None:
        conn = Connection(sim)  # type: ignore[arg-type]  # it reads .host and .port only
        try:
            while True:
                due, i = await queue.get()
                if due < 0:
                    return
                worker = workers[i]
                auth = f"Authorization: Bearer {sim.tokens[i % len(sim.tokens)]}\r\n"
                observed.lag_ms.append((time.time() - due) * 1000)
                try:
                    status, fields, body = await conn.get(
                        f"{sim.prefix}timestamp.json", f"{auth}If-None-Match: {worker.etag}\r\n"
                    )
                    observed.polls += 1
                    if status == 200:
                        worker.etag = fields.get("etag", "")
                        await refresh(conn, worker, auth, body)
                    elif status != 304:
                        observed.errors += 1
                    if sim.reports and worker.digest:
                        await report(conn, worker, auth)
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    observed.errors += 1
                    conn.close()
                    conn = Connection(sim)  # type: ignore[arg-type]
        finally:
            conn.close()

    async def run() -> None:
        await schedule()
        for _ in range(sim.connections):
            await queue.put((-1.0, -1))

    # a worker's failure fails the run (asyncio.run cancels the rest), never a silent hang
    await asyncio.gather(run(), *(connection() for _ in range(sim.connections)))
    return observed


def sim_process(sim: Sim, out: Any) -> None:
    out.send(asyncio.run(run_sim(sim)))
    out.close()


# -- the registry side -----------------------------------------------------------------------
class Cli:
    """The real ``modelward`` command line against one registry, timed."""

    def __init__(self, work: Path, url: str, token: str, root: Path) -> None:
        self.env = {
            **os.environ,
            "MODELWARD_URL": url,
            "MODELWARD_TOKEN": token,
            "XDG_CONFIG_HOME": str(work / "config"),
            "XDG_CACHE_HOME": str(work / "cache"),
            "MODELWARD_TRUST_ROOT": str(root),  # a signer verifies from its pinned root
        }

    def __call__(self, *args: str) -> tuple[str, float]:
        """Run ``modelward ARGS``; its stdout and the time.time() it returned."""
        proc = subprocess.run(
            [MODELWARD, *args], env=self.env, capture_output=True, text=True, check=False
        )
        done = time.time()
        if proc.returncode != 0:
            raise RuntimeError(f"modelward {' '.join(args)} -> {proc.returncode}: {proc.stderr}")
        return proc.stdout, done


@dataclass
class Fleet:
    """One fleet size's repository, its rollout and its workers' keys."""

    repo: str
    stable: str
    candidate: str
    rollout_id: str
    steps: list[int]
    keys: list[bytes]
    keyids: list[str]
    tokens: list[str]
    cli: Cli


def setup_fleet(work: Path, serve: Serve, workers: int, opts: argparse.Namespace) -> Fleet:
    """A repository with ``live`` signed at a stable bundle, a signed rollout plan to a
    candidate, and ``workers`` worker keys (registered to a reader principal when the
    workers report)."""
    sys.path.insert(0, str(REPO))
    from tests.registry.conftest import Publisher, make_bundle_dir

    admin = RegistryClient(serve.url, serve.token, timeout=120)
    tag = secrets.token_hex(3)
    repo, publisher_name, fleet_name = f"fleet/r{workers}-{tag}", f"pub{tag}", f"fleet{tag}"
    admin.create_principal(publisher_name, "publisher")
    admin.create_principal(fleet_name, "reader")
    pub_token = str(admin.create_token(publisher_name)["token"])
    publisher = RegistryClient(serve.url, pub_token, timeout=120)
    key = Ed25519PrivateKey.generate()
    key_file = work / f"{publisher_name}.key"
    save_private_key(key, key_file)
    publisher.register_key(public_key_pem(key.public_key()).decode())
    admin.create_repo(repo, policy_yaml=OPEN_POLICY)
    admin.add_publisher(repo, publisher_name)
    pub = Publisher(actor=None, key=key, keyid="")  # type: ignore[arg-type]
    stable, candidate = (
        publisher.push(make_bundle_dir(work / f"{repo}-{n}"), repo, sign=pub.sign).digest
        for n in ("stable", "candidate")
    )
    root = work / f"{publisher_name}-root.json"
    root.write_bytes(admin.tuf_file("1.root.json"))
    cli = Cli(work, serve.url, pub_token, root)
    cli("alias", "set", f"{repo}@{ALIAS}", stable, "--key", str(key_file))
    started, _ = cli(
        "rollout", "start", f"{repo}@{ALIAS}", "--to", candidate, "--steps",
        ",".join(map(str, opts.steps)), "--window", "10m", "--min-samples", "1000000000",
        "--key", str(key_file), "--json",
    )  # fmt: skip
    state = json.loads(started)
    if not state.get("plan_signed"):
        raise RuntimeError(f"{repo}@{ALIAS}: the rollout plan is not signed: {state}")
    keys, keyids = [], []
    for _ in range(workers):
        private = Ed25519PrivateKey.generate()
        keys.append(private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))
        keyids.append(keyid(private.public_key()))
        if opts.reports:
            admin.register_key(public_key_pem(private.public_key()).decode(), fleet_name)
    tokens = [str(admin.create_token(fleet_name)["token"]) for _ in range(opts.tokens)]
    admin.close()
    publisher.close()
    return Fleet(
        repo, stable, candidate, str(state["rollout_id"]), opts.steps, keys, keyids, tokens, cli
    )


def run_fleet(serve: Serve, fleet: Fleet, opts: argparse.Namespace) -> dict[str, Any]:
    """Idle CPU, then the fleet: one interval to pick up the plan, one steady interval, then
    each transition (advances, then the abort) one interval (+ settle) apart."""
    n = len(fleet.keys)
    pid = serve.proc.pid
    cpu0 = cpu_seconds(pid)
    time.sleep(opts.idle_seconds)
    idle = (cpu_seconds(pid) - cpu0) / opts.idle_seconds
    gap = opts.poll_seconds + opts.settle_seconds
    transitions = [*(f"advance {fleet.steps[k]}%" for k in range(opts.advances)), "abort"]
    start = time.time() + 1.0
    end = start + 2 * opts.poll_seconds + len(transitions) * gap
    procs = max(1, min(opts.procs, n))
    rng = random.Random(n)  # the same phases for the same fleet size
    phases = [rng.uniform(0, opts.poll_seconds) for _ in range(n)]
    host, port = serve.url.removeprefix("http://").rsplit(":", 1)
    sims = [
        Sim(
            host=host,
            port=int(port),
            tokens=fleet.tokens,
            repo=fleet.repo,
            keys=fleet.keys[i::procs],
            phases=phases[i::procs],
            poll=opts.poll_seconds,
            start=start,
            end=end,
            connections=max(1, opts.connections // procs),
            reports=opts.reports,
        )
        for i in range(procs)
    ]
    ctx = multiprocessing.get_context("spawn")
    pipes, children = [], []
    for sim in sims:
        mine, theirs = ctx.Pipe(duplex=False)
        child = ctx.Process(target=sim_process, args=(sim, theirs), daemon=True)
        child.start()
        pipes.append(mine)
        children.append(child)
    # (1) every worker picks up the signed plan; (2) one steady interval
    time.sleep(max(0.0, start + opts.poll_seconds - time.time()))
    cpu1 = cpu_seconds(pid)
    time.sleep(opts.poll_seconds)
    cpu2 = cpu_seconds(pid)
    steady = (cpu2 - cpu1) / opts.poll_seconds
    # (3) the transitions, each from the command's return
    ref = f"{fleet.repo}@{ALIAS}"
    done: list[float] = []
    wall2 = time.time()
    for k, what in enumerate(transitions):
        time.sleep(max(0.0, start + 2 * opts.poll_seconds + k * gap - time.time()))
        verb = "abort" if what == "abort" else "advance"
        _, at = fleet.cli("rollout", verb, ref, "--reason", f"rollout_bench: {what}")
        done.append(at)
    time.sleep(max(0.0, end - time.time()))
    during = (cpu_seconds(pid) - cpu2) / (time.time() - wall2)
    got: list[Observed] = []
    for pipe, child in zip(pipes, children, strict=True):
        if not pipe.poll(60 + opts.poll_seconds):
            raise RuntimeError(f"a process of simulated workers died (exit {child.exitcode})")
        got.append(pipe.recv())
        child.join(60)
    timeline = {k: v for o in got for k, v in o.timeline.items()}
    return {
        "workers": n,
        "transitions": transitions,
        "cpu_idle_cores": idle,
        "cpu_steady_cores": steady,
        "cpu_steps_cores": during,
        "polls": sum(o.polls for o in got),
        "fetches": sum(o.fetches for o in got),
        "errors": sum(o.errors for o in got),
        "lag_p99_ms": percentile([x for o in got for x in o.lag_ms], 99),
        **convergence(fleet, timeline, done),
        **ingest(got, opts),
    }


def convergence(
    fleet: Fleet,
    timeline: dict[str, list[tuple[float, str, int | None, str, str]]],
    done: list[float],
) -> dict[str, Any]:
    """From each transition's command returning to each worker it moves seeing its step."""
    weights = [0, *fleet.steps[: len(done) - 1], 0]  # before each transition, and after
    everyone: list[float] = []
    per: list[dict[str, Any]] = []
    missed = 0
    for k, at in enumerate(done):
        index, state = (k, "running") if k < len(done) - 1 else (None, "aborted")
        moved = [
            w
            for w in fleet.keyids
            if in_candidate_cohort(fleet.rollout_id, w, weights[k])
            != in_candidate_cohort(fleet.rollout_id, w, weights[k + 1])
        ]
        times = []
        for w in moved:
            seen = next(
                (
                    t
                    for t, rid, i, s, _ in timeline.get(w, [])
                    if rid == fleet.rollout_id and s == state and (index is None or i == index)
                ),
                None,
            )
            if seen is None:
                missed += 1
            else:
                times.append(max(0.0, seen - at))  # a poll answered before the CLI returned: 0
        everyone += times
        per.append({"moved": len(moved), "seen": len(times), "max_s": max(times, default=None)})
    return {
        "converge_p50_s": percentile(everyone, 50),
        "converge_p95_s": percentile(everyone, 95),
        "converge_max_s": max(everyone, default=None),
        "moved_workers": sum(p["moved"] for p in per),
        "not_converged": missed,
        "per_transition": per,
    }


def ingest(got: list[Observed], opts: argparse.Namespace) -> dict[str, Any]:
    if not opts.reports:
        return {"reports": "not run (--no-reports)"}
    status: dict[str, int] = {}
    for o in got:
        for code, count in o.report_status.items():
            status[str(code)] = status.get(str(code), 0) + count
    latencies = [x for o in got for x in o.report_ms]
    return {
        "reports": sum(status.values()),
        "report_status": status,
        "report_refusals": [r for o in got for r in o.report_refusals][:3],
        "report_p50_ms": percentile(latencies, 50),
        "report_p95_ms": percentile(latencies, 95),
    }


# -- main ------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="100,1000", help="fleet sizes, comma-separated")
    parser.add_argument("--poll-seconds", type=float, default=10.0, help="each worker's interval")
    parser.add_argument("--steps", default="5,20,50,100", help="the plan's steps")
    parser.add_argument("--advances", type=int, default=3, help="steps signed before the abort")
    parser.add_argument("--settle-seconds", type=float, default=2.0, help="added to each gap")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle CPU window")
    parser.add_argument("--databases", default="sqlite", help="sqlite,postgres")
    parser.add_argument("--tokens", type=int, default=10, help="reader tokens the fleet shares")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive, in all")
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--no-reports", action="store_true", help="poll only, send no reports")
    parser.add_argument("--quick", action="store_true", help="20 workers, 1 s polls, 1 advance")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("rollout-bench.json"))
    opts = parser.parse_args()
    if opts.quick:
        opts.workers, opts.poll_seconds, opts.steps, opts.advances = "20", 1.0, "50,100", 1
        opts.settle_seconds, opts.idle_seconds, opts.procs, opts.connections = 0.5, 0.5, 1, 4
        opts.tokens = 1
    sizes = [int(s) for s in opts.workers.split(",") if s.strip()]
    opts.steps = [int(s) for s in opts.steps.split(",")]
    databases = [d.strip() for d in opts.databases.split(",") if d.strip()]
    if not sizes or min(sizes) < 1 or opts.poll_seconds <= 0 or opts.idle_seconds <= 0:
        parser.error("--workers, --poll-seconds and --idle-seconds must be positive")
    if not 1 <= opts.advances < len(opts.steps):
        parser.error("--advances: at least one step, and fewer than the plan's steps")
    if set(databases) - {"sqlite", "postgres"}:
        parser.error("--databases: sqlite and/or postgres")
    opts.reports = not opts.no_reports
    work = opts.work or Path(tempfile.mkdtemp(prefix="mw-rollout-bench-"))
    results: dict[str, Any] = {
        "argv": sys.argv[1:],
        "poll_seconds": opts.poll_seconds,
        "steps": opts.steps,
        "machine": {"nproc": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "runs": {},
    }
    pg = Postgres() if "postgres" in databases else None
    try:
        for database in databases:
            url = None
            if database == "postgres" and pg is not None:
                url = (
                    f"postgresql+psycopg://postgres@{pg.database(f'mwroll{secrets.token_hex(3)}')}"
                )
            serve = Serve(work, url)
            try:
                for n in sizes:
                    fleet = setup_fleet(work, serve, n, opts)
                    run = run_fleet(serve, fleet, opts)
                    results["runs"].setdefault(database, {})[str(n)] = run
                    print(f"{database}, {n} workers: {run}", file=sys.stderr)
            finally:
                serve.stop()
        results["machine"]["loadavg_end"] = os.getloadavg()
    finally:
        if pg is not None:
            pg.stop()
        if opts.work is None:
            shutil.rmtree(work, ignore_errors=True)
    opts.out.write_text(json.dumps(results, indent=2))
    print(render(results))


def render(r: dict[str, Any]) -> str:
    columns = [(db, n, run) for db, runs in r["runs"].items() for n, run in runs.items()]

    def num(value: Any, fmt: str) -> str:
        return "n/a" if value is None else fmt.format(value)

    def reports(run: dict[str, Any], fmt: Any) -> str:
        return fmt(run) if isinstance(run["reports"], int) else str(run["reports"])

    rows: list[tuple[str, Any]] = [
        ("transitions (each from the command's return)", lambda x: ", ".join(x["transitions"])),
        ("workers moved by them", lambda x: f"{x['moved_workers']:,}"),
        (
            "route convergence p50 / p95 / max, s",
            lambda x: " / ".join(
                num(x[k], "{:.2f}") for k in ("converge_p50_s", "converge_p95_s", "converge_max_s")
            ),
        ),
        (
            "last moved worker per transition, s",
            lambda x: " / ".join(num(p["max_s"], "{:.2f}") for p in x["per_transition"]),
        ),
        ("moved workers that never saw their step", lambda x: str(x["not_converged"])),
        ("registry CPU idle, cores", lambda x: f"{x['cpu_idle_cores']:.3f}"),
        ("registry CPU, steady fleet, cores", lambda x: f"{x['cpu_steady_cores']:.3f}"),
        ("registry CPU over the steps, cores", lambda x: f"{x['cpu_steps_cores']:.3f}"),
        (
            "reports sent (status codes)",
            lambda x: reports(x, lambda y: f"{y['reports']:,} {y['report_status']}"),
        ),
        (
            "report ingest p50 / p95, ms",
            lambda x: reports(
                x,
                lambda y: (
                    f"{num(y['report_p50_ms'], '{:.1f}')} / {num(y['report_p95_ms'], '{:.1f}')}"
                ),
            ),
        ),
        (
            "polls, refresh fetches, errors",
            lambda x: f"{x['polls']:,}, {x['fetches']:,}, {x['errors']}",
        ),
        ("fleet lag behind schedule p99, ms", lambda x: num(x["lag_p99_ms"], "{:.1f}")),
    ]
    lines = [
        f"rollout of steps {','.join(map(str, r['steps']))}: workers polling TUF every "
        f"{r['poll_seconds']:g} s",
        "",
        "| measurement | " + " | ".join(f"{n} workers ({db})" for db, n, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    lines += [
        f"| {label} | " + " | ".join(cell(run) for _, _, run in columns) + " |"
        for label, cell in rows
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
