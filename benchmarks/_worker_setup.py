"""The registry side shared by the vLLM benchmarks (boot_bench, replay_bench).

``published_for_a_worker`` starts a local registry (`modelward serve` on a free loopback
port, SQLite), pushes ``model`` signed by a fresh publisher key and aliased ``canary``, signs
the alias's TUF proposal with the publisher's key (as ``modelward alias set --key`` does),
saves the registry's TUF root (``modelward trust root --out``) for the worker to pin, and
registers a fresh worker key to a reader; it yields what a worker's command line needs.
Workers resolve the alias through that root (docs/tuf.md#workers), as in production.

``sign_alias`` and ``save_trust_root`` are shared with pull_bench.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Published:
    url: str
    repo: str
    publisher_pem: Path
    worker_token: str
    worker_key: Path
    trust_root: Path


def sign_alias(client: Any, repo: str, alias: str, key: Any) -> None:
    """Sign every pending TUF proposal for ``repo@alias`` with the publisher's ``key`` (as
    ``modelward alias set --key`` does); raise RuntimeError unless each is then published."""
    from tuf.api.metadata import Metadata

    from modelward.attest.tuf import tuf_signer

    proposals = client.tuf_proposals(repo=repo, alias=alias, pending=True)
    if not proposals:
        raise RuntimeError(f"{repo}@{alias}: no pending TUF proposal to sign")
    for proposal in proposals:
        payload = base64.b64decode(client.tuf_proposal(int(proposal["id"]))["payload"])
        signature = Metadata.from_bytes(payload).sign(tuf_signer(key))
        signed = client.tuf_sign(int(proposal["id"]), signature.keyid, signature.signature)
        if signed["state"] != "published":
            raise RuntimeError(f"{repo}@{alias}: TUF proposal not published: {signed}")


def save_trust_root(url: str, token: str, out: Path) -> Path:
    """``modelward trust root --out OUT`` against the registry at ``url``: the root to pin."""
    from tests.registry.conftest import MODELWARD

    env = {**os.environ, "MODELWARD_URL": url, "MODELWARD_TOKEN": token}
    proc = subprocess.run(
        [MODELWARD, "trust", "root", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"modelward trust root failed:\n{proc.stderr[-2000:]}")
    return out


@contextmanager
def published_for_a_worker(work: Path, model: Path) -> Iterator[Published]:
    from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
    from tests.registry.conftest import new_publisher, start_registry

    reg = start_registry("sqlite", work / "registry", None)
    try:
        pub = new_publisher(reg)
        repo = reg.repo(pub)
        pub.actor.client.push(model, repo, sign=pub.sign, alias="canary")
        sign_alias(pub.actor.client, repo, "canary", pub.key)
        pem = work / "publisher.pem"
        pem.write_bytes(public_key_pem(pub.key.public_key()))
        worker = reg.actor("reader")
        key = generate_private_key()
        save_private_key(key, work / "worker.key")
        reg.admin.register_key(public_key_pem(key.public_key()).decode(), principal=worker.name)
        root = save_trust_root(reg.url, worker.token, work / "root.json")
        yield Published(reg.url, repo, pem, worker.token, work / "worker.key", root)
    finally:
        reg.close()
        reg.server.stop()
