"""Issue 28 finding 5: a second ``serve`` on the same SQLite data directory started without a
word. Now the first ``serve`` (with ``--workers 2``: the supervisor) holds the directory's
writer lock for its life; a second one refuses at startup naming the directory and the
holder's pid and host, and so does a migration; once the first stops, the next one starts
(docs/operations.md#one-writer)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from pathlib import Path

import pytest

from tests.registry.conftest import MODELWARD, Server, free_port


def _serve(data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MODELWARD_BOOTSTRAP_TOKEN": secrets.token_urlsafe(32)}
    args = ["serve", "--port", str(free_port()), "--data-dir", str(data_dir)]
    return subprocess.run(
        [MODELWARD, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.mark.sqlite_only
def test_second_serve_on_one_sqlite_data_dir_refuses_naming_the_holder(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = Server(
        data_dir=data_dir,
        admin_token=secrets.token_urlsafe(32),
        extra_env={"MODELWARD_WORKERS": "2"},
    )
    first.start()
    try:
        assert first.proc is not None
        second = _serve(data_dir)
        assert second.returncode == 3, second.stderr
        assert f"the SQLite data directory {data_dir.resolve()} is in use" in second.stderr
        assert f"pid {first.proc.pid} on host {socket.gethostname()}" in second.stderr
        assert "nothing was started" in second.stderr
        assert "modelward registry at" not in second.stdout
        # a migration under the running server is refused the same way
        down = subprocess.run(
            [MODELWARD, "db", "downgrade", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert down.returncode == 3, down.stderr
        assert "is in use" in down.stderr
        assert "nothing was changed" in down.stderr
    finally:
        first.stop()
    # the lock went with the process: the next serve on the directory starts
    first.start()
    first.stop()
