"""The ``/tuf/`` files as a server process serves them: from memory (docs/tuf.md#serving).

``MetadataFiles`` keeps, per process:

- ``timestamp.json``: the current timestamp's bytes (``MetadataRepository.current_row``),
  re-checked against the database at most every ``freshness`` seconds with one indexed
  lookup (the newest timestamp and root versions), and at once after this process commits
  a TUF write (``store.committed_writes``) or another process sharing the ``generation``
  (signing/tuf/generation.py: the ``serve --workers`` siblings, replicas sharing the keys
  directory on one machine) announced one. A publish by any other process on the same
  database is therefore served within ``freshness`` seconds, never later. Once half of
  ``freshness`` has passed, a request starts one background re-check and is answered from
  memory meanwhile, so a busy process re-checks before the bound without its requests
  queueing on the database;
- versioned files (``N.ROLE.json``): immutable once stored (a root version once it is in
  the verified chain), kept until ``max_bytes`` pushes the least recently used out;
- a file found missing: remembered for ``freshness`` seconds at most (every TUF refresh
  asks for the next root version, which is nearly always missing).

Each file carries its strong ETag (its sha256, quoted), its ``Cache-Control`` and the
response headers built once (``head``, ``head_304``). No I/O happens in ``peek``; ``load``
reads the database. ``freshness`` 0 keeps nothing: every request reads the database.
``announce`` tells the other processes that this one committed (a response is about to
leave: registry/domains/signing/fast_path.py calls it before every non-GET response starts).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from tuf.api.metadata import Root

from modelward.registry.db import Database
from modelward.registry.domains.signing.tuf.generation import SharedGeneration
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.store import TIMESTAMP, SessionStore, committed_writes
from modelward.registry.kit.logs import log_failure

__all__ = ["IMMUTABLE", "MISSING", "MetadataFiles", "Missing", "ServedFile", "etag_matches"]

log = logging.getLogger("modelward.registry")
IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"


Headers = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class ServedFile:
    data: bytes
    etag: str  # '"<sha256 hex>"'
    cache_control: str
    head: Headers  # the 200's headers, as the /tuf/ route sends them
    head_304: Headers  # the 304's: no body, so no length or type

    @classmethod
    def of(cls, data: bytes, cache_control: str) -> ServedFile:
        etag = f'"{hashlib.sha256(data).hexdigest()}"'
        common = ((b"cache-control", cache_control.encode()), (b"etag", etag.encode()))
        head = (
            *common,
            (b"content-length", str(len(data)).encode()),
            (b"content-type", b"application/json"),
        )
        return cls(data, etag, cache_control, head, common)


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 13.1.2: ``*`` or any listed tag equal to ``etag`` (weak comparison)."""
    if not if_none_match:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags


class Missing:
    """A file known to be absent (within the freshness bound)."""


MISSING = Missing()


