"""Real registries for the campaigns: ``modelward serve`` on loopback, SQLite or PostgreSQL.

Reuses the test suite's process helpers (tests.registry.conftest: ``Server``, ``Registry``,
``start_registry``, publishers and bundles) and adds what a campaign needs outside pytest: a
PostgreSQL cluster as a context manager (the machine's own binaries, as the test fixture
starts it) and a registry per database kind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.registry.conftest import (
    PgCluster,
    Registry,
    Server,
    _pg_bindir,
    free_port,
    start_registry,
)

__all__ = [
    "PostgresUnavailable",
    "descendants",
    "kill_tree",
    "pg_cluster",
    "postgres_for",
    "registry",
]


class PostgresUnavailable(RuntimeError):  # noqa: N818 - reads as the condition
    """No PostgreSQL server binaries on this machine (the campaign says so and skips)."""


@contextlib.contextmanager
def pg_cluster() -> Iterator[PgCluster]:
    """A throwaway PostgreSQL cluster on a free loopback port (fsync off, trust auth)."""
    bindir = _pg_bindir()
    if bindir is None:
        raise PostgresUnavailable("no PostgreSQL server binaries (initdb/pg_ctl)")
    as_root = os.geteuid() == 0
    if as_root and shutil.which("runuser") is None:
        raise PostgresUnavailable("running as root without runuser")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    base = Path(tempfile.mkdtemp(prefix="modelward-rel-pg-"))
    if as_root:
        shutil.chown(base, user="postgres")
    data, port = base / "data", free_port()
    subprocess.run(
        [
            *prefix,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
    subprocess.run(
        [
            *prefix,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(base / "log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield PgCluster("127.0.0.1", port)
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def registry(kind: str, base: Path, pg: PgCluster | str | None = None) -> Iterator[Registry]:
    """A fresh registry of ``kind`` ("sqlite" or "postgres") with its own data directory.

    Raises PostgresUnavailable for postgres without a cluster (``pg`` is the reason).
    """
    if kind == "postgres" and not isinstance(pg, PgCluster):
        raise PostgresUnavailable(pg or "no PostgreSQL cluster")
    base.mkdir(parents=True, exist_ok=True)
    reg = start_registry(
        kind,
        Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=base)),
        pg if isinstance(pg, PgCluster) and kind == "postgres" else None,
    )
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


@contextlib.contextmanager
def postgres_for(kinds: tuple[str, ...]) -> Iterator[PgCluster | str | None]:
    """A PostgreSQL cluster when ``kinds`` names postgres; the reason when none can start;
    None when postgres is not asked for."""
    if "postgres" not in kinds:
        yield None
        return
    try:
        cluster = pg_cluster()
        pg = cluster.__enter__()
    except (PostgresUnavailable, subprocess.CalledProcessError) as exc:
        yield f"PostgreSQL unavailable: {exc}"
        return
    try:
        yield pg
    finally:
        cluster.__exit__(None, None, None)


def each_database(
    databases: tuple[str, ...], work: Path, run_one: Callable[[str, Registry], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``run_one(kind, registry)`` on a fresh registry of each kind, in order; a database
    that cannot start is reported as ``{"database": kind, "skipped": reason}``."""
    results: list[dict[str, Any]] = []
    with postgres_for(databases) as pg:
        for kind in databases:
            if kind == "postgres" and isinstance(pg, str):
                results.append({"database": kind, "skipped": pg})
                continue
            with registry(kind, work, pg) as reg:
                results.append(run_one(kind, reg))
    return results


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, recursively), from /proc."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in task.read_text().split():
                    found.append(int(child))
                    stack.append(int(child))
    return found


def kill_tree(server: Server, timeout: float = 30.0) -> list[int]:
    """SIGKILL the server process *and every process under it* (``serve --workers N``
    runs its workers as children: killing the parent alone leaves them serving), then wait
    until all are gone. Returns the pids killed."""
    proc = server.proc
    if proc is None or proc.poll() is not None:
        return []
    pids = [proc.pid, *descendants(proc.pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids[1:]):
        time.sleep(0.05)
    return pids


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it holds no socket)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
