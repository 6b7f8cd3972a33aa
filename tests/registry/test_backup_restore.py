"""Issue 28 finding 3: backup and restore, through the CLI against a real ``serve`` on SQLite
and PostgreSQL. ``admin backup`` runs while the registry serves (pushes land during it);
``admin restore`` refuses a damaged backup and a non-empty target before writing anything;
``serve`` starts on the restored directory, the pinned worker keeps resolving, and the audit
log verifies against the last checkpoint. A restore of an OLDER backup is refused by the
worker that saw newer signed state (TUF rollback protection) until the documented recovery
(docs/operations.md#restoring-an-older-backup)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from modelward.client.api import RegistryClient
from modelward.registry.db import make_engine
from tests.registry.conftest import (
    MODELWARD,
    PgCluster,
    Registry,
    Server,
    new_publisher,
    push_new,
    start_registry,
    unique,
)
from tests.registry.pinned_worker import PinnedWorker

ONE_PROCESS = {"MODELWARD_WORKERS": "1"}  # one server process on PostgreSQL too: starts faster


def _admin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MODELWARD, "admin", *args], capture_output=True, text=True, timeout=300, check=False
    )


def _target(base: Path, pg: PgCluster | None) -> list[str]:
    where = ["--data-dir", str(base / "data")]
    return [*where, "--database-url", pg.create_database()] if pg is not None else where


def _serve_restored(
    reg: Registry, where: list[str], extra_env: dict[str, str] = ONE_PROCESS
) -> Registry:
    """``serve`` on the restored registry, on the old one's port (the worker's cache is per
    registry URL: it remembers what it saw there)."""
    url = where[where.index("--database-url") + 1] if "--database-url" in where else None
    server = Server(
        data_dir=Path(where[1]),
        admin_token=reg.server.admin_token,
        database_url=url,
        port=reg.server.port,
        extra_env=extra_env,
    )
    server.start()
    return Registry(reg.kind, server, RegistryClient(server.url, server.admin_token, timeout=60))


def _every_named_blob_is_there(reg: Registry) -> None:
    """Every blob a bundle of the restored database holds is in its blob directory (the
    snapshot came first, the blobs after it)."""
    engine = make_engine(reg.database_url)
    try:
        with engine.connect() as conn:
            digests = {row[0] for row in conn.execute(text("SELECT digest FROM bundle_blobs"))}
    finally:
        engine.dispose()
    assert digests
    blobs = reg.server.data_dir / "blobs" / "sha256"
    assert [d for d in digests if not (blobs / d[7:9] / d[7:]).is_file()] == []


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_backup_while_serving_restore_resolves_and_older_backup_is_a_rollback(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("pg_cluster") if kind == "postgres" else None
    # one metadata mirror outside the data directories, which every registry restored
    # here writes too: what the registry published, across restores (docs/operations.md)
    mirror = tmp_path / "mirror"
    env = {**ONE_PROCESS, "MODELWARD_TUF_METADATA_DIR": str(mirror)}
    reg = start_registry(kind, tmp_path / "reg", pg, extra_env=env)
    restored: Registry | None = None
    try:
        reg.admin.audit_checkpoint()  # the registry's checkpoint key exists from here on
        worker = PinnedWorker.start(reg, tmp_path / "w")
        first = worker.publish()
        worker.resolves(first)
        backup_key = tmp_path / "backup.key"
        backup_key.write_bytes(os.urandom(32))
        backup_key.chmod(0o600)
        source = ["--data-dir", str(reg.server.data_dir), "--backup-key", str(backup_key)]
        if pg is not None:
            source += ["--database-url", reg.database_url]
        older = tmp_path / "backup-older"
        taken = _admin("backup", str(older), *source, "--json")
        assert taken.returncode == 0, taken.stderr
        assert "online signing keys" in taken.stderr

        second = worker.publish()
        worker.resolves(second)  # the worker has seen newer signed state than `older`
        key = reg.cli("audit", "key", "--data-dir", str(reg.server.data_dir), check=True)
        verifier = key.stdout.strip().splitlines()[-1]
        checkpoint = tmp_path / "checkpoint.txt"
        reg.cli("audit", "checkpoint", "--out", str(checkpoint), "--key", verifier, check=True)

        # pushes land while the backup runs
        pub = new_publisher(reg)
        repo = reg.repo(pub)
        pushed: list[str] = []
        pusher = threading.Thread(
            target=lambda: pushed.extend(
                push_new(pub, repo, tmp_path / unique("p")) for _ in range(3)
            )
        )
        pusher.start()
        newer = tmp_path / "backup-newer"
        taken = _admin("backup", str(newer), *source, "--json")
        pusher.join()
        assert taken.returncode == 0, taken.stderr
        summary = json.loads(taken.stdout)
        assert summary["database"] == ("postgresql" if pg else "sqlite")
        assert summary["blob_store"] == "copied"
        manifest = json.loads((newer / "manifest.json").read_text())
        assert manifest["schema_revision"] == summary["schema_revision"]
        assert all(f["sha256"].startswith("sha256:") for f in manifest["files"].values())
        reg.server.stop()

        # a damaged backup is refused before anything is written
        damaged = tmp_path / "backup-damaged"
        shutil.copytree(newer, damaged)
        blob = next(n for n in manifest["files"] if n.startswith("blobs/"))
        (damaged / blob).write_bytes(b"flipped")
        into = [*_target(tmp_path / "r0", pg), "--backup-key", str(backup_key)]
        published = ["--published-metadata", str(mirror)]
        into += published
        refused = _admin("restore", str(damaged), *into)
        assert refused.returncode == 1
        assert f"{damaged / blob}: 7 bytes" in refused.stderr
        assert not (tmp_path / "r0" / "data").exists()

        into = _target(tmp_path / "r1", pg)
        done = _admin("restore", str(newer), *into, "--backup-key", str(backup_key), *published)
        assert done.returncode == 0, done.stderr
        again = _admin("restore", str(newer), *into, "--backup-key", str(backup_key), *published)
        assert again.returncode == 1
        assert "is not empty: nothing was written" in again.stderr

        restored = _serve_restored(reg, into, env)
        worker.resolves(second, restored)
        verified = restored.cli("audit", "verify", "--since", str(checkpoint), "--key", verifier)
        assert verified.returncode == 0, verified.stderr
        assert len(pushed) == 3
        _every_named_blob_is_there(restored)
        restored.close()
        restored.server.stop()

        # the older backup: the worker that saw `second` refuses to go back
        into = _target(tmp_path / "r2", pg)
        done = _admin("restore", str(older), *into, "--backup-key", str(backup_key), *published)
        assert done.returncode == 0, done.stderr
        restored = _serve_restored(reg, into, env)
        rolled_back = worker.pull(restored)
        assert rolled_back.returncode == 1
        assert second not in rolled_back.stdout
        assert "BadVersionNumberError" in rolled_back.stderr
        # the documented recovery: that worker forgets what it saw from this registry and
        # starts again from its pinned root
        shutil.rmtree(worker.cache / "tuf")
        worker.resolves(first, restored)
    finally:
        if restored is not None:
            restored.close()
            restored.server.stop()
        reg.close()
        reg.server.stop()


def test_backup_refuses_a_non_empty_destination(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "x").write_text("x")
    refused = _admin("backup", str(dest), "--data-dir", str(tmp_path / "data"))
    assert refused.returncode == 1
    assert f"backup directory {dest} is not empty" in refused.stderr


def test_backup_without_a_backup_key_is_refused(tmp_path: Path) -> None:
    refused = _admin("backup", str(tmp_path / "dest"), "--data-dir", str(tmp_path / "data"))
    assert refused.returncode == 1
    assert "no backup key: set backup_key (MODELWARD_BACKUP_KEY)" in refused.stderr
    assert not (tmp_path / "dest").exists()
    weak = tmp_path / "weak.key"
    weak.write_bytes(os.urandom(32))
    weak.chmod(0o644)
    refused = _admin("backup", str(tmp_path / "dest"), "--backup-key", str(weak))
    assert refused.returncode == 1
    assert f"the backup key {weak} is open to other users" in refused.stderr
