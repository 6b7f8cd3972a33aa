"""Issue 38 item 1: a deadline on every fetch, for the whole of it, not for each read.

Against a real ``modelward serve`` (SQLite: the database is irrelevant) and real loopback
HTTP servers started here that drip: they send one byte, then wait, then the next, each
wait shorter than any per-read timeout, so only a deadline for the whole operation ends
them. Every bound asserted below is a guard that the operation *ended* long before the drip
would have (hundreds of seconds), never a measurement.

- a metadata mirror that drips ``timestamp.json``: the worker falls back to the registry and
  resolves what the registry says, within the fetch deadline (``FetchLimits.file``);
- a mirror that answers an oversized ``timestamp.json``: the same fallback, and the command
  line says so in one warning (no traceback, exit 0);
- a registry that drips a metadata file: ``MetadataUnavailable`` (one line, exit 3),
  within the deadline;
- a registry that drips a JSON answer, or its status line: the client's call ends at
  ``TransferOptions.deadline`` with a ``TransportError`` naming the deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.keys import public_key_pem
from modelward.client.api import RegistryClient
from modelward.client.config import parse_reference
from modelward.client.connection import TransferOptions
from modelward.client.errors import TransportError
from modelward.client.tuf import FetchLimits, MetadataUnavailable, TufFetcher
from modelward.loader.tuf_resolve import AliasTrust, resolve_reference
from tests.registry import conftest as shared
from tests.registry.conftest import Registry, new_publisher, push_new, unique
from tests.tuf.test_registry_attacks_tuf import sign

DRIP_EVERY = 0.5  # seconds between two bytes: below every per-read timeout
DRIPPED = 2000  # bytes a drip declares: 1000 s of dripping
GUARD = 60.0  # the operations below end within seconds; a drip would take 1000 s

pytestmark = pytest.mark.sqlite_only
registry = shared.registry  # the shared registry (its SQLite run: sqlite_only)
pg_cluster = shared.pg_cluster  # what its PostgreSQL run would start from


class Stopped(Exception):
    pass


@contextmanager
def serving(answer: Callable[[BaseHTTPRequestHandler, threading.Event], None]) -> Iterator[str]:
    """A loopback HTTP server whose every GET is ``answer(handler, stop)``; its URL."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with suppress(BrokenPipeError, ConnectionResetError, Stopped):
                answer(self, stop)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def drip(handler: BaseHTTPRequestHandler, stop: threading.Event, data: bytes) -> None:
    """Send ``data`` one byte at a time, ``DRIP_EVERY`` apart, until told to stop."""
    for i in range(len(data)):
        handler.wfile.write(data[i : i + 1])
        handler.wfile.flush()
        if stop.wait(DRIP_EVERY):
            raise Stopped


def drip_body(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    handler.send_response(200)
    handler.send_header("content-length", str(DRIPPED))
    handler.end_headers()
    drip(handler, stop, b" " * DRIPPED)


def drip_status_line(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    drip(handler, stop, b"HTTP/1.1 200 OK\r\n" + b"x-drip: " + b"a" * DRIPPED)


def mirror(timestamp: Callable[[BaseHTTPRequestHandler, threading.Event], None]) -> Any:
    """A mirror that answers ``timestamp.json`` with ``timestamp``, and 404 to the rest."""

    def answer(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        if handler.path.endswith("/timestamp.json"):
            timestamp(handler, stop)
            return
        handler.send_response(404)
        handler.send_header("content-length", "0")
        handler.end_headers()

    return answer


def oversized(handler: BaseHTTPRequestHandler, _stop: threading.Event) -> None:
    body = b"{" + b" " * (1 << 20) + b"}"  # 1 MiB: the updater allows a timestamp 16 KiB
    handler.send_response(200)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def signed(registry: Registry, tmp_path: Path) -> tuple[str, str, Path, Path]:
    """A repository whose ``dev`` names a bundle by a signed move; the root to pin; the
    publisher's public key."""
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path / unique("w"))
    answer = pub.actor.client.set_alias(repo, "dev", digest)
    assert sign(pub, int(answer["proposal"]))["state"] == "published"
    root = tmp_path / "root.json"
    root.write_bytes(registry.admin.tuf_file("1.root.json"))
    key = tmp_path / "pub.pem"
    key.write_bytes(public_key_pem(pub.key.public_key()))
    return repo, digest, root, key


def test_a_mirror_dripping_the_timestamp_falls_back_to_the_registry_within_the_deadline(
    registry: Registry,
    signed: tuple[str, str, Path, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repo, digest, root, _ = signed
    limits = FetchLimits(file=2.0, read=10.0)
    with serving(mirror(drip_body)) as url, caplog.at_level(logging.WARNING):
        trust = AliasTrust(root=root, metadata_url=f"{url}/tuf/", fetch_limits=limits)
        started = time.monotonic()
        got = resolve_reference(registry.admin, parse_reference(f"{repo}@dev"), tmp_path, trust)
        took = time.monotonic() - started
    assert got == digest
    assert took < GUARD, took
    assert "could not answer timestamp.json" in caplog.text
    assert "timed out: no whole answer within 2 s" in caplog.text


def test_a_mirror_answering_an_oversized_timestamp_falls_back_without_a_traceback(
    registry: Registry, signed: tuple[str, str, Path, Path], tmp_path: Path
) -> None:
    repo, digest, root, key = signed
    with serving(mirror(oversized)) as url:
        resolved = registry.cli(
            "pull",
            f"{repo}@dev",
            "--trust-root",
            str(root),
            "--metadata-url",
            f"{url}/tuf/",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--public-key",
            str(key),
        )
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert digest in resolved.stdout + resolved.stderr
    assert "Traceback" not in resolved.stderr
    assert "could not answer timestamp.json" in resolved.stderr
    assert "more than the 16384 the file may have" in resolved.stderr


def test_a_registry_dripping_a_metadata_file_is_a_clear_error_within_the_deadline() -> None:
    with serving(drip_body) as url, RegistryClient(url, None) as client:
        fetcher = TufFetcher(client, limits=FetchLimits(file=2.0))
        started = time.monotonic()
        with pytest.raises(MetadataUnavailable) as failed:
            fetcher.download_bytes(f"{url}/tuf/timestamp.json", 16384)
        took = time.monotonic() - started
    assert took < GUARD, took
    assert "did not answer the TUF metadata file timestamp.json" in str(failed.value)
    assert "ran past its deadline of 2 s" in str(failed.value)


@pytest.mark.parametrize("peer", [drip_body, drip_status_line], ids=["body", "status-line"])
def test_a_registry_dripping_an_answer_cannot_hold_a_call_past_its_deadline(
    peer: Callable[[BaseHTTPRequestHandler, threading.Event], None],
) -> None:
    options = TransferOptions(deadline=2.0)
    with serving(peer) as url, RegistryClient(url, None, options=options) as client:
        started = time.monotonic()
        with pytest.raises(TransportError) as failed:
            client.whoami()
        took = time.monotonic() - started
    assert took < GUARD, took
    assert "timed out" in str(failed.value)
    assert "deadline of 2 s" in str(failed.value)
