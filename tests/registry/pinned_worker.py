"""A worker pinned to a registry's TUF root, and a publisher who signs its ``dev`` alias,
all through the real CLI: the operations tests (downgrade, backup, restore) check that the
worker keeps resolving, or refuses, after each step."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from modelward.attest.keys import save_private_key
from tests.registry.conftest import Publisher, Registry, new_publisher, push_new, unique


@dataclass
class PinnedWorker:
    reg: Registry
    tmp: Path
    pub: Publisher
    reader_token: str
    repo: str
    key: Path
    pem: Path
    root: Path
    cache: Path

    @classmethod
    def start(cls, reg: Registry, tmp: Path) -> PinnedWorker:
        tmp.mkdir(parents=True, exist_ok=True)
        pub = new_publisher(reg)
        reader = reg.actor("reader")
        repo = reg.repo(pub)
        key = tmp / "publisher.key"
        save_private_key(pub.key, key)
        pem = tmp / "publisher.pem"
        pem.write_bytes(key.with_suffix(".key.pub").read_bytes())
        root = tmp / "root.json"
        saved = reg.cli("trust", "root", "--out", str(root), token=reader.token)
        assert saved.returncode == 0, saved.stderr
        return cls(reg, tmp, pub, reader.token, repo, key, pem, root, tmp / "cache")

    def publish(self) -> str:
        """Push a new bundle and sign ``dev`` to it (the publisher's own key); its digest."""
        digest = push_new(self.pub, self.repo, self.tmp / unique("b"))
        moved = self.reg.cli(
            "alias",
            "set",
            f"{self.repo}@dev",
            digest,
            "--key",
            str(self.key),
            "--json",
            token=self.pub.actor.token,
        )
        assert moved.returncode == 0, moved.stderr
        assert json.loads(moved.stdout)["signed"] is True
        return digest

    def pull(self, reg: Registry | None = None) -> subprocess.CompletedProcess[str]:
        """``pull REPO@dev`` pinned to the root saved at the start, with the worker's own
        cache (the metadata versions it has seen)."""
        return (reg or self.reg).cli(
            "pull",
            f"{self.repo}@dev",
            "--trust-root",
            str(self.root),
            "--public-key",
            str(self.pem),
            "--cache-dir",
            str(self.cache),
            token=self.reader_token,
        )

    def resolves(self, digest: str, reg: Registry | None = None) -> None:
        pulled = self.pull(reg)
        assert pulled.returncode == 0, pulled.stderr
        assert digest in pulled.stdout
