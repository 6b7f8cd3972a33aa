"""Blob store on a local (or shared) file system: temp file, fsync, atomic rename."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from registry.storage import StreamCheck

__all__ = ["FileStore"]

READ_CHUNK = 1 << 20
STALE_TMP_SECONDS = 24 * 3600


class FileStore:
    """``<root>/sha256/<2 hex>/<hex>``; temporaries in ``<root>/_tmp``; parts in ``_uploads``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._tmp = self.root / "_tmp"
        self._uploads = self.root / "_uploads"
        for path in (self.root, self._tmp, self._uploads):
            path.mkdir(parents=True, exist_ok=True)
        self._sweep_stale()

    def _sweep_stale(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for entry in self._tmp.iterdir():
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < cutoff:
                    entry.unlink()

    def blob_path(self, digest: str) -> Path:
        return self._path(digest)

    def _path(self, digest: str) -> Path:
        hexd = digest.removeprefix("sha256:")
        return self.root / "sha256" / hexd[:2] / hexd

    def size(self, digest: str) -> int | None:
        try:
            return self._path(digest).stat().st_size
        except FileNotFoundError:
            return None

    def _write_temp(self, chunks: Iterable[bytes], check: StreamCheck) -> Path:
        fd, name = tempfile.mkstemp(dir=self._tmp, prefix="put-")
        tmp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    check.feed(chunk)
                    out.write(chunk)
                check.finish()
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def put_verified(self, digest: str, size: int, chunks: Iterable[bytes]) -> None:
        tmp = self._write_temp(chunks, StreamCheck(digest, size))
        final = self._path(digest)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(final)

    def read(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        with self._path(digest).open("rb") as f:
            f.seek(start)
            remaining = None if end is None else end - start
            while remaining is None or remaining > 0:
                want = READ_CHUNK if remaining is None else min(READ_CHUNK, remaining)
                chunk = f.read(want)
                if not chunk:
                    return
                if remaining is not None:
                    remaining -= len(chunk)
                yield chunk

    @contextlib.contextmanager
    def open(self, digest: str) -> Iterator[BinaryIO]:
        with self._path(digest).open("rb") as f:
            yield f

    def _part(self, upload_id: str, part: str) -> Path:
        return self._uploads / upload_id / part

    def put_part(self, upload_id: str, part: str, size: int, chunks: Iterable[bytes]) -> None:
        tmp = self._write_temp(chunks, StreamCheck(None, size))
        final = self._part(upload_id, part)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(final)

    def read_part(self, upload_id: str, part: str) -> Iterator[bytes]:
        with self._part(upload_id, part).open("rb") as f:
            while chunk := f.read(READ_CHUNK):
                yield chunk

    def delete_parts(self, upload_id: str, parts: Iterable[str]) -> None:
        for part in parts:
            self._part(upload_id, part).unlink(missing_ok=True)
        shutil.rmtree(self._uploads / upload_id, ignore_errors=True)

    def presign(self, digest: str, expires: int) -> str | None:
        return None

    def check(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise OSError(f"blob directory {self.root} is not writable")
