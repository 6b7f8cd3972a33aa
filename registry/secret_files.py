"""Files that hold the registry's private keys: created 0600 and atomically, read only
when they are regular files nobody else can read.

Creation writes a temporary file and links it into place, which fails if the file exists:
processes starting together end up with one key, and no reader ever sees a partial file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

__all__ = ["SecretFileError", "create_secret_file", "read_secret_file"]


class SecretFileError(Exception):
    """A key file is missing, unreadable, not a regular file, open to others or too large."""


def read_secret_file(path: Path, *, max_bytes: int, what: str) -> bytes:
    """The bytes of the key file ``path``; raises SecretFileError naming ``what`` and why."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise SecretFileError(f"cannot open the {what} {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SecretFileError(f"the {what} {path} is not a regular file")
        if info.st_mode & 0o077:
            raise SecretFileError(
                f"the {what} {path} is open to other users "
                f"(mode {stat.S_IMODE(info.st_mode):04o}): chmod 600 it"
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SecretFileError(f"{path} is too large to be a {what}")
    return data


def create_secret_file(path: Path, data: bytes) -> None:
    """Create ``path`` (mode 0600) holding ``data``; FileExistsError if it already exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temporary, path)  # fails if another process created it first
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
