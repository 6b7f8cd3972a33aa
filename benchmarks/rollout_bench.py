"""Rollout benchmark (issues 26, 37): route and rollback convergence and registry CPU against
fleet size.

For each fleet size in ``--workers`` (default 100 and 1,000) a repository gets a stable and
a candidate bundle, its alias ``live`` is signed at the stable one and a rollout plan (steps
``--steps``, default 5,20,50,100) is signed by its publisher, all with the real
``modelward`` commands (``alias set --key``, ``rollout start --key``). Then a fleet of
simulated workers polls the registry's TUF metadata the way a serving worker's refresh does
(``loader/tuf_resolve.py``, simulated in ``_fleet_client.py``): every ``--poll-seconds``
(default 10, each worker with its own random phase) ``timestamp.json`` with
``If-None-Match``; on a new timestamp the versioned snapshot, then only the roles whose
version the snapshot changed (top-level targets, the alias's role with the plan,
``ORG:NAME@=rollout`` with the step). Each worker has its own ed25519 worker key and
computes its own digest from the step with ``attest.rollout`` (``resolve_digest``: its
bucket from its key id). The simulated workers parse the metadata but do not verify its
signatures (a worker's CPU, not the registry's). Each worker also sends one signed fleet
report per poll (``POST .../rollouts/ALIAS/reports``: an envelope of
``loader.statements.sign_predicate``, predicate ``ROLLOUT_REPORT``; ``--no-reports``: none),
its keys registered to the fleet's reader principal.

Once every worker holds the plan, the benchmark runs ``modelward rollout advance`` for each
step but the last (``--advances``, default 3: 5, 20 and 50%), then ``modelward rollout
abort``; then the alias is moved to the candidate (``alias set --key``) and rolled back to
the stable digest (``alias rollback ORG/NAME@live STABLE --key``: a move back to a release
the alias held under valid signatures, signed by the alias's signer, no promotion gate).
Each command starts one poll interval (plus ``--settle-seconds``) after the one before
returned. Measured:

- **route convergence**: from the command returning (the step is signed and published) to
  each worker whose assignment the step changes observing the new step: the workers that
  join the candidate at an advance, and every candidate worker at the abort; p50, p95 and
  max over all of them, and the max per transition (the alias's moves included);
- **rollback convergence**: from ``alias rollback`` returning (the move is signed and
  published) to each worker observing the alias's digest = stable; p50, p95 and max;
- **registry CPU**, cores (CPU seconds per wall second) of the ``modelward serve`` process
  and its children, from ``/proc``: idle (no fleet), under the steady fleet (one interval
  before the first advance), over the steps (the first advance's start to the alias's first
  move), and over the rollback (its command's start to one interval after it returned);
- **report ingest** latency p50/p95 (send to answer) and the answers' status codes;
- the polls, the fetches a refresh made, errors, and the fleet's own lag behind its schedule
  (above a few hundred ms the client, not the registry, is the bottleneck).

``--quick`` runs 20 workers polling every second through one advance (50%), the abort and
the alias's two moves (under a minute; what ``make test`` runs).
``--databases sqlite,postgres`` runs each fleet size on each database (PostgreSQL in a
throw-away cluster, as benchmarks/tuf_bench.py does; the PostgreSQL server's own CPU is not
counted). The
simulated workers are ``--procs`` processes of asyncio tasks over ``--connections``
keep-alive connections with fleet_bench's minimal HTTP/1.1 client. Prints a Markdown table
and writes JSON to ``--out``.

    .venv/bin/python benchmarks/rollout_bench.py --workers 100,1000 --out /tmp/rollout.json
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _fleet_client import ALIAS, Observed, Seen, Sim, sim_process
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from fleet_bench import cpu_seconds, percentile
from registry_bench import MODELWARD, REPO, Postgres, Serve

from modelward.attest.keys import keyid, public_key_pem, save_private_key
from modelward.attest.rollout import in_candidate_cohort
from modelward.client.api import RegistryClient

ALIAS_MOVES = ("alias set candidate", "alias rollback")  # after the abort, in this order
OPEN_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n  - {pattern: '*', roles: [publisher]}\n"
)


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
    key_file: Path  # the publisher's key: it signs the alias's moves


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
        repo,
        stable,
        candidate,
        str(state["rollout_id"]),
        opts.steps,
        keys,
        keyids,
        tokens,
        cli,
        key_file,
    )


def run_fleet(serve: Serve, fleet: Fleet, opts: argparse.Namespace) -> dict[str, Any]:
    """Idle CPU, then the fleet: one interval to pick up the plan, one steady interval, then
    each transition one interval (+ settle) apart: the advances, the abort, then the alias
    moved to the candidate (``alias set``) and rolled back to the stable (``alias rollback``)."""
    n = len(fleet.keys)
    pid = serve.proc.pid
    cpu0 = cpu_seconds(pid)
    time.sleep(opts.idle_seconds)
    idle = (cpu_seconds(pid) - cpu0) / opts.idle_seconds
    gap = opts.poll_seconds + opts.settle_seconds
    transitions = [
        *(f"advance {fleet.steps[k]}%" for k in range(opts.advances)),
        "abort",
        *ALIAS_MOVES,
    ]
    start = time.time() + 1.0
    ctx = multiprocessing.get_context("spawn")
    end = ctx.Value("d", float("inf"), lock=False)  # a slow command delays what follows it
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
    # (3) the transitions, each from the command's return, the next one gap after it
    done: list[float] = []
    cpu: list[tuple[float, float]] = []  # (wall, CPU seconds) as each command starts
    due = start + 2 * opts.poll_seconds
    for what in transitions:
        time.sleep(max(0.0, due - time.time()))
        cpu.append((time.time(), cpu_seconds(pid)))
        done.append(transition(fleet, what))
        due = max(due, done[-1]) + gap
    end.value = due
    time.sleep(max(0.0, due - time.time()))
    cpu.append((time.time(), cpu_seconds(pid)))
    rollout_end = len(transitions) - len(ALIAS_MOVES)  # the rollout's steps: before the moves

    def cores(a: int, b: int) -> float:
        return (cpu[b][1] - cpu[a][1]) / (cpu[b][0] - cpu[a][0])

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
        "cpu_steps_cores": cores(0, rollout_end),
        "cpu_rollback_cores": cores(-2, -1),
        "command_s": [at - begun for (begun, _), at in zip(cpu, done, strict=False)],
        "polls": sum(o.polls for o in got),
        "fetches": sum(o.fetches for o in got),
        "errors": sum(o.errors for o in got),
        "lag_p99_ms": percentile([x for o in got for x in o.lag_ms], 99),
        **convergence(fleet, timeline, done),
        **ingest(got, opts),
    }


def transition(fleet: Fleet, what: str) -> float:
    """Run one transition's real command; the time.time() it returned (signed, published)."""
    ref = f"{fleet.repo}@{ALIAS}"
    if what not in ALIAS_MOVES:
        verb = "abort" if what == "abort" else "advance"
        return fleet.cli("rollout", verb, ref, "--reason", f"rollout_bench: {what}")[1]
    args: tuple[str, ...] = ("alias", "set", ref, fleet.candidate)
    if what == "alias rollback":
        # back to a release the alias held under valid signatures: no promotion gate
        args = ("alias", "rollback", ref, fleet.stable, "--reason", "rollout_bench: rollback")
    out, at = fleet.cli(*args, "--key", str(fleet.key_file), "--json")
    if not json.loads(out).get("signed"):
        raise RuntimeError(f"{' '.join(args)}: the move is not signed: {out}")
    return at


