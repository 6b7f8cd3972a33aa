"""Streaming SHA-256 of bundle files: the hot path of every build and verification.

Design (docs/bundle-format.md#digest, docs/performance.md#hashing):

- Each file is read with ``readinto`` into one preallocated buffer per worker thread
  (``HashOptions.buffer_size``, 8 MiB by default) and fed to ``hashlib`` as a
  ``memoryview``; no per-chunk allocation, no copy.
- Files are hashed in parallel by a pool of ``HashOptions.workers`` threads. ``hashlib``
  releases the GIL while it hashes a large chunk, so threads scale across cores. Files are
  scheduled largest first so one big file does not start last.
- Memory is bounded by ``workers * buffer_size`` whatever the file sizes. The SHA-256 of
  one file is inherently sequential (an OCI layer digest is the plain hash of the blob),
  so a single file is hashed at the speed of one core.
- Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and re-checked with ``fstat``: a file
  swapped for a symlink or a special file after the tree walk is refused (never followed,
  never waited on), and a file whose size changed between the walk and the hash is
  refused (``BundleError``) instead of being recorded with a size and digest that never
  existed together.

Errors: ``TreeRuleError`` (rule ``tree.unreadable`` / ``tree.special``) for a file that
cannot be opened or is not a regular file; ``BundleError`` for a file that changed while
being hashed; ``ValueError`` for caller misuse (bad options, malformed digest text).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, BinaryIO, final

from modelward.attest.errors import BundleError, TreeRuleError, TreeViolation
from modelward.attest.tree import BundleFile

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "HashOptions",
    "HashedBytes",
    "ProgressCallback",
    "hash_files",
    "parse_digest",
    "sha256_stream",
]

DEFAULT_BUFFER_SIZE = 8 * 2**20
_MIN_BUFFER_SIZE = 4096
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")

ProgressCallback = Callable[[int], None]
"""Called with the number of bytes just hashed. ``hash_files`` calls it from worker
threads, so it must be thread-safe (a Rich ``Progress.advance`` is)."""


def _default_workers() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class HashOptions:
    """How to hash: number of worker threads and the per-worker read buffer size.

    Peak buffer memory is ``workers * buffer_size``. Raises ``ValueError`` when either
    is out of range.
    """

    workers: int = field(default_factory=_default_workers)
    buffer_size: int = DEFAULT_BUFFER_SIZE

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"HashOptions.workers must be an int >= 1, got {self.workers!r}")
        if not isinstance(self.buffer_size, int) or self.buffer_size < _MIN_BUFFER_SIZE:
            raise ValueError(
                f"HashOptions.buffer_size must be an int >= {_MIN_BUFFER_SIZE}, "
                f"got {self.buffer_size!r}"
            )


def parse_digest(text: str) -> str:
    """Return ``text`` if it is ``sha256:`` followed by 64 lowercase hex digits.

    Raises ``ValueError`` naming the offending text otherwise.
    """
    if not isinstance(text, str) or _DIGEST_RE.fullmatch(text) is None:
        shown = text[:80] if isinstance(text, str) else type(text).__name__
        raise ValueError(f"not a sha256 digest (want 'sha256:<64 lowercase hex>'): {shown!r}")
    return text


@final
class HashedBytes(bytes):
    """Bytes that carry their own ``sha256:<hex>``, taken once, here, when they were made.

    No digest can be handed in: ``HashedBytes(data).digest`` is always the hash this class
    took of exactly these bytes, never a sender's word, so whoever receives them may use
    ``.digest`` instead of hashing again (bytes are hashed once per request and the digest
    travels with them). ``HashedBytes`` of bytes that are already ``HashedBytes`` is the
    same object, unhashed again. Slicing, concatenating or ``bytes(...)`` give plain bytes,
    which carry nothing. Raises ``TypeError`` for anything but bytes.
    """

    _digest: str

    def __new__(cls, data: bytes) -> HashedBytes:
        if isinstance(data, HashedBytes):
            return data
        if not isinstance(data, bytes):
            raise TypeError(f"HashedBytes takes bytes, not {type(data).__name__}")
        self = super().__new__(cls, data)
        object.__setattr__(self, "_digest", "sha256:" + hashlib.sha256(self).hexdigest())
        return self

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of these exact bytes."""
        return self._digest

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"HashedBytes is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"HashedBytes is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:  # a copy or an unpickled one hashes its bytes
        return (HashedBytes, (bytes(self),))


