"""TUF alias resolution benchmark (issue 11): a benchmark, not a timed test.

Alias resolution as a worker does it, against ``modelward serve`` on each of
``--databases`` (default: the embedded SQLite and PostgreSQL, one after the other in one
run, each with ``serve``'s default workers), with ``--aliases`` aliases spread over
``--repos`` repositories (docs/tuf.md):

  1. setup: one signed bundle per repository, then every alias moved to it and its TUF
     proposal signed (``--setup publisher``: the publisher signs each proposal locally and
     POSTs the signature, as ``alias set --key`` does; ``--setup online``: the repositories'
     policy has an ``online: true`` rule, so the registry signs at once);
  2. metadata fetch rate and p50/p99 latency with ``--connections`` concurrent authenticated
     clients (``wrk``): the mix a cold refresh fetches (``timestamp.json``, the versioned
     snapshot and top-level targets, each repository's versioned delegated role, round
     robin), ``timestamp.json`` alone (what a warm refresh fetches), and ``timestamp.json``
     with ``If-None-Match`` naming its current ETag (the ``304`` a worker's unchanged poll
     gets);
  3. a worker's refresh plus target lookup (``loader.tuf_resolve.resolve_alias`` through
     ``RegistryClient.tuf_fetcher()``), one at a time, median over ``--runs`` runs of a
     random alias: cold (empty cache: root, timestamp, snapshot, targets, delegated role),
     warm after the registry re-signed only the timestamp, and warm with nothing changed;
  4. MLflow's ``GET /api/2.0/mlflow/registered-models/alias`` on the same PostgreSQL with the
     same ``wrk`` load (``registry_bench.bench_mlflow``; ``--mlflow-venv DIR`` with ``mlflow``
     and ``psycopg2-binary``), and the ratios.

The targets: metadata fetches at >= 20x MLflow's alias rate, p99 <= 20 ms (issue 11);
``timestamp.json`` at >= 6,050 req/s (10x the 605 of issue 29) with p99 <= 20 ms on each
database (issue 29). The table says whether each was met. Missing peers (wrk, MLflow) are
reported as "not run". Prints a Markdown table and writes JSON to ``--out``.

    .venv/bin/python benchmarks/tuf_bench.py --aliases 1000 --repos 100 \\
        --mlflow-venv /tmp/mlflow-venv --out tuf-bench.json
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from registry_bench import REPO, Postgres, Serve, _guarded, bench_mlflow, wrk
from tuf.api.metadata import Metadata, Snapshot, Timestamp
from tuf.ngclient import FetcherInterface

from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.attest.tuf import online_role, open_role, tuf_signer
from modelward.client.api import RegistryClient
from modelward.loader.tuf_resolve import resolve_alias
from modelward.registry.db import Database, make_engine
from modelward.registry.domains.signing.tuf.bootstrap import open_repository
from modelward.registry.domains.signing.tuf.generation import GENERATION_FILE, SharedGeneration
from modelward.registry.domains.signing.tuf.keys import OnlineKeys

TARGET_RATIO = 20.0
TARGET_P99_MS = 20.0
TARGET_TIMESTAMP_RPS = 6050.0  # 10x the 605 req/s of issue 29's table
DATABASES = ("sqlite", "postgres")
ONLINE_RULE = '  - pattern: "*"\n    roles: [publisher, admin]\n'


class CountingFetcher(FetcherInterface):
    """The registry client's TUF fetcher, counting the files and bytes a refresh fetches."""

    def __init__(self, inner: FetcherInterface) -> None:
        self.inner = inner
        self.files = 0
        self.bytes = 0

    def _fetch(self, url: str) -> Iterator[bytes]:
        self.files += 1
        for chunk in self.inner._fetch(url):
            self.bytes += len(chunk)
            yield chunk


