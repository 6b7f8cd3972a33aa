"""Issue 38 item 5 and issue 39: what the database commands print on the operator's terminal.

``admin backup --database-url mysql://u:secretpw@db/x`` printed the password; ``db upgrade``
and ``db current`` with an unsupported or unreachable database printed tracebacks and exit
1; ``db downgrade`` by one step printed "database downgraded to -1". Now: every database URL
printed has its password masked; an unsupported URL is an ``error:`` line and exit 2 (input),
an unreachable database one and exit 3 (the environment: docs/cli.md#exit-codes); a
migration names the revision the database is now at. The CLI alone, no server.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from modelward.registry.db import head_revision
from tests.registry.conftest import MODELWARD, free_port

SECRET = "secretpw"
UNSUPPORTED = f"mysql://u:{SECRET}@db/x"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MODELWARD, *args], capture_output=True, text=True, timeout=120, check=False
    )


def _clean(done: subprocess.CompletedProcess[str]) -> str:
    """stdout and stderr, checked to hold neither the password nor a traceback."""
    both = done.stdout + done.stderr
    assert SECRET not in both, both
    assert "Traceback" not in both, both
    return both


def test_admin_backup_masks_the_database_password(tmp_path: Path) -> None:
    done = _run("admin", "backup", str(tmp_path / "b"), "--database-url", UNSUPPORTED)
    assert done.returncode == 1
    assert "error: database mysql://u:***@db/x: backups cover sqlite and postgresql only" in (
        _clean(done)
    )


@pytest.mark.parametrize("command", ["upgrade", "current"])
def test_db_command_on_an_unsupported_database_url_is_a_masked_usage_error(command: str) -> None:
    done = _run("db", command, "--database-url", UNSUPPORTED)
    assert done.returncode == 2, done.stderr
    assert "error: unsupported database URL mysql://u:***@db/x: expected sqlite:///PATH" in (
        _clean(done)
    )


@pytest.mark.parametrize("command", ["upgrade", "current", "downgrade"])
def test_db_command_on_an_unreachable_database_is_a_masked_environment_error(
    command: str,
) -> None:
    url = f"postgresql://u:{SECRET}@127.0.0.1:{free_port()}/x"
    done = _run("db", command, "--database-url", url)
    assert done.returncode == 3, done.stderr
    shown = url.replace(SECRET, "***")
    assert f"error: cannot reach the database {shown}: " in _clean(done)
    assert "hint: check that the database server runs" in done.stderr


def test_db_migrations_name_the_revision_the_database_is_now_at(tmp_path: Path) -> None:
    where = ("--data-dir", str(tmp_path / "data"))
    up = _run("db", "upgrade", *where)
    assert up.returncode == 0, up.stderr
    assert up.stdout.startswith(f"database upgraded to {head_revision()} (")
    down = _run("db", "downgrade", *where)
    assert down.returncode == 0, down.stderr
    assert "-1" not in down.stdout
    found = re.fullmatch(r"database downgraded to (\S+) \((.+)\)\n", down.stdout)
    assert found is not None, down.stdout
    current = _run("db", "current", *where).stdout
    assert f"current: {found.group(1)}\n" in current
    assert found.group(1) != head_revision()
    base = _run("db", "downgrade", "base", *where)
    assert base.stdout == "database downgraded to base (empty: no schema)\n"
