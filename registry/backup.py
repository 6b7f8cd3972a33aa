"""Backup and restore of a whole registry (docs/operations.md#backup-and-restore).

A backup is a directory::

    manifest.json            what, when, the schema revision, every file's size and sha256
    manifest.hmac            HMAC-SHA256 over manifest.json with the backup key (not in it)
    registry.db              SQLite: the online backup API's copy (one read transaction)
    database.pgdump          PostgreSQL: ``pg_dump --format=custom`` (one snapshot)
    blobs/sha256/xx/<hex>    the file blob store (S3: not copied, see below)
    tuf-keys/                the registry's online TUF keys and row seal key (secret)
    audit-checkpoint.key     the audit checkpoint signing key (secret)

The database holds the TUF metadata, the proposals and every signed audit checkpoint, so one
database snapshot takes them together with the rows they sign. It is taken first, while the
registry serves; the blobs are copied after it: blobs are content-addressed and never change,
and garbage collection spares every blob the snapshot names (referenced, or younger than the
GC window), so the copy holds every blob the snapshot needs (and perhaps a few newer ones).
Each blob is hashed while it is copied and must match its name. An S3 blob store is not
copied: the manifest records its URL, and the bucket's own versioning or replication is the
backup of its objects.

``restore`` checks the manifest's MAC (registry.backup_mac), every file's size and digest,
the database kind and the schema revision, and that the target (data directory, blob
directory, keys directory, PostgreSQL database) is empty, before it writes anything. After
the database is written, it compares it with the metadata the registry published
(registry.restore_published): versions at or below the published ones are reserved, and a
restore that would change quarantines is refused unless accepted; a refusal takes back
everything written.

Errors: ``BackupError`` (a ``RegistryError``) names the file, directory or database at fault.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic.script import ScriptDirectory
from sqlalchemy import MetaData
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from modelward import __version__
from modelward.registry.backup_mac import (
    MAC_FILE,
    BackupKeyError,
    BackupMacError,
    load_backup_key,
    sign_manifest,
    verify_manifest,
)
from modelward.registry.db import (
    alembic_config,
    current_revision,
    make_engine,
    masked_url,
    schema_state,
)
from modelward.registry.errors import RegistryError
from modelward.registry.restore_published import (
    PublishedStateError,
    RestoreGuard,
    guard_restored,
    published_dir,
)
from modelward.registry.settings import Settings
from modelward.registry.writer_lock import sqlite_file

__all__ = ["BackupError", "BackupSummary", "BackupToolMissing", "backup", "pg_binary", "restore"]

FORMAT = "modelward-backup/1"
MANIFEST = "manifest.json"
READ_CHUNK = 1 << 20
HEX = frozenset("0123456789abcdef")


class BackupError(RegistryError):
    """A backup cannot be taken or restored (the message names what is at fault)."""


class BackupToolMissing(BackupError):  # noqa: N818 - named after what is missing
    """``pg_dump`` or ``pg_restore`` is not on this machine."""


@dataclass(frozen=True)
class BackupSummary:
    directory: Path
    database: str  # "sqlite" or "postgresql"
    schema_revision: str
    files: int
    bytes: int
    blobs: int
    blob_store: str  # "copied" or the S3 URL left in place
    guarded: RestoreGuard | None = None  # restore: what it reserved, the quarantines it changes


def pg_binary(name: str) -> Path:
    """``pg_dump`` / ``pg_restore`` on PATH, else the newest under /usr/lib/postgresql."""
    found = shutil.which(name)
    if found:
        return Path(found)
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)
    if not candidates:
        raise BackupToolMissing(
            f"no {name} on PATH nor under /usr/lib/postgresql: install the PostgreSQL client "
            "binaries of the server's major version (or newer)"
        )
    return candidates[0]


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """``url`` as a libpq connection URI (the password passed in PGPASSWORD, not argv)."""
    parsed = make_url(url)
    env = {**os.environ}
    if parsed.password is not None:
        env["PGPASSWORD"] = str(parsed.password)
    plain = parsed.set(drivername="postgresql", password=None)
    return plain.render_as_string(hide_password=False), env


def _kind(url: str) -> str:
    try:
        backend = make_url(url).get_backend_name()
    except (ArgumentError, ValueError):
        backend = "unparsable"
    if backend not in {"sqlite", "postgresql"}:
        raise BackupError(f"database {masked_url(url)}: backups cover sqlite and postgresql only")
    return backend


def _hash_copy(source: Path, target: Path) -> tuple[int, str]:
    """Copy ``source`` to ``target`` (created 0600, fsynced); (size, sha256:hex)."""
    digest = hashlib.sha256()
    size = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with source.open("rb") as src, os.fdopen(fd, "wb") as out:
            while chunk := src.read(READ_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        target.unlink(missing_ok=True)  # ours: made above with O_EXCL
        raise
    return size, f"sha256:{digest.hexdigest()}"


def _file_digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(READ_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, f"sha256:{digest.hexdigest()}"


def _empty_or_absent(path: Path, what: str) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BackupError(f"{what} {path} is not empty: nothing was written")


def _blob_files(root: Path) -> Iterator[tuple[str, Path]]:
    top = root / "sha256"
    if not top.is_dir():
        return
    for shard in sorted(top.iterdir()):
        if not shard.is_dir():
            continue
        for entry in sorted(shard.iterdir()):
            if len(entry.name) == 64 and set(entry.name) <= HEX:
                yield f"sha256:{entry.name}", entry


def _file_blob_root(url: str) -> Path | None:
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


# -- backup --------------------------------------------------------------------------------
def backup(settings: Settings, dest: Path) -> BackupSummary:
    """Take a backup of the registry ``settings`` name into ``dest`` (new or empty), while
    it serves. Raises BackupError."""
    _empty_or_absent(dest, "backup directory")
    url = settings.resolved_database_url()
    kind = _kind(url)
    key = _backup_key(settings)
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    files: dict[str, dict[str, Any]] = {}

    def record(name: str, size: int, digest: str) -> None:
        files[name] = {"size": size, "sha256": digest}

    # (1) the database: one consistent snapshot, first
    if kind == "sqlite":
        revision = _sqlite_backup(url, dest / "registry.db")
        record("registry.db", *_file_digest(dest / "registry.db"))
    else:
        revision = _pg_dump(url, dest / "database.pgdump")
        record("database.pgdump", *_file_digest(dest / "database.pgdump"))
    # (2) blobs, after the snapshot (module doc)
    store = settings.resolved_blob_store()
    blob_root = _file_blob_root(store)
    blobs = 0
    if blob_root is not None:
        for digest, path in _blob_files(blob_root):
            name = f"blobs/sha256/{digest[7:9]}/{digest[7:]}"
            try:
                size, actual = _hash_copy(path, dest / name)
            except FileNotFoundError:  # collected meanwhile: not named by the snapshot
                continue
            if actual != digest:
                raise BackupError(f"blob {path} holds {actual}, not the bytes its name says")
            record(name, size, actual)
            blobs += 1
    # (3) the secrets the registry signs and seals with
    keys_dir = settings.resolved_tuf_keys_dir()
    if keys_dir.is_dir():
        for path in sorted(keys_dir.iterdir()):
            if path.is_file():
                record(f"tuf-keys/{path.name}", *_hash_copy(path, dest / "tuf-keys" / path.name))
    checkpoint_key = settings.resolved_audit_checkpoint_key()
    if checkpoint_key.is_file():
        record("audit-checkpoint.key", *_hash_copy(checkpoint_key, dest / "audit-checkpoint.key"))
    manifest = {
        "format": FORMAT,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "modelward_version": __version__,
        "schema_revision": revision,
        "database": kind,
        "blob_store": "copied" if blob_root is not None else store,
        "files": files,
    }
    manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
    (dest / MANIFEST).write_bytes(manifest_bytes)
    (dest / MAC_FILE).write_bytes(sign_manifest(manifest_bytes, key))
    return BackupSummary(
        dest,
        kind,
        revision,
        len(files),
        sum(int(f["size"]) for f in files.values()),
        blobs,
        str(manifest["blob_store"]),
    )


def _sqlite_backup(url: str, target: Path) -> str:
    path = sqlite_file(url)
    if path is None or not path.is_file():
        raise BackupError(f"no SQLite database at {path or masked_url(url)}")
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
    copy = sqlite3.connect(target)
    try:
        source.backup(copy)  # every page at once: one read transaction, a consistent copy
        row = copy.execute("SELECT version_num FROM alembic_version").fetchone()
        copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
    except sqlite3.Error as exc:
        raise BackupError(f"SQLite backup of {path} failed: {exc}") from exc
    finally:
        copy.close()
        source.close()
    target.chmod(0o600)
    if row is None:
        raise BackupError(f"{path} has no schema revision: not a registry database")
    return str(row[0])


def _pg_dump(url: str, target: Path) -> str:
    engine = make_engine(url)
    try:
        revision = current_revision(engine)
    finally:
        engine.dispose()
    if revision is None:
        raise BackupError("the PostgreSQL database has no schema revision: not a registry's")
    conninfo, env = _libpq(url)
    done = subprocess.run(
        [str(pg_binary("pg_dump")), "--format=custom", "--file", str(target), conninfo],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise BackupError(f"pg_dump failed ({done.returncode}): {done.stderr.strip()}")
    target.chmod(0o600)
    return revision


def _backup_key(settings: Settings) -> bytes:
    try:
        return load_backup_key(settings.backup_key)
    except BackupKeyError as exc:
        raise BackupError(str(exc)) from exc


# -- restore -------------------------------------------------------------------------------
def _read_manifest(src: Path, key: bytes) -> dict[str, Any]:
    path = src / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BackupError(f"{path} does not exist: {src} is not a modelward backup") from None
    except OSError as exc:
        raise BackupError(f"{path} is not a backup manifest: {exc}") from exc
    try:
        verify_manifest(src, raw, key)  # the bytes read, before they are parsed
    except BackupMacError as exc:
        raise BackupError(str(exc)) from exc
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise BackupError(f"{path} is not a backup manifest: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path}: format is not {FORMAT}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BackupError(f"{path} lists no files")
    for name, entry in files.items():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise BackupError(f"{path} names a file outside the backup: {name!r}")
        file = src / name
        try:
            size, digest = _file_digest(file)
        except OSError as exc:
            raise BackupError(f"{file} (listed in {path}): {exc}") from exc
        if (size, digest) != (entry.get("size"), entry.get("sha256")):
            raise BackupError(
                f"{file}: {size} bytes, {digest}; the manifest says {entry.get('size')} "
                f"bytes, {entry.get('sha256')}: the backup is damaged, nothing was written"
            )
    return manifest


def restore(
    src: Path,
    settings: Settings,
    *,
    published: Path | None = None,
    unsafe_without_published: bool = False,
    accept_quarantine_changes: bool = False,
) -> BackupSummary:
    """Restore the backup in ``src`` into the registry ``settings`` name, which must be
    empty. ``published``: the metadata the registry published (its mirror; default the
    target's ``tuf_metadata_dir`` when it holds a timestamp), whose versions the restored
    registry will not use again and whose quarantines it will not change unless
    ``accept_quarantine_changes``; without it the restore is refused unless
    ``unsafe_without_published``. Every check of the backup and the target runs before
    anything is written; a refusal after the database is written takes back everything.
    Raises BackupError."""
    # (1) the backup: the manifest's MAC, every file's size and digest, a known revision
    manifest = _read_manifest(src, _backup_key(settings))
    revision = str(manifest.get("schema_revision"))
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    try:
        known = script.get_revision(revision) is not None
    except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown id
        known = False
    if not known:
        raise BackupError(
            f"the backup's schema revision {revision} is unknown to this modelward "
            f"({__version__}): restore it with the modelward that took it"
        )
    url, kind = _check_target(manifest, settings)
    try:
        directory = published_dir(settings, published, unsafe=unsafe_without_published)
    except PublishedStateError as exc:
        raise BackupError(f"{exc}; nothing was written") from exc
    return _write(
        src, manifest, settings, url, kind, published=(directory, accept_quarantine_changes)
    )


def _check_target(manifest: dict[str, Any], settings: Settings) -> tuple[str, str]:
    """(2) the target: the same kind of database, everything empty."""
    url = settings.resolved_database_url()
    kind = _kind(url)
    if manifest.get("database") != kind:
        raise BackupError(
            f"the backup holds a {manifest.get('database')} database, the target "
            f"{masked_url(url)} is {kind}"
        )
    keys_dir = settings.resolved_tuf_keys_dir()
    checkpoint_key = settings.resolved_audit_checkpoint_key()
    blob_root = _file_blob_root(settings.resolved_blob_store())
    if manifest.get("blob_store") == "copied" and blob_root is None:
        raise BackupError(
            "the backup holds the blobs of a file store; the target's blob store is "
            f"{settings.resolved_blob_store()}: restore into a file:// store"
        )
    _empty_or_absent(settings.data_dir.resolve(), "data directory")
    _empty_or_absent(keys_dir, "TUF keys directory")
    if checkpoint_key.exists():
        raise BackupError(f"audit checkpoint key {checkpoint_key} exists: nothing was written")
    if blob_root is not None:
        _empty_or_absent(blob_root / "sha256", "blob directory")
    if kind == "sqlite":
        db_file = sqlite_file(url)
        if db_file is not None and db_file.exists():
            raise BackupError(f"database {db_file} exists: nothing was written")
    else:
        engine = make_engine(url)
        try:
            state = schema_state(engine)
        finally:
            engine.dispose()
        if state != "empty":
            raise BackupError(
                f"the database {masked_url(url)} is not "
                "empty: restore into a new database; nothing was written"
            )
    return url, kind


def _write(
    src: Path,
    manifest: dict[str, Any],
    settings: Settings,
    url: str,
    kind: str,
    *,
    published: tuple[Path | None, bool],
) -> BackupSummary:
    """(3) write: the files, then the database (pg_restore in one transaction); (4) guard
    what the registry published. A failure takes back everything written."""
    revision = str(manifest.get("schema_revision"))
    keys_dir = settings.resolved_tuf_keys_dir()
    checkpoint_key = settings.resolved_audit_checkpoint_key()
    blob_root = _file_blob_root(settings.resolved_blob_store())
    files: dict[str, dict[str, Any]] = manifest["files"]
    targets: dict[str, Path] = {}
    for name in files:
        if name.startswith("blobs/") and blob_root is not None:
            targets[name] = blob_root / name.removeprefix("blobs/")
        elif name.startswith("tuf-keys/"):
            targets[name] = keys_dir / name.removeprefix("tuf-keys/")
        elif name == "audit-checkpoint.key":
            targets[name] = checkpoint_key
        elif name == "registry.db":
            db_file = sqlite_file(url)
            if db_file is None:
                raise BackupError(f"database {masked_url(url)} is not a SQLite file")
            targets[name] = db_file
    roots = [settings.data_dir.resolve(), keys_dir, *([blob_root] if blob_root else [])]
    absent = [root for root in roots if not root.exists()]
    written: list[Path] = []
    restored_pg = False
    try:
        for name, target in targets.items():
            if name.startswith("tuf-keys/"):
                keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            _copy_as_listed(src / name, target, files[name])
            written.append(target)
        if kind == "postgresql":
            _pg_restore(url, src / "database.pgdump")
            restored_pg = True
        guarded = _guarded(url, src, manifest, *published)
    except BaseException:
        for path in written:
            for extra in ("", "-wal", "-shm", "-journal"):
                path.with_name(path.name + extra).unlink(missing_ok=True)
        if restored_pg:
            _drop_restored(url)
        for root in roots:
            _prune_empty(root, remove_root=root in absent)
        raise
    blobs = sum(1 for name in targets if name.startswith("blobs/"))
    return BackupSummary(
        src,
        kind,
        revision,
        len(files),
        sum(int(f["size"]) for f in files.values()),
        blobs,
        str(manifest.get("blob_store")),
        guarded,
    )


def _guarded(
    url: str, src: Path, manifest: dict[str, Any], directory: Path | None, accept: bool
) -> RestoreGuard | None:
    """(4) the restored database against the published metadata."""
    if directory is None:
        return None
    try:
        return guard_restored(
            url,
            directory,
            backup=src,
            created_at=str(manifest.get("created_at")),
            accept_quarantine_changes=accept,
        )
    except PublishedStateError as exc:
        raise BackupError(f"{exc}; nothing was written") from exc


def _drop_restored(url: str) -> None:
    """Take back a pg_restore into a database that was empty: drop every table."""
    engine = make_engine(url)
    try:
        tables = MetaData()
        tables.reflect(engine)
        tables.drop_all(engine)
    except SQLAlchemyError:  # the original error is what the caller raises
        pass
    finally:
        engine.dispose()


def _prune_empty(root: Path, *, remove_root: bool) -> None:
    """Remove the empty directories a failed restore made under ``root`` (only rmdir:
    nothing that holds a file goes)."""
    if not root.is_dir():
        return
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.rmdir()
    if remove_root:
        with contextlib.suppress(OSError):
            root.rmdir()


def _copy_as_listed(source: Path, target: Path, entry: dict[str, Any]) -> None:
    """Copy ``source``; raise BackupError when it no longer holds what the manifest lists
    (changed since it was checked)."""
    if _hash_copy(source, target) != (entry["size"], entry["sha256"]):
        target.unlink()
        raise BackupError(f"{source} changed while it was restored")


def _pg_restore(url: str, dump: Path) -> None:
    conninfo, env = _libpq(url)
    done = subprocess.run(
        [
            str(pg_binary("pg_restore")),
            "--no-owner",
            "--exit-on-error",
            "--single-transaction",
            "--dbname",
            conninfo,
            str(dump),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise BackupError(f"pg_restore failed ({done.returncode}): {done.stderr.strip()}")
