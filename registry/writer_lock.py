"""One ``serve`` per SQLite database (docs/operations.md#one-writer).

SQLite takes one writer at a time, and two servers on one data directory would each run
their own TUF refresh, GC and audit checkpoints over the same file. ``serve`` therefore holds
an advisory lock (``fcntl.flock``) on ``<database>.lock`` for the life of its process; with
``--workers N`` that is the supervisor, which outlives its worker processes (the descriptor
is not inherited: Python opens it close-on-exec). The lock file names its holder (pid, host,
since when) for the refusal. The kernel drops the lock when the process ends, however it
ends: a stale file never blocks a start. PostgreSQL needs no lock: several servers share one
database (docs/registry.md#running-several-workers).

Errors: ``DataDirInUse`` (a ``RegistryError``) names the directory, the lock file and the
holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from modelward.registry.errors import RegistryError

__all__ = ["DataDirInUse", "WriterLock", "hold_writer_lock", "sqlite_file", "writer_holding"]


class DataDirInUse(RegistryError):  # noqa: N818 - named after the refusal
    """Another process holds the SQLite database's writer lock."""


def sqlite_file(url: str) -> Path | None:
    """The SQLite database file ``url`` names (None: another database, or in memory)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(str(parsed.database)).resolve()


def _lock_path(database: Path) -> Path:
    return database.with_name(database.name + ".lock")


def _holder_text(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']} on host {info['host']}, since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not say who it is"


@dataclass
class WriterLock:
    """The held lock; ``release`` (or process exit) lets it go."""

    path: Path
    fd: int | None

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def _refusal(database: Path, lock: Path, doing: str) -> DataDirInUse:
    return DataDirInUse(
        f"the SQLite data directory {database.parent} is in use: {_holder_text(lock)} "
        f"serves {database.name} (lock {lock}); {doing}. One server writes a SQLite "
        "database at a time: stop that one first, or move to PostgreSQL to run several "
        "(docs/operations.md#scale-out)"
    )


def hold_writer_lock(url: str, *, doing: str = "nothing was started") -> WriterLock | None:
    """Take ``url``'s writer lock for this process (None for a non-SQLite database); raises
    DataDirInUse naming the directory and the holder when another process has it."""
    database = sqlite_file(url)
    if database is None:
        return None
    database.parent.mkdir(parents=True, exist_ok=True)
    path = _lock_path(database)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _refusal(database, path, doing) from None
    except BaseException:
        os.close(fd)
        raise
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(holder).encode())
    return WriterLock(path, fd)


def writer_holding(url: str, *, doing: str) -> None:
    """Raise DataDirInUse when a ``serve`` holds ``url``'s writer lock (a migration,
    restore or import refuses to work under a running server); takes nothing."""
    database = sqlite_file(url)
    if database is None or not _lock_path(database).exists():
        return
    lock = hold_writer_lock(url, doing=doing)
    if lock is not None:
        lock.release()