def sha256_stream(
    stream: BinaryIO, *, buffer_size: int = DEFAULT_BUFFER_SIZE, limit: int | None = None
) -> tuple[str, int]:
    """Hash ``stream`` until EOF, or until ``limit`` bytes, whichever comes first.

    Never reads past ``limit``: a caller that must detect an over-long stream passes
    ``limit = expected + 1`` and compares the returned size. Returns
    ``("sha256:<hex>", bytes_hashed)``. Raises ``ValueError`` for a negative limit or a
    buffer smaller than 4 KiB; the stream's own ``OSError`` propagates.
    """
    if buffer_size < _MIN_BUFFER_SIZE:
        raise ValueError(f"buffer_size must be >= {_MIN_BUFFER_SIZE}, got {buffer_size}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    hasher = hashlib.sha256()
    total = 0
    readinto = getattr(stream, "readinto", None)
    view = memoryview(bytearray(buffer_size)) if readinto is not None else None
    while limit is None or total < limit:
        want = buffer_size if limit is None else min(buffer_size, limit - total)
        if view is not None and readinto is not None:
            got = readinto(view[:want])
            if not got:
                break
            hasher.update(view[:got])
        else:
            chunk = stream.read(want)
            if not chunk:
                break
            got = len(chunk)
            hasher.update(chunk)
        total += got
    return "sha256:" + hasher.hexdigest(), total


class _Buffers(threading.local):
    """One read buffer per worker thread, allocated on first use."""

    view: memoryview | None = None


class _Cancelled(Exception):  # noqa: N818 - internal signal, never escapes hash_files
    """Another file failed or the caller was interrupted: stop hashing this one."""


@dataclass
class _Job:
    buffer_size: int
    progress: ProgressCallback | None
    buffers: _Buffers = field(default_factory=_Buffers)
    stop: threading.Event = field(default_factory=threading.Event)


def _open_regular(file: BundleFile) -> int:
    """An fd on ``file``, still a regular file; TreeRuleError (the path at fault) if not."""
    # O_NONBLOCK: opening a fifo swapped in after the walk must not hang (no effect on files)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(file.abspath, flags)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise TreeRuleError([TreeViolation(file.path, "tree.unreadable", reason)]) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TreeRuleError([TreeViolation(file.path, "tree.special", "no longer a regular file")])
    return fd


def _hash_one(file: BundleFile, job: _Job) -> str:
    if job.buffers.view is None:
        job.buffers.view = memoryview(bytearray(job.buffer_size))
    view = job.buffers.view
    fd = _open_regular(file)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        hasher = hashlib.sha256()
        total = 0
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as raw:
            while got := raw.readinto(view):
                if job.stop.is_set():
                    raise _Cancelled
                hasher.update(view[:got])
                total += got
                if total > file.size:
                    break
                if job.progress is not None:
                    job.progress(got)
    finally:
        os.close(fd)
    if total != file.size:
        raise BundleError(
            f"{file.path}: file changed while it was being hashed "
            f"(size {file.size} when listed, {total}{'+' if total > file.size else ''} read)"
        )
    return "sha256:" + hasher.hexdigest()


def hash_files(
    files: Sequence[BundleFile],
    options: HashOptions = HashOptions(),
    progress: ProgressCallback | None = None,
) -> dict[str, str]:
    """Hash every file in parallel; return ``{path: "sha256:<hex>"}``.

    Raises ``TreeRuleError`` for a file that cannot be opened or is no longer a regular
    file, ``BundleError`` for a file whose size changed since it was listed. On a failure
    (or an interrupt) the other workers stop at their next chunk, and the failure of the
    first path in byte order is raised.
    """
    if not files:
        return {}
    order = sorted(files, key=lambda f: (-f.size, f.path.encode()))
    job = _Job(options.buffer_size, progress)
    if len(order) == 1 or options.workers == 1:
        return {f.path: _hash_one(f, job) for f in order}
    workers = min(options.workers, len(order))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attest-hash") as pool:
        try:
            futures = {pool.submit(_hash_one, f, job): f.path for f in order}
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:  # KeyboardInterrupt: do not wait for whole files to finish
            job.stop.set()
            raise
        if pending:
            job.stop.set()
            for future in pending:
                future.cancel()
            wait(futures)  # the running ones stop at their next chunk
        failures = {
            futures[f]: exc
            for f in futures
            if not f.cancelled()
            and (exc := f.exception()) is not None
            and not isinstance(exc, _Cancelled)
        }
        if failures:
            first = min(failures, key=str.encode)
            # A file stopped, or never started, before it could fail: whichever worker
            # failed first, an earlier path that cannot be opened is the one reported.
            for file in sorted(order, key=lambda f: f.path.encode()):
                if file.path.encode() >= first.encode():
                    break
                os.close(_open_regular(file))
            raise failures[first]
        return {futures[f]: f.result() for f in done}