def online_policy() -> str:
    """The default policy with its catch-all alias rule signed by the registry's online key."""
    from modelward.registry.policy import builtin_default_policy

    text = builtin_default_policy()
    if ONLINE_RULE not in text:
        raise RuntimeError("the default policy's catch-all alias rule changed: update ONLINE_RULE")
    return text.replace(ONLINE_RULE, ONLINE_RULE + "    online: true\n")


def setup(
    work: Path, serve: Serve, repos: int, aliases: int, mode: str
) -> tuple[str, list[tuple[str, str, str]], list[float]]:
    """Repositories, bundles and signed aliases: (a reader's token, [(repo, alias, digest)],
    each alias move's milliseconds: set, and for ``publisher`` fetch, sign and send)."""
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
    policy = online_policy() if mode == "online" else None
    bundle = make_bundle_dir(work / "bundle")
    made: list[tuple[str, str, str]] = []
    moves_ms: list[float] = []
    for r in range(repos):
        repo = f"bench/m{r:03d}"
        admin.create_repo(repo, policy)
        admin.add_publisher(repo, name)
        digest = publisher.push(bundle, repo, sign=pub.sign).digest
        for a in range(r, aliases, repos):  # aliases spread evenly over the repositories
            alias = f"a{a:04d}"
            start = time.perf_counter()
            answer = publisher.set_alias(repo, alias, digest, expected_version=0)
            if mode == "publisher":
                if answer.get("proposal") is None:
                    raise RuntimeError(f"{repo}@{alias}: no TUF proposal made: {answer}")
                proposal = publisher.tuf_proposal(int(answer["proposal"]))
                payload = base64.b64decode(proposal["payload"])
                signature = Metadata.from_bytes(payload).sign(signer)
                signed = publisher.tuf_sign(proposal["id"], signature.keyid, signature.signature)
                if signed["state"] != "published":
                    raise RuntimeError(f"{repo}@{alias}: proposal not published: {signed}")
            elif not answer.get("signed"):
                raise RuntimeError(f"{repo}@{alias}: the online rule did not sign: {answer}")
            moves_ms.append((time.perf_counter() - start) * 1000)
            made.append((repo, alias, digest))
        if (r + 1) % 10 == 0:
            print(f"setup: {r + 1}/{repos} repositories, {len(made)} aliases", file=sys.stderr)
    reader = "r" + secrets.token_hex(4)
    admin.create_principal(reader, "reader")
    token = str(admin.create_token(reader)["token"])
    admin.close()
    publisher.close()
    return token, made, moves_ms


def metadata_paths(client: RegistryClient, repos: list[str], online: bool) -> list[str]:
    """The files a cold refresh fetches: timestamp, then the versions it names, round robin
    over every repository's delegated alias role (URL paths as python-tuf quotes role names)."""
    timestamp = Metadata[Timestamp].from_bytes(client.tuf_file("timestamp.json")).signed
    snapshot_version = timestamp.snapshot_meta.version
    snapshot = (
        Metadata[Snapshot].from_bytes(client.tuf_file(f"{snapshot_version}.snapshot.json")).signed
    )
    top = [
        "/tuf/timestamp.json",
        f"/tuf/{snapshot_version}.snapshot.json",
        f"/tuf/{snapshot.meta['targets.json'].version}.targets.json",
    ]
    paths: list[str] = []
    for repo in repos:
        role = online_role(repo) if online else open_role(repo)
        meta = snapshot.meta.get(f"{role}.json")
        if meta is None:
            raise RuntimeError(f"{repo}: no {role} in the snapshot")
        paths += [*top, f"/tuf/{meta.version}.{quote(role, safe='')}.json"]
    return paths