# what a worker a transition moves must show: (rollout id, index, state, digest); None: any
Want = tuple[str | None, int | None, str | None, str | None]


def first_seen(entries: list[Seen], since: float, want: Want) -> float | None:
    """When a worker first showed ``want`` after ``since``; None if it never did."""
    for at, *shown in entries:
        if at > since and all(w in (None, x) for w, x in zip(want, shown, strict=True)):
            return at
    return None


def convergence(fleet: Fleet, timeline: dict[str, list[Seen]], done: list[float]) -> dict[str, Any]:
    """From each transition's command returning to each worker it moves seeing its result:
    a rollout step (its state and index) or, for the alias's moves, the alias's digest."""
    steps = len(done) - len(ALIAS_MOVES)  # the rollout's transitions: advances, then the abort
    weights = [0, *fleet.steps[: steps - 1], 0]  # before each transition, and after
    per: list[dict[str, Any]] = []
    times: list[list[float]] = []
    missed: list[int] = []
    for k, at in enumerate(done):
        want: Want
        if k < steps:
            aborted = k == steps - 1
            want = (
                fleet.rollout_id,
                None if aborted else k,
                "aborted" if aborted else "running",
                None,
            )
            moved = [
                w
                for w in fleet.keyids
                if in_candidate_cohort(fleet.rollout_id, w, weights[k])
                != in_candidate_cohort(fleet.rollout_id, w, weights[k + 1])
            ]
        else:  # the alias moved: every worker, from the stable to the candidate and back
            want = (None, None, None, fleet.candidate if k == steps else fleet.stable)
            moved = fleet.keyids
        since = done[k - 1] if k else 0.0  # the transition before may show the same digest
        seen = [first_seen(timeline.get(w, []), since, want) for w in moved]
        # a poll answered before the command returned counts 0
        times.append([max(0.0, t - at) for t in seen if t is not None])
        missed.append(len(moved) - len(times[-1]))
        per.append(
            {"moved": len(moved), "seen": len(times[-1]), "max_s": max(times[-1], default=None)}
        )
    rollout = [t for ts in times[:steps] for t in ts]
    rollback = times[-1]
    return {
        "converge_p50_s": percentile(rollout, 50),
        "converge_p95_s": percentile(rollout, 95),
        "converge_max_s": max(rollout, default=None),
        "moved_workers": sum(p["moved"] for p in per[:steps]),
        "not_converged": sum(missed[:steps]),
        "rollback_p50_s": percentile(rollback, 50),
        "rollback_p95_s": percentile(rollback, 95),
        "rollback_max_s": max(rollback, default=None),
        "rollback_moved": per[-1]["moved"],
        "rollback_not_converged": missed[-1],
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
        ("workers moved by the rollout's steps", lambda x: f"{x['moved_workers']:,}"),
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
        (
            "each command's own time (start to return), s",
            lambda x: " / ".join(f"{t:.2f}" for t in x["command_s"]),
        ),
        (
            "alias rollback: convergence p50 / p95 / max, s",
            lambda x: " / ".join(
                num(x[k], "{:.2f}") for k in ("rollback_p50_s", "rollback_p95_s", "rollback_max_s")
            ),
        ),
        (
            "alias rollback: workers moved, never saw it",
            lambda x: f"{x['rollback_moved']:,}, {x['rollback_not_converged']}",
        ),
        ("registry CPU idle, cores", lambda x: f"{x['cpu_idle_cores']:.3f}"),
        ("registry CPU, steady fleet, cores", lambda x: f"{x['cpu_steady_cores']:.3f}"),
        ("registry CPU over the steps, cores", lambda x: f"{x['cpu_steps_cores']:.3f}"),
        ("registry CPU over the rollback, cores", lambda x: f"{x['cpu_rollback_cores']:.3f}"),
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
