"""Blob storage behind one small interface: a local directory or an S3 bucket.

Blobs are content-addressed (``sha256:<hex>``) and written through ``put_verified``, which
streams into a temporary object while hashing and makes the blob visible only when size and
digest match (atomic rename on a file system; a multipart upload completed only on a match on
S3 — an aborted one leaves nothing). Upload sessions keep their chunks in the same store so any
app process can continue or commit a session: ``put_part`` stores one chunk (named by the
session, with its offset first), ``discard_part`` drops a chunk whose offset never advanced,
``chunk_lock`` is held (True) by the one request storing a chunk of a session, from
before it reads the session's offset until the offset has advanced (False when another
request holds it: that one answers "offset mismatch" at once and stores nothing, so a
racing chunk can never write over an accepted one), ``assemble`` makes the verified blob
from a complete session's chunks, and ``delete_upload`` drops whatever a session stored.
``delete`` removes a blob (garbage collection only, under the database's write lock:
registry/domains/gc/service.py); deleting a missing blob is no error.
``stored_blobs`` and ``stored_uploads`` list what the store holds, with sizes and modification
times, so garbage collection also finds objects the database never recorded (a process killed
between storing and recording), and ``purge_upload`` drops such a session's chunks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import BinaryIO, NamedTuple, Protocol

from modelward.registry.errors import (
    BadRequest,
    ConfigurationError,
    DigestMismatchError,
    TruncatedBody,
)

__all__ = ["BlobStore", "StoredObject", "StreamCheck", "open_store"]


class StoredObject(NamedTuple):
    """A blob (``name``: its digest) or an upload session's chunks (``name``: the session id)
    as the store holds it: bytes, and the last modification (seconds since the epoch)."""

    name: str
    size: int
    modified: float


class BlobStore(Protocol):
    """What the registry needs from a blob store."""

    def size(self, digest: str) -> int | None: ...
    def put_verified(self, digest: str, size: int, chunks: Iterable[bytes]) -> None: ...
    def read(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]: ...
    def open(self, digest: str) -> AbstractContextManager[BinaryIO]: ...
    def chunk_lock(self, upload_id: str) -> AbstractContextManager[bool]: ...
    def put_part(self, upload_id: str, part: str, size: int, chunks: Iterable[bytes]) -> None: ...
    def discard_part(self, upload_id: str, part: str) -> None: ...
    def assemble(self, upload_id: str, parts: Sequence[str], digest: str, size: int) -> None: ...
    def delete_upload(self, upload_id: str, parts: Iterable[str]) -> None: ...
    def delete(self, digest: str) -> None: ...
    def stored_blobs(self) -> Iterator[StoredObject]: ...
    def stored_uploads(self) -> Iterator[StoredObject]: ...
    def purge_upload(self, upload_id: str) -> None: ...
    def presign(self, digest: str, expires: int) -> str | None: ...
    def check(self) -> None: ...


class StreamCheck:
    """Counts a stream, and hashes it when a digest is expected; ``finish`` raises on
    truncation, excess or mismatch."""

    def __init__(self, digest: str | None, size: int) -> None:
        self.digest = digest
        self.size = size
        self.count = 0
        self._hash = hashlib.sha256()

    def feed(self, chunk: bytes | memoryview) -> None:
        self.count += len(chunk)
        if self.count > self.size:
            raise BadRequest(
                f"body is longer than the declared {self.size} bytes",
                detail={"declared": self.size},
            )
        if self.digest is not None:
            self._hash.update(chunk)

    def finish(self) -> None:
        if self.count < self.size:
            raise TruncatedBody(
                f"body truncated: received {self.count} of {self.size} bytes",
                detail={"received": self.count, "declared": self.size},
            )
        if self.digest is not None:
            actual = "sha256:" + self._hash.hexdigest()
            if actual != self.digest:
                raise DigestMismatchError(
                    f"blob digest mismatch: expected {self.digest}, got {actual}",
                    detail={"expected": self.digest, "actual": actual},
                )


def open_store(url: str, *, endpoint_url: str | None = None) -> BlobStore:
    """``file:///dir`` or ``s3://bucket/prefix``; raises ConfigurationError otherwise."""
    if url.startswith("file://"):
        from modelward.registry.storage.file import FileStore

        return FileStore(url.removeprefix("file://"))
    if url.startswith("s3://"):
        from modelward.registry.storage.s3 import S3Store

        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise ConfigurationError(f"blob store {url!r} names no bucket")
        return S3Store(bucket, prefix.strip("/"), endpoint_url=endpoint_url)
    raise ConfigurationError(f"blob store {url!r}: use file:///path or s3://bucket/prefix")
