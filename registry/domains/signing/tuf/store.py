"""Where the TUF metadata files are kept: the ``MetadataStore`` interface and a directory.

Files are named as a TUF client fetches them with consistent snapshots: ``timestamp.json``
and ``VERSION.ROLE.json`` for every other role (``tuf.ngclient`` URL-quotes the role name; a
server decodes it back, so the file is named with the role name itself, which holds no
``/``: ``attest.tuf``). A directory laid out this way can be served by any static file
server, S3 bucket or CDN with the registry out of the path (docs/tuf.md#serving).
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from modelward.attest._fileio import write_output
from modelward.registry.errors import RegistryError
from modelward.registry.kit.logs import log_failure

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.orm import Session

__all__ = [
    "MAX_VERSION",
    "CommitListener",
    "DirectoryStore",
    "MetadataRowRefused",
    "MetadataStore",
    "SessionStore",
    "add_commit_listener",
    "beyond_refusal",
    "committed_writes",
    "export_metadata",
    "file_name",
    "parse_file_name",
]

TIMESTAMP = "timestamp"
_VERSIONED = re.compile(r"([1-9][0-9]{0,17})\.(.+)\.json")
# The largest version: what a file name carries (18 digits), below the 64-bit columns'
# 2**63 - 1. A stored row past it is no version at all (a database writer's row): every read
# of "the latest version" passes over it, and ``beyond_versions`` names it (``trust
# status``: refused). A role at MAX_VERSION has no next version: the publish is refused.
MAX_VERSION = 10**18 - 1
_WRITTEN = "modelward.tuf_written"
_commits = itertools.count(1)
_commits_seen = 0
_commits_lock = threading.Lock()
CommitListener = Callable[["Session"], None]
_listeners: list[CommitListener] = []
log = logging.getLogger("modelward.registry")


def committed_writes() -> int:
    """How many transactions of this process that wrote TUF metadata (``SessionStore``)
    have committed: a cache of the served files re-reads when this changes."""
    return _commits_seen


def _count_commit(session: Session) -> None:
    global _commits_seen  # noqa: PLW0603 - one counter per process, bumped after commit
    session.info.pop(_WRITTEN, None)
    with _commits_lock:
        _commits_seen = next(_commits)
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(session)
        except Exception as exc:  # noqa: BLE001 - the commit happened; a listener never undoes it
            # the type names it; no payload in logs
            log_failure(log, "tuf_commit_listener_failed", exc, message=None)


def add_commit_listener(listener: CommitListener) -> Callable[[], None]:
    """Call ``listener(session)`` after every commit of this process that wrote TUF metadata
    (the metadata mirror: ``mirror_files.MetadataMirror.on_commit``), in the committing
    thread, after the database commit; what it raises is logged, never the commit's failure.
    Returns the function that removes it."""
    with _commits_lock:
        _listeners.append(listener)

    def remove() -> None:
        with _commits_lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return remove


class MetadataRowRefused(RegistryError):  # noqa: N818 - named after what it says
    """A stored ``tuf_metadata`` row the registry will not build on, serve as current or
    show as signed: it does not parse, its signatures do not meet its delegation, or its
    version leaves none to follow it (a database writer's garbage or forgery). The registry
    passes over it and signs the next version over it; it is named in ``trust status``.
    (Re-exported by ``registry.domains.signing.tuf.repository``, which decides most of them.)"""

    status = 503
    code = "tuf_metadata_refused"

    def __init__(self, role: str, version: int, why: str) -> None:
        super().__init__(
            f"TUF metadata {role} v{version} refused: {why}",
            detail={"role": role, "version": version, "why": why},
        )
        self.role, self.version, self.why = role, version, why


def beyond_refusal(role: str, version: int) -> MetadataRowRefused:
    """The refusal of a stored row that no next version can follow (at or past
    ``MAX_VERSION``)."""
    return MetadataRowRefused(
        role, version, f"no version can follow it (the largest is {MAX_VERSION})"
    )


def file_name(role: str, version: int) -> str:
    """The file a TUF client fetches for ``role`` at ``version`` (consistent snapshots).
    Raises ``MetadataRowRefused`` (naming the row it would follow) past ``MAX_VERSION``."""
    if "/" in role or role in ("", ".", ".."):
        raise ValueError(f"not a TUF role name: {role!r}")
    if version > MAX_VERSION:
        raise beyond_refusal(role, version - 1)
    if role == TIMESTAMP:
        return "timestamp.json"
    return f"{version}.{role}.json"


def parse_file_name(name: str) -> tuple[str, int | None] | None:
    """(role, version) of a metadata file name (``timestamp.json``: the latest), or None."""
    if name == "timestamp.json":
        return TIMESTAMP, None
    match = _VERSIONED.fullmatch(name)
    if match is None or match.group(2) == TIMESTAMP:
        return None
    return match.group(2), int(match.group(1))


class MetadataStore(Protocol):
    """Keeps every version of every role's metadata, byte for byte."""

    def read(self, role: str, version: int | None = None) -> bytes | None:
        """``role``'s metadata at ``version`` (the latest if None), or None if absent."""
        ...

    def write(self, role: str, version: int, data: bytes, *, replace: bool = False) -> None:
        """Keep ``data`` as ``role`` at ``version``; it becomes the latest. ``replace``: in
        place of a stored row at that version (one that does not verify)."""
        ...

    def latest_versions(self) -> dict[str, int]:
        """The latest version of every role kept (timestamp included)."""
        ...

    def latest_rows(self, prefix: str | None = None) -> dict[str, tuple[int, bytes]]:
        """Every role's latest version and its bytes, read together (``prefix``: only the
        roles whose names start with it, and top-level targets)."""
        ...


class DirectoryStore:
    """A ``MetadataStore`` in a directory, written atomically (temp file + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def read(self, role: str, version: int | None = None) -> bytes | None:
        if version is None:
            version = self.latest_versions().get(role)
            if version is None:
                return None
        path = self.root / file_name(role, version)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def write(self, role: str, version: int, data: bytes, *, replace: bool = False) -> None:
        write_output(self.root / file_name(role, version), data)
        if role == TIMESTAMP:
            (self.root / ".timestamp-version").write_text(str(version))

    def latest_versions(self) -> dict[str, int]:
        latest: dict[str, int] = {}
        for path in self.root.iterdir():
            match = _VERSIONED.fullmatch(path.name)
            if match is None:
                continue
            role, version = match.group(2), int(match.group(1))
            if version <= MAX_VERSION:
                latest[role] = max(version, latest.get(role, 0))
        marker = self.root / ".timestamp-version"
        if marker.exists():
            latest[TIMESTAMP] = int(marker.read_text())
        return latest

    def latest_rows(self, prefix: str | None = None) -> dict[str, tuple[int, bytes]]:
        rows = {}
        for role, version in self.latest_versions().items():
            if prefix is not None and not role.startswith(prefix) and role != "targets":
                continue
            data = self.read(role, version)
            if data is not None:
                rows[role] = (version, data)
        return rows


class SessionStore:
    """A ``MetadataStore`` in the registry's database (table ``tuf_metadata``), inside the
    caller's transaction: a new role version, snapshot and timestamp commit together with
    the decision they record, or not at all."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def read(self, role: str, version: int | None = None) -> bytes | None:
        from sqlalchemy import select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        query = select(TufMetadata.data).where(TufMetadata.role == role)
        if version is None:
            query = query.where(TufMetadata.version <= MAX_VERSION)
            query = query.order_by(TufMetadata.version.desc()).limit(1)
        else:
            query = query.where(TufMetadata.version == version)
        return self.session.scalars(query).first()

    def write(self, role: str, version: int, data: bytes, *, replace: bool = False) -> None:
        from sqlalchemy import delete, event

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        file_name(role, version)  # refuses a role name that cannot be a file name
        if not self.session.info.get(_WRITTEN):
            self.session.info[_WRITTEN] = True
            event.listen(self.session, "after_commit", _count_commit, once=True)
        if replace:
            self.session.execute(
                delete(TufMetadata).where(TufMetadata.role == role, TufMetadata.version == version)
            )
        self.session.add(TufMetadata(role=role, version=version, data=data))
        self.session.flush()

    def latest_version(self, role: str) -> int | None:
        """``role``'s newest stored version (one indexed lookup), or None."""
        from sqlalchemy import func, select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        found = self.session.scalar(
            select(func.max(TufMetadata.version)).where(
                TufMetadata.role == role, TufMetadata.version <= MAX_VERSION
            )
        )
        return None if found is None else int(found)

    def latest_versions(self) -> dict[str, int]:
        from sqlalchemy import func, select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        rows = self.session.execute(
            select(TufMetadata.role, func.max(TufMetadata.version))
            .where(TufMetadata.version <= MAX_VERSION)
            .group_by(TufMetadata.role)
        )
        return {role: int(version) for role, version in rows}

    def beyond_versions(self) -> dict[str, int]:
        """Rows no next version can follow (``MAX_VERSION`` or past it): role -> the newest
        such version. Passed over by every other read; ``trust status`` names them."""
        from sqlalchemy import func, select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        rows = self.session.execute(
            select(TufMetadata.role, func.max(TufMetadata.version))
            .where(TufMetadata.version > MAX_VERSION)
            .group_by(TufMetadata.role)
        )
        return {role: int(version) for role, version in rows}

    def versions_up_to(self, role: str, version: int) -> list[bytes]:
        """Every stored version of ``role`` up to ``version``, oldest first."""
        from sqlalchemy import select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        rows = self.session.scalars(
            select(TufMetadata.data)
            .where(TufMetadata.role == role, TufMetadata.version <= version)
            .order_by(TufMetadata.version)
        )
        return [bytes(data) for data in rows]

    def newest_versions(self, prefix: str, *, also: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
        """(role, newest stored version) of every role named ``prefix...`` or in ``also``,
        by role: what a signed answer about those roles was read from."""
        from sqlalchemy import func, or_, select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        rows = self.session.execute(
            select(TufMetadata.role, func.max(TufMetadata.version))
            .where(
                or_(
                    TufMetadata.role.startswith(prefix, autoescape=True), TufMetadata.role.in_(also)
                )
            )
            .group_by(TufMetadata.role)
            .order_by(TufMetadata.role)
        )
        return tuple((str(role), int(version)) for role, version in rows)

    def newest_rows(self, limit: int) -> list[tuple[str, bytes]]:
        """(role, bytes of its newest stored version) for the first ``limit`` roles by name."""
        from sqlalchemy import func, select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        latest = (
            select(TufMetadata.role, func.max(TufMetadata.version).label("version"))
            .group_by(TufMetadata.role)
            .order_by(TufMetadata.role)
            .limit(limit)
            .subquery()
        )
        rows = self.session.execute(
            select(TufMetadata.role, TufMetadata.data)
            .join(
                latest,
                (TufMetadata.role == latest.c.role) & (TufMetadata.version == latest.c.version),
            )
            .order_by(TufMetadata.role)
        )
        return [(str(role), bytes(data)) for role, data in rows]

    def history(self, prefix: str) -> list[tuple[str, int, bytes, datetime]]:
        """Every stored version of every role named ``prefix...``: (role, version, bytes,
        when it was stored), by role and version."""
        from sqlalchemy import select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        rows = self.session.execute(
            select(TufMetadata.role, TufMetadata.version, TufMetadata.data, TufMetadata.created_at)
            .where(TufMetadata.role.startswith(prefix, autoescape=True))
            .order_by(TufMetadata.role, TufMetadata.version)
        )
        return [(str(r), int(v), bytes(d), at) for r, v, d, at in rows]

    def latest_rows(self, prefix: str | None = None) -> dict[str, tuple[int, bytes]]:
        from sqlalchemy import func, or_, select

        from modelward.registry.domains.signing.tuf.tables import TufMetadata

        query = select(TufMetadata.role, func.max(TufMetadata.version).label("v")).where(
            TufMetadata.version <= MAX_VERSION
        )
        if prefix is not None:
            query = query.where(
                or_(
                    TufMetadata.role.startswith(prefix, autoescape=True),
                    TufMetadata.role == "targets",
                )
            )
        latest = query.group_by(TufMetadata.role).subquery()
        rows = self.session.execute(
            select(TufMetadata.role, TufMetadata.version, TufMetadata.data).join(
                latest,
                (TufMetadata.role == latest.c.role) & (TufMetadata.version == latest.c.v),
            )
        )
        return {role: (int(version), bytes(data)) for role, version, data in rows}


def export_metadata(source: MetadataStore, target: MetadataStore) -> int:
    """Copy every version of every role from ``source`` to ``target`` (e.g. the database to
    a directory a CDN serves); versions ``target`` already has are skipped. Returns how
    many files were written. The timestamp goes last, so a reader of ``target`` never sees
    a timestamp naming a snapshot that is not there yet."""
    have = target.latest_versions()
    written = 0
    latest = source.latest_versions()
    for role in sorted(latest, key=lambda r: r == TIMESTAMP):
        first = 1 if role == TIMESTAMP else have.get(role, 0) + 1
        versions = [latest[role]] if role == TIMESTAMP else range(first, latest[role] + 1)
        for version in versions:
            data = source.read(role, version)
            if data is not None:
                target.write(role, version, data)
                written += 1
    return written