class MetadataFiles:
    """The current TUF files of one server process; thread-safe."""

    def __init__(
        self,
        db: Database,
        *,
        freshness: float,
        max_bytes: int = 64 * 2**20,
        max_missing: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        generation: SharedGeneration | None = None,
    ) -> None:
        self.db = db
        self.generation = generation
        self.freshness = freshness
        self.max_bytes = max_bytes
        self.max_missing = max_missing
        self.clock = clock
        self._lock = threading.Lock()
        self._timestamp: ServedFile | None = None
        self._checked_at = float("-inf")  # when the timestamp was last checked
        self._ahead = False  # a background thread is re-checking the timestamp early
        self._commits = -1  # committed_writes() at that check
        self._generation = b""  # generation.read() at that check
        self._announced = committed_writes()  # the last of this process's commits announced
        self._seen: tuple[int | None, int | None] | None = None  # newest (timestamp, root)
        self._files: OrderedDict[tuple[str, int], ServedFile] = OrderedDict()
        self._bytes = 0
        self._missing: OrderedDict[tuple[str, int], float] = OrderedDict()

    def _unchanged(self) -> bool:
        """No commit of this process, nor one announced by another, since the last check."""
        return self._commits == committed_writes() and (
            self.generation is None or self._generation == self.generation.read()
        )

    def _fresh(self, now: float) -> bool:
        return now - self._checked_at < self.freshness and self._unchanged()

    def share(self, generation: SharedGeneration) -> None:
        """Announce this process's commits to, and hear those of, the processes sharing
        ``generation``."""
        self.generation = generation

    def announce(self) -> None:
        """Tell the processes sharing the generation that this one committed new metadata
        since the last call (nothing when it did not). Cheap: call it before any response
        that may follow a write."""
        commits = committed_writes()
        if commits != self._announced:
            self._announced = commits
            if self.generation is not None:
                self.generation.bump()

    def peek(self, role: str, version: int | None) -> ServedFile | Missing | None:
        """The file from memory, ``MISSING`` when known absent, None when ``load`` must
        read the database. No I/O (past half the bound it starts the background re-check of
        the timestamp, and answers from memory)."""
        if self.freshness <= 0:
            return None
        now = self.clock()
        if role == TIMESTAMP:
            if not self._fresh(now):
                return None
            if now - self._checked_at >= self.freshness / 2 and not self._ahead:
                # half the bound gone: one thread re-checks while memory keeps answering, so
                # the bound passes without every request waiting on the database at once
                self._ahead = True
                threading.Thread(target=self._recheck_ahead, daemon=True).start()
            return self._timestamp or MISSING
        key = (role, version or 0)
        found = self._files.get(key)
        if found is not None:
            return found
        since = self._missing.get(key)
        if since is not None and now - since < self.freshness and self._fresh(now):
            return MISSING
        return None

    def load(self, role: str, version: int | None) -> ServedFile | None:
        """The file, read from the database when memory cannot answer; None: absent."""
        if role == TIMESTAMP:
            return self._check_timestamp()
        known = self.peek(role, version)
        if known is not None:
            return None if isinstance(known, Missing) else known
        key = (role, version or 0)
        data: bytes | None
        with self.db.read() as session:
            store = SessionStore(session)
            if role == Root.type:
                chain = MetadataRepository(store, {}).root_chain()
                for n, data in enumerate(chain, start=1):
                    if self.freshness > 0:
                        self._keep((Root.type, n), data)
                data = chain[key[1] - 1] if 1 <= key[1] <= len(chain) else None
            else:
                data = store.read(role, key[1])
        if self.freshness <= 0:
            return None if data is None else ServedFile.of(data, IMMUTABLE)
        if data is None:
            with self._lock:
                self._missing[key] = self.clock()
                self._missing.move_to_end(key)
                while len(self._missing) > self.max_missing:
                    self._missing.popitem(last=False)
            return None
        return self._keep(key, data)

    def _keep(self, key: tuple[str, int], data: bytes) -> ServedFile:
        with self._lock:
            found = self._files.get(key)
            if found is not None:
                self._files.move_to_end(key)
                return found
            served = ServedFile.of(data, IMMUTABLE)
            self._files[key] = served
            self._bytes += len(data)
            self._missing.pop(key, None)
            while self._bytes > self.max_bytes and len(self._files) > 1:
                _, dropped = self._files.popitem(last=False)
                self._bytes -= len(dropped.data)
            return served

    def _recheck_ahead(self) -> None:
        try:
            self._check_timestamp(ahead=True)
        except Exception as exc:  # noqa: BLE001 - logged; past the bound a request re-checks
            log_failure(log, "tuf_recheck_failed", exc, level=logging.WARNING, message=None)
        finally:
            self._ahead = False

    def _check_timestamp(self, *, ahead: bool = False) -> ServedFile | None:
        """The current timestamp, checked now unless another thread just did (``ahead``:
        check even so). The commit count is read before the database, so a commit racing
        the check is re-checked."""
        with self._lock:
            now = self.clock()
            if self._fresh(now) and not (ahead and now - self._checked_at >= self.freshness / 2):
                return self._timestamp
            self.announce()  # a commit of this process (the refresher's) reaches the others
            commits = committed_writes()
            generation = self.generation.read() if self.generation is not None else b""
            with self.db.read() as session:
                store = SessionStore(session)
                seen = (store.latest_version(TIMESTAMP), store.latest_version(Root.type))
                if seen != self._seen or self.freshness <= 0:
                    data, _ = MetadataRepository(store, {}).current_row(TIMESTAMP)
                    self._timestamp = None if data is None else ServedFile.of(data, NO_CACHE)
                    self._seen = seen
            if commits != self._commits or generation != self._generation:
                self._missing.clear()  # a process wrote: a missing file may exist now
            self._commits = commits
            self._generation = generation
            self._checked_at = now
            return self._timestamp
