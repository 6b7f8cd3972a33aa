"""rollout_bench's simulated workers: a fleet that polls TUF and reports as serving workers do.

Each ``Sim`` is one process of asyncio tasks over keep-alive connections (fleet_bench's
minimal HTTP/1.1 client). A worker polls ``timestamp.json`` with ``If-None-Match``; on a new
timestamp it fetches the versioned snapshot, then only the roles whose version changed (the
top-level targets, the alias's role with the plan, ``ORG:NAME@=rollout`` with the step), as
a worker's refresh does (``loader/tuf_resolve.py``), and computes its own digest from the
step with ``attest.rollout.resolve_digest`` (its bucket from its key id). It parses the
metadata but does not verify its signatures (a worker's CPU, not the registry's). With
``reports`` it sends one signed fleet report per poll. Each worker's timeline records every
change of what it serves: the rollout, step index and state it holds and the digest.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fleet_bench import Connection
from tuf.api.metadata import Metadata, Snapshot, Targets, Timestamp

from modelward.attest.keys import keyid
from modelward.attest.rollout import (
    RolloutPlan,
    RolloutStep,
    make_report_predicate,
    parse_plan,
    parse_step,
    resolve_digest,
)
from modelward.attest.rollout.paths import rollout_path, rollout_role, step_path
from modelward.attest.statement import PredicateType
from modelward.attest.trust import TrustSet
from modelward.attest.tuf import alias_path, open_role
from modelward.loader.statements import WorkerKey, sign_predicate

ALIAS = "live"
# what a worker records when what it serves changes: time.time(), rollout id, index, state, digest
Seen = tuple[float, str, int | None, str, str]


@dataclass
class Sim:
    """What one process of simulated workers is told (pickled as the process is spawned, the
    only time ``end``, a shared double, can be)."""

    host: str
    port: int
    tokens: list[str]
    repo: str
    keys: list[bytes]  # raw ed25519 private keys, one per worker of this process
    phases: list[float]  # each worker's first poll, seconds after ``start``
    poll: float
    start: float  # time.time() of the first poll
    end: Any  # a shared double: time.time() the polls stop, set once the last command returned
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
    timeline: dict[str, list[Seen]] = field(default_factory=dict)  # worker key id -> changes


@dataclass
class Worker:
    """One simulated worker's state: what a real worker keeps in its TUF cache."""

    key: WorkerKey
    keyid: str
    etag: str = ""
    held: dict[str, int] = field(default_factory=dict)  # role -> version held
    seen: tuple[str, int | None, str, str] | None = None  # rollout id, index, state, digest
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
                if due >= sim.end.value:
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
            (step.rollout_id, step.index, step.state, digest)
            if step is not None
            else ("", None, "planned" if plan is not None else "none", digest)
        )
        worker.rollout_id = step.rollout_id if step is not None else None
        worker.digest = digest
        if seen != worker.seen:
            worker.seen = seen
            observed.timeline.setdefault(worker.keyid, []).append((time.time(), *seen))

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
