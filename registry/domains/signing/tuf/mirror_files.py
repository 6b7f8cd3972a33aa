"""The TUF metadata as static files, written where they are decided (docs/tuf.md#mirrors).

After every commit of this process that wrote TUF metadata (``store.add_commit_listener``),
at startup, and at every refresh while the last write failed, ``MetadataMirror.sync`` writes
the files the registry serves at ``/tuf/`` to a mirror target, byte for byte, under the same
names:

1. every root version of the verified chain (``N.root.json``), oldest first;
2. the files the current snapshot lists (``N.targets.json``, ``N.ROLE.json``);
3. that snapshot (``N.snapshot.json``);
4. ``timestamp.json`` last, replacing the one there atomically and only by a newer version.

Versioned names are written once and never replaced (a file already there with other bytes
is ``MirrorConflict``, and the timestamp is then not written), so a reader never sees a
timestamp naming a file that is not there yet. A failure is logged (file name and error
type, never the bytes), counted (``modelward_tuf_mirror_write_failures_total``) and never
raised: the publish it follows has committed; the next commit, refresh or start writes what
is missing. Targets: ``DirectoryMirror`` (``tuf_metadata_dir``) and ``S3Mirror`` (the blob
store's bucket, under ``PREFIX/tuf/``).

Errors::

    MirrorWriteError      the target refused a write
    ├── MirrorConflict    a versioned file is there with other bytes
    └── MirrorIncomplete  the database's timestamp names a file that is not stored
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from tuf.api.metadata import Metadata, Root, Snapshot, Timestamp

from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.store import TIMESTAMP, SessionStore, file_name

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from modelward.registry.db import Database
    from modelward.registry.settings import Settings
    from modelward.registry.storage import BlobStore

__all__ = [
    "DirectoryMirror",
    "MetadataMirror",
    "MirrorConflict",
    "MirrorIncomplete",
    "MirrorTarget",
    "MirrorWriteError",
    "S3Mirror",
    "open_mirror",
]

log = logging.getLogger("modelward.registry")

# as /tuf/ answers them (signing/tuf/served.py): a version never changes; timestamp does
IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"
_TIMESTAMP_FILE = "timestamp.json"


class MirrorWriteError(Exception):
    """The mirror target refused a write; names the target and the file."""


class MirrorConflict(MirrorWriteError):  # noqa: N818 - named after what it says
    """A versioned file is already in the mirror with other bytes (another registry's
    mirror, or a copy edited by hand); it is never replaced."""

    def __init__(self, where: str, name: str) -> None:
        self.where, self.name = where, name
        super().__init__(
            f"{where}/{name} is already there with other bytes than the registry's; a "
            "versioned file is never replaced (is this another registry's mirror?)"
        )


class MirrorIncomplete(MirrorWriteError):  # noqa: N818 - named after what it says
    """The database's current timestamp names a file that is not stored."""


def _version_of(data: bytes) -> int | None:
    """The ``signed.version`` of metadata bytes, or None when they hold none."""
    try:
        version = json.loads(data)["signed"]["version"]
    except (ValueError, KeyError, TypeError):
        return None
    return version if isinstance(version, int) else None


class MirrorTarget(Protocol):
    """Where the static files go."""

    where: str  # for messages: a directory or s3://bucket/prefix

    def put_once(self, name: str, data: bytes) -> None:
        """Write the versioned file ``name`` unless it is there; raise ``MirrorConflict``
        when it is there with other bytes, ``MirrorWriteError``/``OSError`` otherwise."""
        ...

    def put_timestamp(self, data: bytes, version: int) -> bool:
        """Replace ``timestamp.json`` atomically when ``version`` is newer than the one
        there (or none is); False when it is not."""
        ...


