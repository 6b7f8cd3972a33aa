"""Issue 28 finding 10: no one-command path to PostgreSQL and S3. ``make serve-pg`` runs
``python -m modelward.cli.dev_stack``: a PostgreSQL cluster from the machine's binaries, an
S3-compatible server (moto) and ``modelward serve --database-url ... --storage-url s3://...``
in the foreground. The test starts it, pushes and pulls once through the CLI, stops it with
Ctrl-C (SIGINT) and checks that nothing it made is left, and (issue 39 item 8) that moto's
request log went to the log file it named, not the terminal; and ``serve`` names a bad
``--database-url`` or ``--storage-url`` (docs/operations.md#trying-postgresql-and-s3)."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from modelward.client.api import RegistryClient
from tests.registry.conftest import MODELWARD, Registry, Server, free_port
from tests.registry.pinned_worker import PinnedWorker


@pytest.mark.postgres
def test_make_serve_pg_stack_serves_push_and_pull_then_cleans_up_on_ctrl_c(
    tmp_path: Path,
) -> None:
    port, token = free_port(), secrets.token_urlsafe(32)
    log = tmp_path / "stack.log"
    env = {**os.environ, "MODELWARD_BOOTSTRAP_TOKEN": token}
    with log.open("wb") as out:
        stack = subprocess.Popen(
            [sys.executable, "-m", "modelward.cli.dev_stack", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert stack.poll() is None, log.read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            pytest.fail(f"the stack did not become healthy:\n{log.read_text()}")
        text = log.read_text()
        work = Path(re.search(r"work directory (\S+)", text).group(1))  # type: ignore[union-attr]
        assert "--database-url postgresql://" in text
        assert "--storage-url s3://modelward/blobs" in text
        pg_port = int(re.search(r"PostgreSQL \S+ at 127\.0\.0\.1:(\d+)", text).group(1))  # type: ignore[union-attr]

        server = Server(data_dir=work / "data", admin_token=token, port=port)
        reg = Registry("postgres", server, RegistryClient(server.url, token, timeout=60))
        try:
            worker = PinnedWorker.start(reg, tmp_path / "w")
            digest = worker.publish()  # a push (blobs into S3) and a signed alias move
            worker.resolves(digest)  # and a pull
        finally:
            reg.close()

        # the terminal holds modelward's own lines; moto's request log is in the file it names
        text = log.read_text()
        assert f"S3 server and library logs: {work / 'stack.log'}" in text
        assert '"PUT /modelward/' not in text, text
        assert "\x1b[" not in text
        library = (work / "stack.log").read_text()
        assert '"PUT /modelward/blobs/' in library, library
        assert "\x1b[" not in library

        stack.send_signal(signal.SIGINT)
        assert stack.wait(60) == 0, log.read_text()
        text = log.read_text()
        assert f"removed {work}" in text
        assert not work.exists()
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        import socket

        with socket.socket() as sock:  # PostgreSQL is gone too
            assert sock.connect_ex(("127.0.0.1", pg_port)) != 0
    finally:
        if stack.poll() is None:
            os.killpg(stack.pid, signal.SIGKILL)
            stack.wait(10)


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--database-url", "mysql://u:hunter2@db/x", "--database-url mysql://u:***@db/x"),
        ("--storage-url", "ftp://host/blobs", "--storage-url 'ftp://host/blobs'"),
        ("--storage-url", "s3://", "--storage-url 's3://'"),
    ],
    ids=["mysql-database", "ftp-storage", "s3-without-bucket"],
)
def test_serve_names_a_bad_database_or_storage_url(
    flag: str, value: str, said: str, tmp_path: Path
) -> None:
    out = subprocess.run(
        [MODELWARD, "serve", "--data-dir", str(tmp_path / "d"), flag, value],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert said in out.stderr
    assert "hunter2" not in out.stderr
    assert not (tmp_path / "d").exists()
