"""A stand-in for vLLM's OpenAI server, for rehearsals and the fleet tests: stdlib HTTP,
vLLM's metric names. No model is loaded: it never serves a real answer.

``python standin_engine.py --bundle-dir DIR [--latency-ms MS] [--error-rate R] [--rps N]``
binds a free loopback port, prints ``PORT <n>`` on stdout, and serves ``/v1/models``,
``/v1/completions`` and ``/metrics`` (Prometheus text made by ``prometheus_client``, the
names and labels vLLM's v1 engine exposes: ``vllm:request_success_total{finished_reason}``,
``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
``vllm:request_queue_time_seconds``, ``vllm:num_requests_running``).

It makes its own traffic: ``--rps`` requests a second, each finished with reason ``error``
with probability ``error_rate`` (else ``stop``), with a TTFT around ``latency_ms``. A
bundle's ``standin.json`` (``{"latency_ms": .., "error_rate": ..}``) overrides the
arguments, so a "bad" candidate bundle produces errors by itself. SIGTERM: stop accepting,
finish, exit 0 (a drain).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)


class Engine:
    def __init__(self, model: str, latency_ms: float, error_rate: float, rps: float) -> None:
        self.model = model
        self.latency = latency_ms / 1000.0
        self.error_rate = error_rate
        self.rps = rps
        self.random = random.Random(model)  # noqa: S311 - synthetic traffic, seeded
        self.lock = threading.Lock()
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.success = Counter(
            "vllm:request_success",
            "finished requests",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "TTFT", labels, buckets=BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "ITL", labels, buckets=BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.queue = Histogram(
            "vllm:request_queue_time_seconds", "queue", labels, buckets=BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.running = Gauge("vllm:num_requests_running", "running", labels, registry=self.registry)
        self.stopped = threading.Event()

    def one(self) -> bool:
        """One synthetic request; whether it succeeded."""
        with self.lock:
            jitter = self.random.uniform(0.8, 1.2)
            failed = self.random.random() < self.error_rate
        labels = {"model_name": self.model, "engine": "0"}
        self.running.labels(**labels).inc()
        self.queue.labels(**labels).observe(0.002 * jitter)
        self.ttft.labels(**labels).observe(self.latency * jitter)
        self.itl.labels(**labels).observe(self.latency * jitter / 10)
        reason = "error" if failed else "stop"
        self.success.labels(**labels, finished_reason=reason).inc()
        self.running.labels(**labels).dec()
        return not failed

    def traffic(self) -> None:
        while not self.stopped.wait(1.0 / self.rps):
            self.one()

    def metrics(self) -> bytes:
        return generate_latest(self.registry)


def handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            return

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._send(200, json.dumps({"data": [{"id": engine.model}]}).encode())
            elif self.path == "/metrics":
                self._send(200, engine.metrics(), "text/plain; version=0.0.4")
            else:
                self._send(404, b"{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            if self.path != "/v1/completions":
                self._send(404, b"{}")
                return
            ok = engine.one()
            body = {"choices": [{"index": 0, "text": "ok", "token_ids": [1]}]}
            self._send(200 if ok else 500, json.dumps(body).encode())

    return Handler


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle-dir", type=Path, required=True)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--rps", type=float, default=50.0)
    args = parser.parse_args(argv)
    settings = {"latency_ms": args.latency_ms, "error_rate": args.error_rate}
    override = args.bundle_dir / "standin.json"
    if override.is_file():
        settings.update(json.loads(override.read_text()))
    engine = Engine(
        args.bundle_dir.name, float(settings["latency_ms"]), float(settings["error_rate"]), args.rps
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(engine))
    server.daemon_threads = True

    def drain(_signum: int, _frame: FrameType | None) -> None:
        engine.stopped.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    threading.Thread(target=engine.traffic, daemon=True).start()
    sys.stdout.write(f"PORT {server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
