"""``make serve-pg``: the scale-out setup on one machine, in the foreground, for trying it.

``python -m modelward.cli.dev_stack [--port 8700] [--workers N]`` starts

1. a PostgreSQL cluster from the machine's own server binaries (``pg_ctl`` on PATH, else the
   newest ``/usr/lib/postgresql/*/bin``; run as the ``postgres`` user through ``runuser``
   when we are root), in a new temporary directory, on a free loopback port;
2. an S3-compatible server (moto's, as the tests use; ``pip install 'moto[server]'``, part of
   the ``test`` extra) on a free loopback port, with one bucket;
3. ``modelward serve --database-url postgresql://... --storage-url s3://modelward/blobs``
   against both, its output on this terminal,

with only modelward's own lines on the terminal (serve's and ``dev-stack:`` lines): moto's
request log, boto's and the S3 server's library logs go to ``stack.log`` in the work
directory, named on screen at start (PostgreSQL's log is ``pg/log`` beside it),

and on Ctrl-C (SIGINT) or SIGTERM stops the three and deletes the temporary directory:
nothing it made outlives it (docs/operations.md#trying-postgresql-and-s3). It is a
throwaway: the database, the bucket and the registry's keys go with it.

Exit status: serve's own when it ends by itself; 0 after Ctrl-C; 3 when a part cannot start
(no PostgreSQL binaries, no moto), naming the part.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["main"]

BUCKET = "modelward"
EXIT_ENVIRONMENT = 3


class StackError(Exception):
    """A part of the stack cannot start (the message names it)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    if not candidates:
        raise StackError(
            "no PostgreSQL server binaries (pg_ctl, initdb) on PATH nor under "
            "/usr/lib/postgresql: install the postgresql server package"
        )
    return candidates[0].parent


def _say(line: str) -> None:
    sys.stderr.write(f"dev-stack: {line}\n")
    sys.stderr.flush()


@contextlib.contextmanager
def _postgres(base: Path) -> Iterator[str]:
    """A cluster in ``base/pg``; yields the database URL of a new ``modelward`` database."""
    bindir = _pg_bindir()
    as_root = os.geteuid() == 0
    if as_root and shutil.which("runuser") is None:
        raise StackError("running as root without runuser: cannot start PostgreSQL as postgres")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    home = base / "pg"
    home.mkdir()
    if as_root:
        base.chmod(0o711)  # postgres passes through to its own directory, reads nothing else
        shutil.chown(home, user="postgres")
    data, port = home / "data", _free_port()
    initdb = [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
    done = subprocess.run(
        [*prefix, *initdb, "-E", "UTF8", "--no-sync"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise StackError(f"initdb failed: {done.stderr.strip()}")
    pg_ctl = [*prefix, str(bindir / "pg_ctl"), "-D", str(data)]
    opts = f"-p {port} -k {home} -c listen_addresses=127.0.0.1"
    done = subprocess.run(
        [*pg_ctl, "-o", opts, "-l", str(home / "log"), "-w", "start"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise StackError(f"pg_ctl start failed: {done.stderr.strip()} (log: {home / 'log'})")
    try:
        import psycopg

        conninfo = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute('CREATE DATABASE "modelward"')
        _say(f"PostgreSQL {bindir.parent.name} at 127.0.0.1:{port} (data {data})")
        yield f"postgresql://postgres@127.0.0.1:{port}/modelward"
    finally:
        subprocess.run([*pg_ctl, "-m", "fast", "-w", "stop"], capture_output=True, check=False)
        _say("PostgreSQL stopped")


# the libraries behind the S3 server: their records go to the stack's log file, not the terminal
_LIBRARY_LOGGERS = ("werkzeug", "moto", "botocore", "boto3", "urllib3")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Plain(logging.Formatter):
    """Log records as plain lines (werkzeug colours its request lines)."""

    def format(self, record: logging.LogRecord) -> str:
        return _ANSI.sub("", super().format(record))


@contextlib.contextmanager
def _library_logs(path: Path) -> Iterator[None]:
    """Send the S3 server's libraries' logging to ``path`` instead of the terminal."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(_Plain("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = []
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.addHandler(handler)  # werkzeug adds its own stderr handler only when none is set
        logger.setLevel(logging.INFO)
        logger.propagate = False
    _say(f"S3 server and library logs: {path} (deleted with the work directory)")
    try:
        yield
    finally:
        for logger, level, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
        handler.close()


@contextlib.contextmanager
def _s3() -> Iterator[dict[str, str]]:
    """moto's S3 server with the bucket; yields the environment serve reads it through."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise StackError(
            f"no S3-compatible server: {exc}; install it with `pip install 'moto[server]'` "
            "(part of modelward's test extra)"
        ) from exc
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
        "AWS_ENDPOINT_URL_S3": url,
        "MODELWARD_S3_ENDPOINT_URL": url,
    }
    try:
        boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",  # noqa: S106 - moto's fixed test credentials
        ).create_bucket(Bucket=BUCKET)
        _say(f"S3 (moto) at {url}, bucket {BUCKET}")
        yield env
    finally:
        server.stop()
        _say("S3 stopped")


def _serve(args: argparse.Namespace, base: Path, database_url: str, env: dict[str, str]) -> int:
    modelward = Path(sys.executable).with_name("modelward")
    command = [str(modelward) if modelward.exists() else "modelward", "serve"]
    command += ["--host", args.host, "--port", str(args.port), "--data-dir", str(base / "data")]
    command += ["--database-url", database_url, "--storage-url", f"s3://{BUCKET}/blobs"]
    if args.workers is not None:
        command += ["--workers", str(args.workers)]
    _say(" ".join(command))
    proc = subprocess.Popen(command, env={**os.environ, **env})
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM if signum == signal.SIGTERM else signal.SIGINT)

    previous: dict[int, Any] = {
        sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        while True:
            try:
                code = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return 0 if stopping else code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m modelward.cli.dev_stack",
        description="PostgreSQL + S3 (moto) + modelward serve, in the foreground; Ctrl-C "
        "stops all three and deletes their temporary directory.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8700)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="modelward-dev-"))
    _say(f"work directory {base} (deleted on exit)")
    # a signal before serve runs still cleans up: it becomes KeyboardInterrupt until then
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with _library_logs(base / "stack.log"), _postgres(base) as database_url, _s3() as env:
            return _serve(args, base, database_url, env)
    except StackError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_ENVIRONMENT
    except KeyboardInterrupt:
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)
        _say(f"removed {base}")


if __name__ == "__main__":  # pragma: no cover - `make serve-pg`
    sys.exit(main())
