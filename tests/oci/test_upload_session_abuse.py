"""Upload sessions cannot be used against the repositories they are opened in
(docs/oci.md#blobs).

- Racing ``PATCH``es at one offset: before, the loser got 416 but its bytes had been written
  in place over the accepted chunk (the file store writes chunks at their offsets), so the
  closing ``PUT`` with the accepted bytes' digest failed, or stored other bytes than the
  ones accepted. Now one chunk of a session is stored at a time (``chunk_lock``): the loser is
  refused before it writes.
- A reader parking bytes in a publisher's repository: before, readers (who may attach
  baselines) opened ``/v2`` sessions anywhere, and every byte they sent was charged to the
  repository's quota, so the publishers' pushes failed with 413. Now a session is charged to
  the repository only when its opener may publish there; anyone else's sessions are charged
  to the opener (at most ``max_open_uploads`` sessions of ``max_attestation_bytes`` each).

Real ``modelward serve``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.registry.conftest import Registry, new_publisher

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: the store's lock, not the database


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_racing_patch_at_one_offset_does_not_overwrite_the_accepted_chunk(
    registry: Registry,
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    a = _auth(pub.actor.token)
    start = httpx.post(f"{registry.url}/v2/{repo}/blobs/uploads/", headers=a)
    assert start.status_code == 202, start.text
    location = f"{registry.url}{start.headers['Location']}"
    size = 1 << 20
    slow_bytes, fast_bytes = b"s" * size, b"f" * size
    started = threading.Event()
    answers: dict[str, httpx.Response] = {}

    def slow_body() -> Iterator[bytes]:
        yield slow_bytes[: size // 2]
        started.set()
        time.sleep(1.5)  # the other request runs meanwhile
        yield slow_bytes[size // 2 :]

    def send(name: str, body: object) -> None:
        answers[name] = httpx.patch(
            location,
            content=body,  # type: ignore[arg-type]
            headers={**a, "Content-Length": str(size), "Content-Range": f"0-{size - 1}"},
            timeout=60,
        )

    slow = threading.Thread(target=send, args=("slow", slow_body()))
    slow.start()
    assert started.wait(30)
    time.sleep(0.3)  # the first half is being written
    send("fast", fast_bytes)
    slow.join(60)
    codes = sorted(r.status_code for r in answers.values())
    assert codes == [202, 416], {k: (r.status_code, r.text) for k, r in answers.items()}
    winner = next(k for k, r in answers.items() if r.status_code == 202)
    won = slow_bytes if winner == "slow" else fast_bytes
    digest = "sha256:" + hashlib.sha256(won).hexdigest()
    close = httpx.put(location, params={"digest": digest}, headers=a, timeout=60)
    assert close.status_code == 201, close.text
    got = httpx.get(f"{registry.url}/v2/{repo}/blobs/{digest}", headers=a, timeout=60)
    assert got.status_code == 200
    assert got.content == won


def test_reader_parking_bytes_in_a_publishers_repository_takes_none_of_its_quota(
    registry: Registry,
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    quota = 1 << 20
    out = registry.cli("repo", "quota", "set", repo, str(quota), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    reader = registry.actor("reader")
    r, p = _auth(reader.token), _auth(pub.actor.token)
    # the reader (who may attach baselines here) parks 900 KiB in an open session
    parked = httpx.post(f"{registry.url}/v2/{repo}/blobs/uploads/", headers=r)
    assert parked.status_code == 202, parked.text
    chunk = httpx.patch(
        f"{registry.url}{parked.headers['Location']}",
        content=b"r" * (900 << 10),
        headers={**r, "Content-Range": f"0-{(900 << 10) - 1}"},
        timeout=60,
    )
    assert chunk.status_code == 202, chunk.text
    usage = registry.cli("repo", "quota", "show", repo, "--json")
    assert json.loads(usage.stdout)["usage_bytes"] == 0, usage.stdout
    # the publisher's 900 KiB still fit: the reader's session is charged to the reader
    data = b"p" * (900 << 10)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    put = httpx.post(
        f"{registry.url}/v2/{repo}/blobs/uploads/",
        params={"digest": digest},
        content=data,
        headers=p,
        timeout=60,
    )
    assert put.status_code == 201, put.text
    # the reader's session is still bounded by what it may upload (an attestation)
    httpx.delete(f"{registry.url}{parked.headers['Location']}", headers=r)


def test_abandoned_upload_session_does_not_hold_bytes_for_a_day() -> None:
    """Before, a session idle for 24 hours still held its bytes (and its charge); the default
    idle lifetime is now 15 minutes without a chunk (``upload_ttl_seconds``)."""
    from modelward.registry.settings import Settings

    assert Settings.model_fields["upload_ttl_seconds"].default == 900
