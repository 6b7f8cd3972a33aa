"""Issue 28 finding 2: ``db downgrade`` then ``db upgrade`` wiped the signed TUF state and
``serve`` made a new root version 1 that no pinned worker follows. Through the CLI against a
real ``serve`` on SQLite and PostgreSQL: the downgrade refuses without
``--destroy-signed-state --export-to DIR``; after the upgrade ``serve`` refuses to start
instead of creating root version 1; ``db import-signed-state DIR`` puts the state back and
the pinned worker keeps resolving (docs/operations.md#downgrade)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from modelward.registry.db import head_revision
from tests.registry.conftest import MODELWARD, start_registry
from tests.registry.pinned_worker import PinnedWorker


def _db(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MODELWARD, "db", *args], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_downgrade_below_tuf_keeps_pinned_workers_resolving(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("pg_cluster") if kind == "postgres" else None
    reg = start_registry(kind, tmp_path / "reg", pg, extra_env={"MODELWARD_WORKERS": "1"})
    try:
        worker = PinnedWorker.start(reg, tmp_path / "w")
        digest = worker.publish()
        worker.resolves(digest)
        reg.server.stop()
        where = ["--data-dir", str(reg.server.data_dir), "--database-url", reg.database_url]

        refused = _db("downgrade", "0008", *where)
        assert refused.returncode == 1, refused.stderr
        assert "drops the registry's signed TUF state" in refused.stderr
        assert "--destroy-signed-state --export-to DIR" in refused.stderr
        # told to destroy, but with no export: refused all the same
        unexported = _db("downgrade", "0008", "--destroy-signed-state", *where)
        assert unexported.returncode == 1, unexported.stderr
        assert f"current: {head_revision()}" in _db("current", *where).stdout

        export = tmp_path / "signed-state"
        destroy = ["--destroy-signed-state", "--export-to", str(export)]
        down = _db("downgrade", "0008", *destroy, *where)
        assert down.returncode == 0, down.stderr
        assert f"to {export}" in down.stdout
        assert (export / "signed-state.json").is_file()
        assert _db("upgrade", *where).returncode == 0

        # serve does not start again at root version 1: it names the way back
        with pytest.raises(RuntimeError) as refusal:
            reg.server.start()
        assert "no root" in str(refusal.value)
        assert f"modelward db import-signed-state {export.resolve()}" in str(refusal.value)
        assert "created root version 1" not in reg.server.log()

        imported = _db("import-signed-state", str(export), *where)
        assert imported.returncode == 0, imported.stderr
        again = _db("import-signed-state", str(export), *where)
        assert again.returncode == 1
        assert "already holds" in again.stderr

        reg.server.start()
        worker.resolves(digest)  # the same root, the versions the worker saw: it follows
        moved = worker.publish()  # and signed moves publish again after it
        worker.resolves(moved)
    finally:
        reg.close()
        reg.server.stop()