def wrk_paths(
    work: Path,
    base: str,
    paths: list[str],
    token: str,
    duration: int,
    conns: int,
    headers: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """``wrk`` over ``paths`` in turn (each thread round robin from its own start)."""
    script = work / "paths.lua"
    script.write_text(
        "local paths = {" + ",".join(json.dumps(p) for p in paths) + "}\n"
        "local i = 0\n"
        "request = function()\n"
        "  i = i % #paths + 1\n"
        "  return wrk.format(nil, paths[i])\n"
        "end\n"
    )
    return wrk(
        base + paths[0],
        {"Authorization": f"Bearer {token}", **(headers or {})},
        duration,
        conns,
        script=script,
    )


def bump_timestamp(database_url: str, keys_dir: Path) -> None:
    """Re-sign only the timestamp, as the registry does at half its lifetime, and announce
    it to the ``serve`` processes as one of them would (signing/tuf/generation.py)."""
    engine = make_engine(database_url)
    try:
        with Database(engine).write() as session:
            open_repository(session, OnlineKeys(keys_dir)).do_timestamp(force=True)
    finally:
        engine.dispose()
    SharedGeneration(keys_dir / GENERATION_FILE).bump()


def refresh_times(
    work: Path,
    client: RegistryClient,
    made: list[tuple[str, str, str]],
    runs: int,
    online: bool,
    bump: Any,
) -> dict[str, Any]:
    """Medians of cold, warm-after-timestamp and warm-unchanged resolves of random aliases."""
    root = client.tuf_file("1.root.json")
    rng = random.Random(11)
    out: dict[str, Any] = {}
    caches = work / "worker-caches"
    shutil.rmtree(caches, ignore_errors=True)

    def resolve(repo: str, alias: str, digest: str, cache: Path) -> tuple[float, int, int]:
        fetcher = CountingFetcher(client.tuf_fetcher())
        start = time.perf_counter()
        got = resolve_alias(
            repo,
            alias,
            metadata_url=client.tuf_url,
            cache_dir=cache,
            trust_root=root,
            fetcher=fetcher,
            online_aliases=("*",) if online else (),
        )
        elapsed = time.perf_counter() - start
        if got.digest != digest:
            raise RuntimeError(f"{repo}@{alias} resolved to {got.digest}, not {digest}")
        return elapsed, fetcher.files, fetcher.bytes

    picks = [rng.choice(made) for _ in range(runs)]
    for kind in ("cold", "warm_timestamp_changed", "warm_unchanged"):
        times, files, sizes = [], [], []
        for i, (repo, alias, digest) in enumerate(picks):
            cache = caches / str(i)
            if kind == "warm_timestamp_changed":
                bump()
            elapsed, n, size = resolve(repo, alias, digest, cache)
            times.append(elapsed * 1000)
            files.append(n)
            sizes.append(size)
        out[kind] = {
            "median_ms": statistics.median(times),
            "min_ms": min(times),
            "max_ms": max(times),
            "files_fetched": statistics.median(files),
            "bytes_fetched": statistics.median(sizes),
            "runs": runs,
        }
        print(f"refresh {kind}: {out[kind]}", file=sys.stderr)
    shutil.rmtree(caches, ignore_errors=True)
    return out


def bench_database(
    work: Path, kind: str, database_url: str | None, opts: argparse.Namespace
) -> dict[str, Any]:
    """Setup, the wrk rows and the refresh times against one ``serve`` on ``kind``."""
    out: dict[str, Any] = {"database": kind}
    serve = Serve(work, database_url, opts.workers)
    try:
        start = time.perf_counter()
        token, made, moves_ms = setup(work, serve, opts.repos, opts.aliases, opts.setup)
        out["setup_s"] = time.perf_counter() - start
        tenth = max(1, len(moves_ms) // 10)
        out["alias_move_ms"] = {  # grows with the number of repositories
            "median_first_tenth": statistics.median(moves_ms[:tenth]),
            "median_last_tenth": statistics.median(moves_ms[-tenth:]),
        }
        print(f"{kind} setup: {out['setup_s']:.1f} s", file=sys.stderr)
        client = RegistryClient(serve.url, token)
        repos = sorted({repo for repo, _, _ in made})
        paths = metadata_paths(client, repos, opts.setup == "online")
        timestamp = client.tuf_file("timestamp.json")  # its ETag: the 304 row's If-None-Match
        rows = {
            "metadata_mix": (paths, None),
            "metadata_timestamp": (paths[:1], None),
            "metadata_timestamp_304": (
                paths[:1],
                {"If-None-Match": f'"{hashlib.sha256(timestamp).hexdigest()}"'},
            ),
        }
        for row, (row_paths, headers) in rows.items():
            out[row] = wrk_paths(
                work, serve.url, row_paths, token, opts.duration, opts.connections, headers
            )
            print(f"{kind} {row}: {out[row]}", file=sys.stderr)
        keys_dir = work / f"serve-{serve.port}" / "tuf-keys"
        url = database_url or f"sqlite:///{work / f'serve-{serve.port}' / 'registry.db'}"
        out["refresh"] = refresh_times(
            work,
            client,
            made,
            opts.runs,
            opts.setup == "online",
            lambda: bump_timestamp(url, keys_dir),
        )
        client.close()
    finally:
        serve.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aliases", type=int, default=1000)
    parser.add_argument("--repos", type=int, default=100)
    parser.add_argument(
        "--setup",
        choices=("publisher", "online"),
        default="publisher",
        help="who signs the aliases' TUF roles (default: the publisher)",
    )
    parser.add_argument(
        "--databases",
        default=",".join(DATABASES),
        help="comma-separated, run in this order (default: sqlite,postgres)",
    )
    parser.add_argument("--runs", type=int, default=20, help="refreshes per median")
    parser.add_argument("--duration", type=int, default=15, help="seconds per wrk row")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--workers", type=int, default=None, help="serve --workers")
    parser.add_argument("--mlflow-venv", type=Path, default=None)
    parser.add_argument("--skip-mlflow", action="store_true", help="no MLflow peer row")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("tuf-bench.json"))
    opts = parser.parse_args()
    if not 1 <= opts.repos <= opts.aliases:
        parser.error("--repos must be between 1 and --aliases")
    databases = [d for d in opts.databases.split(",") if d]
    if not databases or set(databases) - set(DATABASES):
        parser.error(f"--databases: a comma-separated list of {', '.join(DATABASES)}")
    work = opts.work or Path(tempfile.mkdtemp(prefix="mw-tuf-bench-"))
    results: dict[str, Any] = {
        "aliases": opts.aliases,
        "repos": opts.repos,
        "setup_mode": opts.setup,
        "connections": opts.connections,
        "databases": databases,
        "machine": {"nproc": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "argv": sys.argv[1:],
        "runs": {},
    }
    pg = Postgres() if "postgres" in databases else None
    try:
        for kind in databases:
            url = None
            if kind == "postgres" and pg is not None:
                url = f"postgresql+psycopg://postgres@{pg.database(f'mwtuf{secrets.token_hex(3)}')}"
            results["runs"][kind] = bench_database(work, kind, url, opts)
            opts.out.write_text(json.dumps(results, indent=2))
        results["alias_mlflow"] = (
            None
            if opts.skip_mlflow or pg is None
            else _guarded(bench_mlflow, work, pg, opts.mlflow_venv, opts.duration, opts.connections)
        )
        results["machine"]["loadavg_end"] = os.getloadavg()
    finally:
        if pg is not None:
            pg.stop()
        if opts.work is None:
            shutil.rmtree(work, ignore_errors=True)
    results["targets"] = {kind: verdicts(run, results) for kind, run in results["runs"].items()}
    opts.out.write_text(json.dumps(results, indent=2))
    print(render(results))


def verdicts(run: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """The targets, met or not (None when a row did not run)."""
    ml = r.get("alias_mlflow")
    out: dict[str, Any] = {}
    for name in ("mix", "timestamp", "timestamp_304"):
        row = run.get(f"metadata_{name}")
        out[f"{name}_ratio"] = row["rps"] / ml["rps"] if row and ml else None
        out[f"{name}_ratio_met"] = (
            out[f"{name}_ratio"] >= TARGET_RATIO if out[f"{name}_ratio"] is not None else None
        )
        out[f"{name}_p99_met"] = row["p99_ms"] <= TARGET_P99_MS if row else None
        out[f"{name}_rps_met"] = row["rps"] >= TARGET_TIMESTAMP_RPS if row else None
    return out


def render(r: dict[str, Any]) -> str:
    def rate(x: dict[str, Any] | None) -> str:
        if not x:
            return "not run"
        errors = f", {x['non_2xx']} non-2xx" if x.get("non_2xx") else ""
        return f"{x['rps']:.0f} req/s, p50 {x['p50_ms']:.1f} ms, p99 {x['p99_ms']:.1f} ms{errors}"

    def met(value: bool | None) -> str:
        return "not run" if value is None else ("met" if value else "**not met**")

    runs = r["runs"]
    kinds = list(runs)
    conns = r["connections"]
    lines = [
        f"{r['aliases']} aliases in {r['repos']} repositories, signed by {r['setup_mode']}; "
        + "; ".join(
            f"{k}: setup {runs[k]['setup_s']:.0f} s, one alias move (median) "
            f"{runs[k]['alias_move_ms']['median_first_tenth']:.0f} ms over the first tenth of "
            f"the repositories, {runs[k]['alias_move_ms']['median_last_tenth']:.0f} ms over "
            "the last"
            for k in kinds
        ),
        "",
        "| measurement | " + " | ".join(f"modelward, {k}" for k in kinds) + " | target |",
        "|---|" + "---|" * len(kinds) + "---|",
    ]

    def row(label: str, key: str, target: str) -> str:
        cells = " | ".join(rate(runs[k].get(key)) for k in kinds)
        return f"| {label} | {cells} | {target} |"

    def verdict(name: str, what: str) -> str:
        return ", ".join(f"{k} {met(r['targets'][k][f'{name}_{what}_met'])}" for k in kinds)

    lines += [
        row(
            f"metadata fetch, cold-refresh mix, {conns} clients",
            "metadata_mix",
            f"p99 <= {TARGET_P99_MS:g} ms: {verdict('mix', 'p99')}",
        ),
        row(
            f"metadata fetch, timestamp.json only, {conns} clients",
            "metadata_timestamp",
            f">= {TARGET_TIMESTAMP_RPS:,.0f} req/s: {verdict('timestamp', 'rps')}; "
            f"p99 <= {TARGET_P99_MS:g} ms: {verdict('timestamp', 'p99')}",
        ),
        row(
            f"metadata fetch, timestamp.json If-None-Match (304), {conns} clients",
            "metadata_timestamp_304",
            f"p99 <= {TARGET_P99_MS:g} ms: {verdict('timestamp_304', 'p99')}",
        ),
        f"| MLflow alias endpoint, {conns} clients (PostgreSQL) | "
        + " | ".join(rate(r.get("alias_mlflow")) if k == "postgres" else "" for k in kinds)
        + " | |",
    ]
    for name in ("mix", "timestamp"):
        ratios = [r["targets"][k][f"{name}_ratio"] for k in kinds]
        cells = " | ".join("not run" if x is None else f"{x:.1f}×" for x in ratios)
        lines.append(
            f"| ratio {name} / MLflow | {cells} | >= {TARGET_RATIO:g}×: {verdict(name, 'ratio')} |"
        )
    labels = {
        "cold": "worker refresh + lookup, cold (empty cache)",
        "warm_timestamp_changed": "worker refresh + lookup, warm (new timestamp only)",
        "warm_unchanged": "worker refresh + lookup, warm (nothing changed)",
    }
    for kind, label in labels.items():
        found = [runs[k].get("refresh", {}).get(kind) for k in kinds]
        if any(found):
            n = next(f for f in found if f)["runs"]
            cells = " | ".join(
                f"{f['median_ms']:.1f} ms ({f['files_fetched']:.0f} files, "
                f"{f['bytes_fetched'] / 1024:.1f} KiB)"
                if f
                else "not run"
                for f in found
            )
            lines.append(f"| {label}, median of {n} | {cells} | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
