"""Files, safely.

Reading a bundle file: the final path component is never followed as a symlink, a fifo
swapped in never blocks the open, and what was opened is re-checked to be a regular file
with ``fstat`` (so a file swapped after the tree walk is refused, not read).

Writing a command's output (``--out FILE``): a regular or new file is replaced atomically
(temporary file, fsync, rename), so a reader never sees half of it; anything else the user
named (``/dev/null``, ``/dev/stdout``, a fifo) is written in place, never renamed over.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["OPEN_FLAGS", "open_regular", "read_regular", "write_output"]

OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def open_regular(path: Path) -> tuple[BinaryIO, int] | None:
    """Open ``path`` for reading as ``(stream, size)``; None when what was opened is not a
    regular file (closed again). Raises ``OSError`` when it cannot be opened (a symlink,
    missing, unreadable)."""
    stream = os.fdopen(os.open(path, OPEN_FLAGS), "rb")
    try:
        st = os.fstat(stream.fileno())
    except BaseException:
        stream.close()
        raise
    if not stat.S_ISREG(st.st_mode):
        stream.close()
        return None
    return stream, st.st_size


def read_regular(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a regular file; None when it cannot be opened or is not a
    regular file (open_regular)."""
    try:
        opened = open_regular(path)
    except OSError:
        return None
    if opened is None:
        return None
    stream, _ = opened
    with stream:
        return stream.read(limit)


def read_bounded(path: Path, limit: int, *, what: str, error: Callable[[str], Exception]) -> bytes:
    """At most ``limit`` bytes of ``path``, read once; ``error(message)`` is raised, the
    message naming ``what``, when it cannot be read or is larger (each caller its own error
    type: a key file, a policy flag, a trust root, a replay input)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise error(f"{what}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{what}: larger than {limit} bytes")
    return data


def write_output(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to the output file ``path`` (see the module docstring). Raises OSError."""
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with path.open("wb") as stream:  # a device or a fifo: never rename over it
            stream.write(data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
