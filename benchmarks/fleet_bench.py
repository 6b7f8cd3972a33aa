"""Fleet benchmark (issue 29, item 4): a fleet of workers polling TUF metadata.

``--workers`` simulated workers (default 10,000) each poll ``timestamp.json`` every
``--poll-seconds`` (default 10: about 1,000 requests a second), with ``If-None-Match`` naming
the ETag of the timestamp they hold, as a serving worker's TUF refresh does; first polls are
spread evenly over one interval. Halfway through ``--duration`` the benchmark moves an alias
as its publisher does (``set_alias``, sign the proposal's payload locally, ``tuf_sign``);
every worker that then gets a new timestamp fetches what a refresh fetches next: the
versioned snapshot, top-level targets and its own repository's delegated role (workers are
spread over ``--repos`` repositories). Reported, per target:

- the polls and refresh fetches made, their rate, and the poll latency p50/p99 (send to last
  byte) and the p99 lag of a poll behind its schedule (the client's own backlog: above a few
  ms the client, not the server, is the bottleneck);
- the CPU time of the serving processes over the measured window (``modelward serve``: the
  supervisor and its workers; nginx: master and workers), from ``/proc``, also as cores;
- the time from the publish's answer until 50% and 99% of the workers have seen the new
  timestamp (a worker sees it on its first poll after the publish: the poll interval bounds
  it, plus the server's freshness).

Targets: ``registry`` (``modelward serve`` with its defaults, the embedded SQLite unless
``--database postgres``; every request carries one of ``--tokens`` reader tokens) and
``mirror`` (nginx serving the registry's static metadata directory, ``tuf_metadata_dir``,
default ``<data_dir>/mirror/tuf``, at ``/tuf/``; the same fleet, after the registry run).
nginx missing, or no metadata directory written, is reported as "not run". The simulated
workers are ``--procs`` processes of asyncio tasks over ``--connections`` keep-alive
connections in all, with a minimal HTTP/1.1 client (httpx costs more CPU per request than the
server does). Prints a Markdown table and writes JSON to ``--out``.

    .venv/bin/python benchmarks/fleet_bench.py --workers 10000 --poll-seconds 10 \\
        --duration 60 --out /tmp/fleet.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import getpass
import json
import multiprocessing
import os
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

import httpx
from registry_bench import REPO, Postgres, Serve, free_port, wait_http
from tuf.api.metadata import Metadata, Snapshot, Timestamp

from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.attest.tuf import open_role, tuf_signer
from modelward.client.api import RegistryClient

CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the serving side ------------------------------------------------------------------------
def cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and every process below it (``/proc``)."""
    total = 0.0
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
            for task in Path(f"/proc/{pid}/task").iterdir():
                children = (task / "children").read_text().split()
                todo += [int(c) for c in children]
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return total


class Nginx:
    """nginx in the foreground serving ``root`` (a directory holding ``tuf/``) at ``/``."""

    def __init__(self, work: Path, root: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        conf = work / "nginx.conf"
        conf.write_text(
            # workers run as this user (nginx ignores the line unless started by root): the
            # data directory is private to it
            f"daemon off;\nworker_processes 2;\nuser {getpass.getuser()};\n"
            f"pid {work}/nginx.pid;\nerror_log {work}/nginx-error.log;\n"
            "events { worker_connections 4096; }\n"
            "http {\n"
            f"  access_log off;\n  client_body_temp_path {work}/nginx-body;\n"
            f"  proxy_temp_path {work}/nginx-proxy;\n  fastcgi_temp_path {work}/nginx-fcgi;\n"
            f"  uwsgi_temp_path {work}/nginx-uwsgi;\n  scgi_temp_path {work}/nginx-scgi;\n"
            "  types { application/json json; }\n  keepalive_requests 1000000;\n"
            f"  server {{\n    listen 127.0.0.1:{self.port};\n    root {root};\n"
            "    location = /tuf/timestamp.json { add_header Cache-Control no-cache; }\n"
            "  }\n}\n"
        )
        self.proc = subprocess.Popen(
            ["nginx", "-c", str(conf), "-p", str(work)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_http(f"{self.url}/tuf/timestamp.json", timeout=30)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)


# -- the simulated workers -------------------------------------------------------------------
@dataclass
class Fleet:
    """What one process of simulated workers is told (picklable)."""

    host: str
    port: int
    tokens: list[str]
    workers: list[int]  # this process's worker numbers
    roles: list[str]  # delegated role per repository; worker n reads roles[n % len(roles)]
    etag: str  # of the timestamp every worker holds at the start
    version: int  # that timestamp's version
    poll: float
    start: float  # time.time() of the first poll
    end: float  # time.time() the polls stop
    connections: int
    prefix: str = "/tuf/"


@dataclass
class Tally:
    """What one process of simulated workers measured."""

    polls: int = 0
    fetches: int = 0
    errors: int = 0
    poll_ms: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)  # when each poll was sent
    lag_ms: list[float] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)  # when each worker first saw a new version


