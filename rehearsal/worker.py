"""A rehearsal worker: ``loader.follow.Follower`` with the stand-in engine
(``standin_engine.py``) instead of vLLM. A real process: real TUF resolution from the pinned
root, real pulls and verification into its own cache, real signed reports; only the engine
is a stand-in, and ``boot`` never imports this module (docs/rollouts.md#rehearsal).

``python -m modelward.rehearsal worker REPO@ALIAS --cache-dir D --trust-root ROOT
--public-key PEM --worker-key KEY --ready-file F [--poll S] [--report-interval S]
[--drain-seconds S] [--latency-ms MS] [--error-rate R] [--behave DIGEST=R,MS]...`` with
``MODELWARD_URL`` and ``MODELWARD_TOKEN`` in the environment. SIGTERM: drain, exit 0.

The engine's latency and error rate: ``--behave`` for a digest, else ``--latency-ms`` and
``--error-rate``; a bundle's own ``standin.json`` overrides both (the tests' bad bundles).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from modelward.attest.policy import TrustFlags
from modelward.client.api import RegistryClient
from modelward.loader.cache import Cache
from modelward.loader.errors import BaselineDivergence, EngineFailed
from modelward.loader.follow import Follower, FollowOptions, RunningEngine
from modelward.loader.hardening import ServingConfig
from modelward.loader.pull import PulledBundle
from modelward.loader.statements import load_worker_key

STANDIN = Path(__file__).with_name("standin_engine.py")
CAPACITY = 8  # what each stand-in admits at once (vLLM's max_num_seqs)


@dataclass(frozen=True)
class Behaviour:
    """How the stand-in serves a bundle: its TTFT around ``latency_ms``, and the share of
    requests that fail."""

    error_rate: float = 0.0
    latency_ms: float = 50.0


def parse_behave(text: str) -> tuple[str, Behaviour]:
    """``sha256:<hex>=ERROR_RATE,LATENCY_MS`` as the digest's hex and its behaviour."""
    digest, _, figures = text.partition("=")
    hex_ = digest.removeprefix("sha256:")
    parts = figures.split(",")
    wrong = argparse.ArgumentTypeError(
        f"--behave {text!r}: expected sha256:<64 hex>=ERROR_RATE (0..1),LATENCY_MS (>= 0)"
    )
    if len(hex_) != 64 or any(c not in "0123456789abcdef" for c in hex_) or len(parts) != 2:
        raise wrong
    try:
        behaviour = Behaviour(error_rate=float(parts[0]), latency_ms=float(parts[1]))
    except ValueError:
        raise wrong from None
    if not 0 <= behaviour.error_rate <= 1 or behaviour.latency_ms < 0:
        raise wrong
    return hex_, behaviour


class StandinEngine:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.base_url = f"http://127.0.0.1:{port}"
        self.metrics_url = f"{self.base_url}/metrics"
        self.capacity = CAPACITY

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, drain_seconds: float) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # drain
            try:
                self.proc.wait(drain_seconds)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # cancel
                self.proc.wait()


class StandinLauncher:
    """Starts a stand-in engine for a bundle (the cache names its directory by the digest's
    hex, which picks its ``Behaviour``)."""

    def __init__(self, default: Behaviour, by_digest: dict[str, Behaviour]) -> None:
        self.default = default
        self.by_digest = by_digest

    def start(self, bundle_dir: Path, config: ServingConfig) -> RunningEngine:
        behaviour = self.by_digest.get(bundle_dir.name, self.default)
        proc = subprocess.Popen(
            [
                sys.executable, str(STANDIN), "--bundle-dir", str(bundle_dir),
                "--latency-ms", str(behaviour.latency_ms),
                "--error-rate", str(behaviour.error_rate),
            ],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        if proc.stdout is None:  # pragma: no cover - stdout=PIPE
            raise EngineFailed("the stand-in engine has no stdout")
        line = proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            proc.kill()
            raise EngineFailed(f"the stand-in engine said {line!r}, not PORT <n>")
        engine = StandinEngine(proc, int(line[1]))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{engine.base_url}/v1/models", timeout=2).status_code == 200:
                    return engine
            except httpx.HTTPError:
                time.sleep(0.1)
        engine.stop(0)
        raise EngineFailed("the stand-in engine did not answer /v1/models")


def stand_in_baseline(pulled: PulledBundle, config: ServingConfig, engine: RunningEngine) -> None:
    """What ``boot --follow`` does on each load (``loader.worker.record_load``: the baseline),
    for the stand-in: a bundle whose ``standin.json`` says ``baseline_diverges`` is refused
    as an enforced divergence would be."""
    override = pulled.directory / "standin.json"
    if override.is_file() and json.loads(override.read_text()).get("baseline_diverges"):
        raise BaselineDivergence(f"{pulled.digest}: the stand-in's baseline diverges")


def _log(message: str) -> None:
    sys.stderr.write(f"{time.time():.3f} {message}\n")
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m modelward.rehearsal worker",
        description="One rehearsal worker: follows REF with a stand-in engine (no GPU).",
    )
    parser.add_argument("reference")
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--trust-root", type=Path, required=True)
    parser.add_argument("--public-key", type=Path, required=True)
    parser.add_argument("--worker-key", type=Path, required=True)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--report-interval", type=float, default=1.0)
    parser.add_argument("--drain-seconds", type=float, default=2.0)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--behave", type=parse_behave, action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    client = RegistryClient(os.environ["MODELWARD_URL"], os.environ["MODELWARD_TOKEN"], timeout=30)
    follower = Follower(
        client,
        args.reference,
        cache=Cache(args.cache_dir),
        flags=TrustFlags(public_keys=(args.public_key,), tuf_root=args.trust_root),
        worker_key=load_worker_key(args.worker_key),
        launcher=StandinLauncher(
            Behaviour(error_rate=args.error_rate, latency_ms=args.latency_ms), dict(args.behave)
        ),
        options=FollowOptions(
            follow=True,
            poll_seconds=args.poll,
            report_interval=args.report_interval,
            drain_seconds=args.drain_seconds,
            ready_file=args.ready_file,
            workers=2,
        ),
        log=_log,
        on_loaded=stand_in_baseline,
    )

    def stop(_signum: int, _frame: FrameType | None) -> None:
        follower.request_stop()

    signal.signal(signal.SIGTERM, stop)
    follower.start()
    try:
        return follower.run()
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
