"""A worker refusing a quarantined bundle shows the reason its reviewer signed.

The quarantine is signed TUF metadata (docs/tuf.md: the ``quarantine`` role): the registry
puts the reason in the quarantine target's signed ``custom`` field and the worker reads it
from the verified role. The registry's own answer (its database row) is not signed: an
attacker who rewrites it cannot change what the worker says. Real registry (``modelward
serve`` on loopback, SQLite), pulled through the CLI with a pinned root.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

from modelward.attest.keys import public_key_pem, save_private_key
from tests.registry.conftest import Registry, fresh_registry, new_publisher, push_new

__all__ = ["fresh_registry"]

SIGNED_REASON = "CVE-2026-4242: backdoored tokenizer merges"


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_registry_rewriting_the_quarantine_reason_does_not_change_what_the_worker_says(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    reg = fresh_registry
    pub = new_publisher(reg)
    reviewer = new_publisher(reg, "reviewer")
    worker = reg.actor("reader")
    repo = reg.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    root = tmp_path / "root.json"
    _ok(reg.cli("trust", "root", "--out", str(root), token=worker.token))
    pem = tmp_path / "publisher.pem"
    pem.write_bytes(public_key_pem(pub.key.public_key()))
    rkey = tmp_path / "reviewer.key"
    save_private_key(reviewer.key, rkey)
    _ok(
        reg.cli(
            "quarantine", f"{repo}@{digest}", "--reason", SIGNED_REASON, "--key", str(rkey),
            token=reviewer.actor.token,
        )
    )  # fmt: skip
    # the registry's database (unsigned) is rewritten after the reviewer signed
    with sqlite3.connect(reg.server.data_dir / "registry.db") as db:
        db.execute("UPDATE quarantined_digests SET reason = 'routine cleanup' WHERE digest = ?",
                   (digest,))  # fmt: skip
    assert reg.admin.get_bundle(repo, digest)["quarantine_reason"] == "routine cleanup"
    refused = reg.cli(
        "pull", f"{repo}@{digest}", "--trust-root", str(root), "--public-key", str(pem),
        "--cache-dir", str(tmp_path / "cache"),
        token=worker.token,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "listed by the signed quarantine role" in refused.stderr
    assert f"reason (signed): {SIGNED_REASON}" in refused.stderr, refused.stderr
    assert "routine cleanup" not in refused.stderr
