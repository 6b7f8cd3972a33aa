"""Issue 38 item 1 (webhooks): a receiver that drips its answer, one byte at a time, each
within the per-read timeout, against a real ``modelward serve`` (SQLite: the database is
irrelevant) with a 2 s ``webhook_timeout_seconds``. It held an attempt for as long as it
dripped (20 s for 20 bytes) and another endpoint's delivery waited for it. Now the attempt
ends at the timeout, recorded as timed out, and the other endpoint's delivery is sent while
the drip goes on. Bounds are guards that something *ended* long before the drip would have
(100 s), never measurements.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.registry.conftest import Registry, start_registry
from tests.registry.test_webhooks import ONLY_HELD, deliveries, settled, wait_for

ENV = {
    "MODELWARD_WEBHOOK_TIMEOUT_SECONDS": "2",
    "MODELWARD_WEBHOOK_POLL_SECONDS": "0.1",
    "MODELWARD_WEBHOOK_MAX_ATTEMPTS": "1",
}
DRIP = b"HTTP/1.1 204 No Content\r\nx-drip: " + b"a" * 200  # 0.5 s a byte: 100 s
GUARD = 30.0


class Receivers:
    """Two loopback receivers: ``drip_url`` drips its answer, ``fast_url`` answers 204."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.dripping = threading.Event()  # an attempt is being dripped at
        self.fast_got: list[float] = []  # when each fast delivery arrived
        self.drip_url = self.fast_url = ""


def _handler(found: Receivers) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.path == "/fast":
                found.fast_got.append(time.monotonic())
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            found.dripping.set()
            try:
                for i in range(len(DRIP)):
                    self.wfile.write(DRIP[i : i + 1])
                    self.wfile.flush()
                    if found.stop.wait(0.5):
                        return
            except (BrokenPipeError, ConnectionResetError):
                return

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            pass

    return Handler


@pytest.fixture(scope="module")
def receivers() -> Iterator[Receivers]:
    found = Receivers()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(found))
    server.daemon_threads = True
    base = f"http://127.0.0.1:{server.server_address[1]}"
    found.drip_url, found.fast_url = f"{base}/drip", f"{base}/fast"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        found.stop.set()
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    base: Path = tmp_path_factory.mktemp("webhook-deadline")
    started = start_registry("sqlite", base, None, extra_env=ENV)
    try:
        yield started
    finally:
        started.close()
        started.server.stop()


def test_a_dripping_receiver_is_cut_off_at_the_timeout_and_never_delays_another_endpoint(
    registry: Registry, receivers: Receivers
) -> None:
    slow = registry.admin.add_webhook(receivers.drip_url, ONLY_HELD)
    fast = registry.admin.add_webhook(receivers.fast_url, ONLY_HELD)
    registry.admin.test_webhook(slow["id"])
    assert receivers.dripping.wait(GUARD), "the dripping receiver was never called"
    asked = time.monotonic()
    registry.admin.test_webhook(fast["id"])
    (delivered,) = wait_for(lambda: settled(registry, fast["id"]), "the fast endpoint", GUARD)
    assert delivered["state"] == "delivered"
    assert receivers.fast_got
    assert receivers.fast_got[0] - asked < GUARD
    (cut,) = wait_for(lambda: settled(registry, slow["id"]), "the dripped attempt", GUARD)
    assert cut["state"] == "failed"
    (attempt,) = cut["attempts"]
    assert attempt["status"] is None
    assert attempt["error"] == "timed out: no answer within 2 s for the whole attempt"
    assert attempt["duration_ms"] < GUARD * 1000
    assert [d["state"] for d in deliveries(registry, fast["id"])] == ["delivered"]
