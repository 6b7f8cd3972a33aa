"""Blob store on a local (or shared) file system: temp file, fsync, atomic rename.

An upload session's chunks are written in place into one file, ``_uploads/<id>/data``, at
each chunk's offset (the part name starts with it) and fsynced; ``assemble`` hashes that
file and renames it into place, so a session's bytes are written to disk once. Bytes past
the session's offset (a chunk whose offset never advanced: cut off) are overwritten by the
next chunk and never reach a blob: ``assemble`` reads the first ``size`` bytes only, and the
digest decides. Two chunks are never written at once: the writer holds ``chunk_lock`` (a
``flock``) from before it reads the session's offset until that offset has advanced, so a
racing chunk at the same offset is refused before it writes a byte over the accepted one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from modelward.registry.storage import StoredObject, StreamCheck

__all__ = ["FileStore"]

READ_CHUNK = 1 << 20
STALE_TMP_SECONDS = 24 * 3600
HEX_DIGEST = 64
HEX = frozenset("0123456789abcdef")


def _write_checked(out: BinaryIO, chunks: Iterable[bytes], check: StreamCheck) -> None:
    """Write ``chunks`` through ``check`` (which raises on a wrong length or digest), then
    flush and fsync."""
    for chunk in chunks:
        check.feed(chunk)
        out.write(chunk)
    check.finish()
    out.flush()
    os.fsync(out.fileno())


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
                _write_checked(out, chunks, check)
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

    def _upload_data(self, upload_id: str) -> Path:
        return self._uploads / upload_id / "data"

    @staticmethod
    def _offset(part: str) -> int:
        head = part.partition("-")[0]
        if not head.isdigit():
            raise ValueError(f"part name {part!r} does not start with its offset")
        return int(head)

    @contextlib.contextmanager
    def chunk_lock(self, upload_id: str) -> Iterator[bool]:
        """An exclusive, non-blocking ``flock`` on ``_uploads/<id>/lock``: chunks are written
        in place, so only the request that holds it may write (True); another one holding it
        means False. The kernel drops it when its holder dies (no stale lock)."""
        lock = self._uploads / upload_id / "lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def put_part(self, upload_id: str, part: str, size: int, chunks: Iterable[bytes]) -> None:
        data = self._upload_data(upload_id)
        data.parent.mkdir(parents=True, exist_ok=True)
        check = StreamCheck(None, size)
        fd = os.open(data, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+b") as out:
            out.seek(self._offset(part))
            _write_checked(out, chunks, check)

    def discard_part(self, upload_id: str, part: str) -> None:
        """Nothing to do: the chunk's bytes lie past the session's offset (module doc)."""

    def assemble(self, upload_id: str, parts: Sequence[str], digest: str, size: int) -> None:
        data = self._upload_data(upload_id)
        data.parent.mkdir(parents=True, exist_ok=True)
        data.touch(exist_ok=True)  # a zero-byte blob never received a chunk
        check = StreamCheck(digest, size)
        buffer = bytearray(READ_CHUNK)
        view = memoryview(buffer)
        with data.open("rb") as f:
            while check.count < size:
                n = f.readinto(view[: min(READ_CHUNK, size - check.count)])
                if not n:
                    break
                check.feed(view[:n])
        check.finish()  # hashed even when the blob is stored already: the bytes must match
        final = self._path(digest)
        if self.size(digest) == size:  # the same blob put meanwhile
            self.delete_upload(upload_id, parts)
            return
        os.truncate(data, size)  # drop any bytes past the end (a cut-off chunk's)
        final.parent.mkdir(parents=True, exist_ok=True)
        data.replace(final)
        shutil.rmtree(data.parent, ignore_errors=True)

    def delete_upload(self, upload_id: str, parts: Iterable[str]) -> None:
        shutil.rmtree(self._uploads / upload_id, ignore_errors=True)

    def delete(self, digest: str) -> None:
        """Remove the blob's name (a hard link a verifier holds keeps its bytes)."""
        self._path(digest).unlink(missing_ok=True)

    def stored_blobs(self) -> Iterator[StoredObject]:
        top = self.root / "sha256"
        if not top.is_dir():
            return
        for shard in top.iterdir():
            if not shard.is_dir():
                continue
            for entry in shard.iterdir():
                if len(entry.name) != HEX_DIGEST or not all(c in HEX for c in entry.name):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat()
                    yield StoredObject(f"sha256:{entry.name}", st.st_size, st.st_mtime)

    def stored_uploads(self) -> Iterator[StoredObject]:
        for entry in self._uploads.iterdir():
            with contextlib.suppress(FileNotFoundError):
                stats = [entry.stat(), *(f.stat() for f in entry.iterdir())]
                yield StoredObject(
                    entry.name, sum(s.st_size for s in stats[1:]), max(s.st_mtime for s in stats)
                )

    def purge_upload(self, upload_id: str) -> None:
        shutil.rmtree(self._uploads / upload_id, ignore_errors=True)

    def presign(self, digest: str, expires: int) -> str | None:
        return None

    def check(self) -> None:
        if not os.access(self.root, os.W_OK):
            raise OSError(f"blob directory {self.root} is not writable")
