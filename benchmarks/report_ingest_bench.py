"""Report ingestion in process (issue 40 item 1): CPU per fleet report, and where it goes.

A ``modelward serve`` sets up what rollout_bench.py sets up for ``--workers`` keys (a signed
plan at its first step, the keys registered to a reader principal), then stops; this process
opens the same data directory with the registry's own ``build_state`` and sends
``--reports`` signed reports, one per key in turn with rising ``seq``, through what the
route runs: the token's authentication (``auth.service.authenticate``) and the app state's
report queue (``domains._report_queue``: group commit into ``rollouts.reports.ingest``),
``--concurrency`` requests in flight. Prints CPU milliseconds per report
(``time.process_time``: this process only, not the PostgreSQL server's). ``--profile``
calls ``ingest`` directly in batches of ``--batch`` under cProfile (CPU time) instead.

    .venv/bin/python benchmarks/report_ingest_bench.py --workers 200 --reports 2000
    .venv/bin/python benchmarks/report_ingest_bench.py --database postgres --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import secrets
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from registry_bench import Postgres, Serve
from rollout_bench import ALIAS, setup_fleet

from modelward.attest.keys import keyid
from modelward.attest.rollout import make_report_predicate
from modelward.attest.statement import PredicateType
from modelward.attest.trust import TrustSet
from modelward.loader.statements import WorkerKey, sign_predicate
from modelward.registry.app import build_state
from modelward.registry.domains.auth.service import authenticate
from modelward.registry.domains.rollouts import reports
from modelward.registry.settings import Settings


def envelopes(fleet: Any, count: int) -> list[bytes]:
    """``count`` signed reports, key after key, each key's ``seq`` rising."""
    keys = [Ed25519PrivateKey.from_private_bytes(raw) for raw in fleet.keys]
    out = []
    for n in range(count):
        key = keys[n % len(keys)]
        kid = keyid(key.public_key())
        digest = fleet.stable  # before the first advance every key is assigned the stable one
        predicate = make_report_predicate(
            repository=fleet.repo, alias=ALIAS, rollout_id=fleet.rollout_id, digest=digest,
            worker_keyid=kid, seq=n // len(keys) + 1, interval_seconds=10, requests=100,
            errors=0, retries=0, ttft_p50_ms=80.0, ttft_p95_ms=200.0, itl_p95_ms=20.0,
            queue_age_p95_ms=4.0, task_checks_passed=3, capacity=64, inflight_peak=9,
            stable_warm=True,
        )  # fmt: skip
        out.append(
            sign_predicate(
                WorkerKey(key, TrustSet()),
                fleet.repo,
                digest,
                PredicateType.ROLLOUT_REPORT,
                predicate,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--reports", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    parser.add_argument("--batch", type=int, default=64, help="reports per batch (--profile)")
    parser.add_argument("--profile-lines", type=int, default=40)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--profile", action="store_true", help="cProfile one thread's loop")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mw-ingest-bench-"))
    pg = Postgres() if opts.database == "postgres" else None
    try:
        url = None
        if pg is not None:
            url = f"postgresql+psycopg://postgres@{pg.database(f'mwing{secrets.token_hex(3)}')}"
        serve = Serve(work, url)
        try:
            ns = argparse.Namespace(steps=[5, 20, 50, 100], reports=True, tokens=1)
            fleet = setup_fleet(work, serve, opts.workers, ns)
        finally:
            serve.stop()
        data = work / f"serve-{serve.port}"
        settings = Settings(data_dir=data, database_url=url)
        state = build_state(settings)
        bodies = envelopes(fleet, opts.reports)
        token = fleet.tokens[0]
        with state.db.read() as session:
            caller = authenticate(session, token)
        # one warm-up report per key is not counted: the first of each key's caches
        reports.ingest(
            state, [reports.Incoming(fleet.repo, ALIAS, b, caller) for b in bodies[: opts.workers]]
        )
        rest = bodies[opts.workers :]
        answers: dict[str, int] = {}

        def count(outcome: object) -> None:
            key = (
                type(outcome).__name__
                if not isinstance(outcome, dict)
                else ("counted" if outcome["counted"] else "fault")
            )
            answers[key] = answers.get(key, 0) + 1

        def send_direct(chunk: list[bytes]) -> None:
            for start in range(0, len(chunk), opts.batch):
                items = []
                for body in chunk[start : start + opts.batch]:
                    with state.db.read() as session:  # the route's authentication
                        items.append(
                            reports.Incoming(fleet.repo, ALIAS, body, authenticate(session, token))
                        )
                for outcome in reports.ingest(state, items):
                    count(outcome)

        async def send_queued() -> None:
            async def one(body: bytes) -> None:
                with state.db.read() as session:  # the route's authentication
                    caller = authenticate(session, token)
                item = reports.Incoming(fleet.repo, ALIAS, body, caller)
                count(await state.reports.submit(item, partial(reports.ingest, state)))

            async def sender(chunk: list[bytes]) -> None:
                for body in chunk:
                    await one(body)

            await asyncio.gather(
                *(sender(rest[i :: opts.concurrency]) for i in range(opts.concurrency))
            )

        cpu0, wall0 = time.process_time(), time.perf_counter()
        if opts.profile:
            prof = cProfile.Profile(time.process_time)
            prof.runcall(send_direct, rest)
        else:
            asyncio.run(send_queued())
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        n = len(rest)
        print(
            f"{opts.database}: {n} reports, {cpu / n * 1000:.3f} ms CPU and "
            f"{wall / n * 1000:.3f} ms wall per report ({answers})"
        )
        if opts.profile:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(opts.profile_lines)
        state.db.dispose()
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
