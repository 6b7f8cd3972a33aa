"""The registry side shared by the vLLM benchmarks (boot_bench, replay_bench).

``published_for_a_worker`` starts a local registry (`modelward serve` on a free loopback
port, SQLite), pushes ``model`` signed by a fresh publisher key and aliased ``canary``, and
registers a fresh worker key to a reader; it yields what a worker's command line needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Published:
    url: str
    repo: str
    publisher_pem: Path
    worker_token: str
    worker_key: Path


@contextmanager
def published_for_a_worker(work: Path, model: Path) -> Iterator[Published]:
    from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
    from tests.registry.conftest import new_publisher, start_registry

    reg = start_registry("sqlite", work / "registry", None)
    try:
        pub = new_publisher(reg)
        repo = reg.repo(pub)
        pub.actor.client.push(model, repo, sign=pub.sign, alias="canary")
        pem = work / "publisher.pem"
        pem.write_bytes(public_key_pem(pub.key.public_key()))
        worker = reg.actor("reader")
        key = generate_private_key()
        save_private_key(key, work / "worker.key")
        reg.admin.register_key(public_key_pem(key.public_key()).decode(), principal=worker.name)
        yield Published(reg.url, repo, pem, worker.token, work / "worker.key")
    finally:
        reg.close()
        reg.server.stop()
