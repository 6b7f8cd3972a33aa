"""A worker whose cache pinned the registry's TUF root checks the signed quarantine on a pull
by digest, with or without ``--trust-root``.

After ``modelward trust pin``, workers run without ``--trust-root``: the cached root is the
trust anchor for aliases. A pull by digest used to check the signed quarantine role only when
a root was given, so such a worker took the registry's unsigned word that the digest was
clean. Real registry (``modelward serve`` on loopback, SQLite), driven through the CLI; the
registry's database is rewritten to play a registry that lies.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

from modelward.attest.keys import public_key_pem, save_private_key
from tests.registry.conftest import Registry, fresh_registry, new_publisher, push_new

__all__ = ["fresh_registry"]

SIGNED_REASON = "CVE-2026-5151: pickle payload in the weights"


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_pull_by_digest_with_a_pinned_cache_refuses_a_signed_quarantine(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    reg = fresh_registry
    pub = new_publisher(reg)
    reviewer = new_publisher(reg, "reviewer")
    worker = reg.actor("reader")
    repo = reg.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    cache = tmp_path / "cache"
    root = tmp_path / "root.json"
    _ok(reg.cli("trust", "root", "--out", str(root), token=worker.token))
    _ok(
        reg.cli(
            "trust", "pin", "--trust-root", str(root), "--cache-dir", str(cache),
            token=worker.token,
        )
    )  # fmt: skip
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
    # the registry forgets its (unsigned) quarantine row: its own word is now "clean"
    with sqlite3.connect(reg.server.data_dir / "registry.db") as db:
        db.execute("DELETE FROM quarantined_digests WHERE digest = ?", (digest,))
    assert reg.admin.get_bundle(repo, digest)["quarantined"] is False
    refused = reg.cli(
        "pull", f"{repo}@{digest}", "--public-key", str(pem), "--cache-dir", str(cache),
        token=worker.token,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout == ""
    assert "listed by the signed quarantine role" in refused.stderr, refused.stderr
    assert f"reason (signed): {SIGNED_REASON}" in refused.stderr
    assert "Traceback" not in refused.stderr