class Connection:
    """One keep-alive HTTP/1.1 connection: a request and its answer (Content-Length only)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str, headers: str) -> tuple[int, dict[str, str], bytes]:
        return await self.request("GET", path, headers)

    async def request(
        self, method: str, path: str, headers: str, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                self.fleet.host, self.fleet.port
            )
        assert self.reader is not None
        if body:
            headers += f"Content-Length: {len(body)}\r\n"
        self.writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: {self.fleet.host}\r\n{headers}\r\n".encode() + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                fields[name.strip().lower()] = value.strip()
        length = int(fields.get("content-length", "0"))
        body = await self.reader.readexactly(length) if length else b""
        if fields.get("connection", "").lower() == "close":
            self.writer.close()
            self.writer = None
        return status, fields, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def run_fleet(fleet: Fleet) -> Tally:
    tally = Tally()
    n = len(fleet.workers)
    etags = dict.fromkeys(fleet.workers, fleet.etag)
    seen: dict[int, float] = {}
    snapshots: dict[int, dict[str, int]] = {}  # parsed once per version per process
    queue: asyncio.Queue[tuple[float, int]] = asyncio.Queue(maxsize=fleet.connections * 4)

    async def schedule() -> None:
        # worker i of this process first polls at start + i/n of an interval, then every poll
        rounds = 0
        while True:
            for i, worker in enumerate(fleet.workers):
                due = fleet.start + (rounds + i / n) * fleet.poll
                if due >= fleet.end:
                    return
                delay = due - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await queue.put((due, worker))
            rounds += 1

    async def refresh(conn: Connection, worker: int, auth: str, timestamp: bytes) -> None:
        meta = Metadata[Timestamp].from_bytes(timestamp).signed
        version = meta.snapshot_meta.version
        if version not in snapshots:
            status, _, body = await conn.get(f"{fleet.prefix}{version}.snapshot.json", auth)
            tally.fetches += 1
            if status != 200:
                tally.errors += 1
                return
            snap = Metadata[Snapshot].from_bytes(body).signed
            snapshots[version] = {name: m.version for name, m in snap.meta.items()}
        else:
            await conn.get(f"{fleet.prefix}{version}.snapshot.json", auth)
            tally.fetches += 1
        listing = snapshots[version]
        role = fleet.roles[worker % len(fleet.roles)]
        for name in ("targets", role):
            path = f"{fleet.prefix}{listing[name + '.json']}.{quote(name, safe='')}.json"
            status, _, _ = await conn.get(path, auth)
            tally.fetches += 1
            tally.errors += status != 200

    async def connection() -> None:
        conn = Connection(fleet)
        try:
            while True:
                due, worker = await queue.get()
                if due < 0:
                    return
                token = fleet.tokens[worker % len(fleet.tokens)] if fleet.tokens else None
                auth = f"Authorization: Bearer {token}\r\n" if token else ""
                sent = time.time()
                try:
                    status, fields, body = await conn.get(
                        f"{fleet.prefix}timestamp.json", f"{auth}If-None-Match: {etags[worker]}\r\n"
                    )
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    tally.errors += 1
                    conn.close()
                    conn = Connection(fleet)
                    continue
                done = time.time()
                tally.polls += 1
                tally.poll_ms.append((done - sent) * 1000)
                tally.sent_at.append(sent)
                tally.lag_ms.append((sent - due) * 1000)
                if status == 200:
                    etags[worker] = fields.get("etag", "")
                    if worker not in seen:
                        version = json.loads(body)["signed"]["version"]
                        if version > fleet.version:
                            seen[worker] = done
                    await refresh(conn, worker, auth, body)
                elif status != 304:
                    tally.errors += 1
        finally:
            conn.close()

    tasks = [asyncio.create_task(connection()) for _ in range(fleet.connections)]
    await schedule()
    for _ in tasks:
        await queue.put((-1.0, -1))
    await asyncio.gather(*tasks)
    tally.seen = list(seen.values())
    return tally


def fleet_process(fleet: Fleet, out: Any) -> None:
    out.send(asyncio.run(run_fleet(fleet)))
    out.close()


# -- one target ------------------------------------------------------------------------------
def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def run_target(
    url: str,
    tokens: list[str],
    roles: list[str],
    opts: argparse.Namespace,
    cpu_pids: list[int],
    publish: Any,
) -> dict[str, Any]:
    """The fleet against ``url``; ``publish()`` halfway, returning when it was answered.
    Every worker starts with the timestamp ``url`` serves now, and its ETag."""
    first = httpx.get(
        f"{url}/tuf/timestamp.json",
        headers={"authorization": f"Bearer {tokens[0]}"} if tokens else {},
        timeout=30,
    )
    first.raise_for_status()
    host, port = url.removeprefix("http://").rsplit(":", 1)
    start = time.time() + 1.0
    end = start + opts.duration
    procs = max(1, min(opts.procs, opts.workers))
    fleets = [
        Fleet(
            host=host,
            port=int(port),
            tokens=tokens,
            workers=list(range(i, opts.workers, procs)),
            roles=roles,
            etag=first.headers["etag"],
            version=Metadata[Timestamp].from_bytes(first.content).signed.version,
            poll=opts.poll_seconds,
            start=start,
            end=end,
            connections=max(1, opts.connections // procs),
        )
        for i in range(procs)
    ]
    ctx = multiprocessing.get_context("spawn")
    pipes, children = [], []
    for fleet in fleets:
        mine, theirs = ctx.Pipe(duplex=False)
        child = ctx.Process(target=fleet_process, args=(fleet, theirs))
        child.start()
        pipes.append(mine)
        children.append(child)
    time.sleep(max(0.0, start - time.time()))
    cpu_start = sum(cpu_seconds(pid) for pid in cpu_pids)
    time.sleep(max(0.0, start + opts.duration / 2 - time.time()))
    published = publish()
    time.sleep(max(0.0, end - time.time()))
    cpu = sum(cpu_seconds(pid) for pid in cpu_pids) - cpu_start
    tallies: list[Tally] = [pipe.recv() for pipe in pipes]
    for child in children:
        child.join(60)
    polls = [ms for t in tallies for ms in t.poll_ms]
    timed = [(ms, at) for t in tallies for ms, at in zip(t.poll_ms, t.sent_at, strict=True)]
    steady = [ms for ms, at in timed if at < published]
    burst = [ms for ms, at in timed if at >= published]
    lags = [ms for t in tallies for ms in t.lag_ms]
    seen = sorted(s - published for t in tallies for s in t.seen)
    seen_share = len(seen) / opts.workers

    def seen_by(p: float) -> float | None:  # seconds until p% of all workers saw it
        k = int(p / 100 * opts.workers + 0.999999) - 1
        return seen[k] if 0 <= k < len(seen) else None

    return {
        "polls": sum(t.polls for t in tallies),
        "refresh_fetches": sum(t.fetches for t in tallies),
        "errors": sum(t.errors for t in tallies),
        "polls_per_s": sum(t.polls for t in tallies) / opts.duration,
        "poll_p50_ms": percentile(polls, 50),
        "poll_p99_ms": percentile(polls, 99),
        "poll_p99_before_publish_ms": percentile(steady, 99),
        "poll_p99_after_publish_ms": percentile(burst, 99),
        "lag_p99_ms": percentile(lags, 99),
        "server_cpu_s": cpu,
        "server_cores": cpu / opts.duration,
        "seen_share": seen_share,
        "seen_50_s": seen_by(50),
        "seen_99_s": seen_by(99),
    }


# -- setup -----------------------------------------------------------------------------------
def setup(work: Path, serve: Serve, repos: int, tokens: int) -> dict[str, Any]:
    """Repositories with one publisher-signed alias each, and ``tokens`` reader tokens."""
    sys.path.insert(0, str(REPO))
    from tests.registry.conftest import Publisher, make_bundle_dir

    admin = RegistryClient(serve.url, serve.token, timeout=120)
    name = "pub" + secrets.token_hex(3)
    admin.create_principal(name, "publisher")
    publisher = RegistryClient(serve.url, str(admin.create_token(name)["token"]), timeout=120)
    key = generate_private_key("ed25519")
    publisher.register_key(public_key_pem(key.public_key()).decode())
    pub = Publisher(actor=None, key=key, keyid="")  # type: ignore[arg-type]
    signer = tuf_signer(key)

    def move(repo: str, digest: str) -> None:
        answer = publisher.set_alias(repo, "live", digest)
        proposal = publisher.tuf_proposal(int(answer["proposal"]))
        signature = Metadata.from_bytes(base64.b64decode(proposal["payload"])).sign(signer)
        signed = publisher.tuf_sign(proposal["id"], signature.keyid, signature.signature)
        if signed["state"] != "published":
            raise RuntimeError(f"{repo}@live: proposal not published: {signed}")

    names, digests = [], []
    for r in range(repos):
        repo = f"fleet/m{r:03d}"
        admin.create_repo(repo)
        admin.add_publisher(repo, name)
        digests.append(publisher.push(make_bundle_dir(work / f"b{r}"), repo, sign=pub.sign).digest)
        move(repo, digests[-1])
        names.append(repo)
    # the bundle the burst moves the first repository's alias to
    spare = publisher.push(make_bundle_dir(work / "spare"), names[0], sign=pub.sign).digest
    reader = "r" + secrets.token_hex(4)
    admin.create_principal(reader, "reader")
    made = [str(admin.create_token(reader)["token"]) for _ in range(tokens)]
    admin.close()
    moves = iter([spare, digests[0]] * 4)  # each publish flips the alias

    def publish() -> float:
        move(names[0], next(moves))
        return time.time()

    return {"repos": names, "tokens": made, "publish": publish, "close": publisher.close}


# -- main ------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=10_000, help="simulated workers")
    parser.add_argument("--poll-seconds", type=float, default=10.0, help="each worker's interval")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per target")
    parser.add_argument("--repos", type=int, default=10, help="repositories (delegated roles)")
    parser.add_argument("--tokens", type=int, default=100, help="reader tokens the fleet shares")
    parser.add_argument("--connections", type=int, default=64, help="keep-alive, in all")
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--workers-serve", type=int, default=None, help="serve --workers")
    parser.add_argument("--skip-mirror", action="store_true", help="no nginx row")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("fleet-bench.json"))
    opts = parser.parse_args()
    if opts.workers < 1 or opts.poll_seconds <= 0 or opts.duration <= 0 or opts.repos < 1:
        parser.error("--workers, --poll-seconds, --duration and --repos must be positive")
    work = opts.work or Path(tempfile.mkdtemp(prefix="mw-fleet-bench-"))
    results: dict[str, Any] = {
        "argv": sys.argv[1:],
        "workers": opts.workers,
        "poll_seconds": opts.poll_seconds,
        "duration_s": opts.duration,
        "database": opts.database,
        "machine": {"nproc": os.cpu_count(), "loadavg_start": os.getloadavg()},
    }
    pg = Postgres() if opts.database == "postgres" else None
    try:
        url = (
            f"postgresql+psycopg://postgres@{pg.database(f'mwfleet{secrets.token_hex(3)}')}"
            if pg is not None
            else None
        )
        serve = Serve(work, url, opts.workers_serve)
        try:
            made = setup(work, serve, opts.repos, max(1, opts.tokens))
            roles = [open_role(repo) for repo in made["repos"]]
            reader = RegistryClient(serve.url, made["tokens"][0])
            results["registry"] = run_target(
                serve.url,
                made["tokens"],
                roles,
                opts,
                [serve.proc.pid],
                made["publish"],
            )
            print(f"registry: {results['registry']}", file=sys.stderr)
            mirror = work / f"serve-{serve.port}" / "mirror"
            results["mirror"] = None
            if opts.skip_mirror:
                results["mirror_note"] = "skipped (--skip-mirror)"
            elif shutil.which("nginx") is None:
                results["mirror_note"] = "not run: nginx is not installed"
            elif not (mirror / "tuf" / "timestamp.json").is_file():
                results["mirror_note"] = f"not run: no static metadata in {mirror / 'tuf'}"
            else:
                nginx = Nginx(work, mirror)
                try:
                    time.sleep(0.5)  # the mirror's copy is written after the commit
                    results["mirror"] = run_target(
                        nginx.url,
                        [],
                        roles,
                        opts,
                        [nginx.proc.pid],
                        made["publish"],
                    )
                    same = (mirror / "tuf" / "timestamp.json").read_bytes() == reader.tuf_file(
                        "timestamp.json"
                    )
                    results["mirror"]["same_timestamp_as_registry"] = same
                finally:
                    nginx.stop()
                print(f"mirror: {results['mirror']}", file=sys.stderr)
            reader.close()
            made["close"]()
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
    def cell(row: dict[str, Any] | None, key: str, fmt: str) -> str:
        if row is None:
            return str(r.get("mirror_note", "not run"))
        value = row.get(key)
        return "n/a" if value is None else fmt.format(value)

    reg, mir = r.get("registry"), r.get("mirror")
    for row in (reg, mir):
        if row is not None:
            before, after = row["poll_p99_before_publish_ms"], row["poll_p99_after_publish_ms"]
            row["poll_p99_split"] = " / ".join(
                "n/a" if x is None else f"{x:.2f}" for x in (before, after)
            )
    rows = [
        ("polls answered (200 or 304) per second", "polls_per_s", "{:,.0f}"),
        ("poll latency p50, ms", "poll_p50_ms", "{:.2f}"),
        ("poll latency p99, ms", "poll_p99_ms", "{:.2f}"),
        ("poll latency p99 before / after the publish, ms", "poll_p99_split", "{}"),
        ("client lag behind schedule p99, ms", "lag_p99_ms", "{:.1f}"),
        ("refresh fetches after the publish", "refresh_fetches", "{:,}"),
        ("errors", "errors", "{}"),
        ("server CPU over the run, s", "server_cpu_s", "{:.1f}"),
        ("server CPU, cores", "server_cores", "{:.2f}"),
        ("workers that saw the new timestamp", "seen_share", "{:.1%}"),
        ("time until 50% saw it, s", "seen_50_s", "{:.2f}"),
        ("time until 99% saw it, s", "seen_99_s", "{:.2f}"),
    ]
    lines = [
        f"{r['workers']:,} workers polling timestamp.json every {r['poll_seconds']:g} s for "
        f"{r['duration_s']:g} s, one publish halfway ({r['database']})",
        "",
        "| measurement | registry (`modelward serve`) | mirror (nginx) |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {cell(reg, k, f)} | {cell(mir, k, f)} |" for label, k, f in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