class DirectoryMirror:
    """A directory any static server can serve as ``/tuf/`` (temp file + link or rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root)

    def _temporary(self, data: bytes) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f".tmp-{secrets.token_hex(8)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # less the umask
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    def put_once(self, name: str, data: bytes) -> None:
        path = self.root / name
        try:
            if path.read_bytes() != data:
                raise MirrorConflict(self.where, name)
        except FileNotFoundError:
            pass
        else:
            return
        temporary = self._temporary(data)
        try:
            os.link(temporary, path)  # never over a file that is there
        except FileExistsError:
            if path.read_bytes() != data:
                raise MirrorConflict(self.where, name) from None
        finally:
            temporary.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The directory locked against other processes writing it (``serve --workers``)."""
        fd = os.open(self.root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def put_timestamp(self, data: bytes, version: int) -> bool:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / _TIMESTAMP_FILE
        with self._locked():
            try:
                there = _version_of(path.read_bytes())
            except FileNotFoundError:
                there = None
            if there is not None and there >= version:
                return False
            temporary = self._temporary(data)
            try:
                temporary.replace(path)
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return True


class S3Mirror:
    """The files as objects ``PREFIX/NAME`` of a bucket, each written by one PUT; a
    versioned one only when absent (``If-None-Match: *``), ``timestamp.json`` only over
    the object read just before (``If-Match``), so two writers never take it back."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self._s3 = client
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.where = f"s3://{bucket}/{self.prefix.rstrip('/')}"

    def _get(self, name: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            answer = self._s3.get_object(Bucket=self.bucket, Key=self.prefix + name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        body = answer["Body"]
        try:
            return body.read(), str(answer.get("ETag", ""))
        finally:
            body.close()

    def _put(self, name: str, data: bytes, cache_control: str, **condition: str) -> bool:
        """One PUT; False when its condition did not hold (412, or 409 for a racing one)."""
        from botocore.exceptions import ClientError

        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=self.prefix + name,
                Body=data,
                ContentType="application/json",
                CacheControl=cache_control,
                **condition,
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return False
            raise
        return True

    def put_once(self, name: str, data: bytes) -> None:
        found = self._get(name)
        if found is None and self._put(name, data, IMMUTABLE, IfNoneMatch="*"):
            return
        found = found or self._get(name)
        if found is None or found[0] != data:
            raise MirrorConflict(self.where, name)

    def put_timestamp(self, data: bytes, version: int) -> bool:
        for _ in range(8):  # each turn: another writer replaced it between our GET and PUT
            found = self._get(_TIMESTAMP_FILE)
            if found is not None:
                there = _version_of(found[0])
                if there is not None and there >= version:
                    return False
                condition = {"IfMatch": found[1]}
            else:
                condition = {"IfNoneMatch": "*"}
            if self._put(_TIMESTAMP_FILE, data, NO_CACHE, **condition):
                return True
        raise MirrorWriteError(f"{self.where}/{_TIMESTAMP_FILE}: replaced by others 8 times")


@dataclass(frozen=True)
class _Current:
    """The files ``/tuf/`` serves now, in the order they are written (timestamp apart)."""

    files: list[tuple[str, bytes]]
    timestamp: tuple[bytes, int] | None


def _current(session: Session, known: set[str]) -> _Current:
    """What the registry serves now, read as ``/tuf/`` reads it (served.py): the verified
    root chain, the current timestamp (``current_row``), the snapshot it names and the
    versions that snapshot lists, as stored. Files in ``known`` are named, not read."""
    store = SessionStore(session)
    repository = MetadataRepository(store, {})
    # (1): every root version of the verified chain
    files = [(file_name(Root.type, n), data) for n, data in enumerate(repository.root_chain(), 1)]
    data, version = repository.current_row(TIMESTAMP)
    if data is None or version is None:
        return _Current(files, None)
    snapshot_version = Metadata[Timestamp].from_bytes(data).signed.snapshot_meta.version
    snapshot_name = file_name(Snapshot.type, snapshot_version)
    snapshot = store.read(Snapshot.type, snapshot_version)
    if snapshot is None:
        raise MirrorIncomplete(f"timestamp v{version} names {snapshot_name}, which is not stored")
    # (2): what the snapshot lists
    for listed, meta in Metadata[Snapshot].from_bytes(snapshot).signed.meta.items():
        name = file_name(listed.removesuffix(".json"), meta.version)
        if name in known:
            files.append((name, b""))
            continue
        role_data = store.read(listed.removesuffix(".json"), meta.version)
        if role_data is None:
            raise MirrorIncomplete(f"{snapshot_name} lists {name}, which is not stored")
        files.append((name, role_data))
    # (3): the snapshot; (4): the timestamp, written last by the caller
    files.append((snapshot_name, snapshot))
    return _Current(files, (data, version))


class MetadataMirror:
    """Keeps a ``MirrorTarget`` in step with the registry's database; thread-safe."""

    def __init__(self, db: Database, target: MirrorTarget) -> None:
        self.db = db
        self.target = target
        self.failures = 0
        self.failing = False
        self._written: set[str] = set()  # versioned files this process saw in the target
        self._lock = threading.Lock()

    def on_commit(self, session: Session) -> None:
        """The commit listener (``store.add_commit_listener``): sync when ``session`` wrote
        this registry's database."""
        bind = session.get_bind()
        if str(bind.engine.url) == str(self.db.engine.url):
            self.sync()

    def sync(self) -> bool:
        """Write what the target lacks, timestamp last. Never raises: a failure is logged,
        counted, and retried at the next sync. True when the target is now current."""
        with self._lock:
            name = "(reading the database)"
            try:
                with self.db.read() as session:
                    current = _current(session, set(self._written))
                for name, data in current.files:
                    if name not in self._written:
                        self.target.put_once(name, data)
                        self._written.add(name)
                if current.timestamp is not None:
                    name = _TIMESTAMP_FILE
                    self.target.put_timestamp(*current.timestamp)
            except Exception as exc:  # noqa: BLE001 - the publish committed; logged, retried
                self.failures += 1
                self.failing = True
                self._written.clear()  # the target's state is unknown: check every file again
                log.error(  # noqa: TRY400 - type and message; never the file's bytes
                    json.dumps(
                        {
                            "event": "tuf_mirror_write_failed",
                            "mirror": self.target.where,
                            "file": name,
                            "exception": type(exc).__name__,
                            "message": str(exc)[:500],
                        }
                    )
                )
                return False
            self.failing = False
            return True

    def collector(self) -> Collector:
        """``/metrics``: failed syncs, and whether the last one failed."""
        return _MirrorCollector(self)


class _MirrorCollector(Collector):
    def __init__(self, mirror: MetadataMirror) -> None:
        self.mirror = mirror

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "modelward_tuf_mirror_write_failures",
            "TUF metadata mirror syncs that failed, this process (docs/tuf.md#mirrors)",
            value=self.mirror.failures,
        )
        yield GaugeMetricFamily(
            "modelward_tuf_mirror_failing",
            "1 while the last TUF metadata mirror sync of this process failed",
            value=int(self.mirror.failing),
        )


def open_mirror(settings: Settings, db: Database, blobs: BlobStore) -> MetadataMirror:
    """The mirror ``settings`` name: ``tuf_metadata_dir`` when set; else the blob store's
    bucket under ``PREFIX/tuf/`` when blobs are on S3; else ``<data_dir>/mirror/tuf``."""
    from modelward.registry.storage.s3 import S3Store

    if settings.tuf_metadata_dir is None and isinstance(blobs, S3Store):
        prefix = f"{blobs.prefix}tuf"
        return MetadataMirror(db, S3Mirror(blobs.client, blobs.bucket, prefix))
    return MetadataMirror(db, DirectoryMirror(settings.resolved_tuf_metadata_dir()))
