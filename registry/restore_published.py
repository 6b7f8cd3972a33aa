"""What a restore must not undo: the versions and quarantines the registry published after
the backup (docs/operations.md#restoring-an-older-backup).

A restore puts back a database snapshot, but workers saw what the registry published after
it. That lives outside the database: the metadata mirror writes every version it publishes
once, under its own name, and never replaces one (docs/tuf.md#mirrors). Given a directory of
those files (the mirror, or a copy of it), ``guard`` runs on the restored database, before
any server does:

1. ``published_versions``: every role's highest published version (the versioned file
   names, and ``timestamp.json``'s own version).
2. Root: a root published above the backup's is refused (root versions follow one another:
   the backup predates a root rotation; restore one taken after it).
3. The high-water mark: every other role published at H above the backup's newest version
   gets a reserved row at H. The row is not metadata, so the registry passes over it (as
   over any row it refuses, docs/tuf.md) and signs its next version as H + 1: no version
   number it published before is used again. A delegated role more than
   ``MAX_UNVERIFIED`` versions behind is refused (the registry would not walk back that far
   to its current version).
4. Quarantines: the quarantine role as last published against the backup's newest. A
   digest quarantined after the backup (the restore would lift it) or lifted after it (the
   restore would quarantine it again) is listed; the restore is refused unless accepted.

``guard_restored`` runs them in one transaction on the restored database and records
``registry.restored`` in its audit log. Raises ``PublishedStateError`` naming the file, role
or digests; nothing is kept then.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from modelward.attest.tuf import QUARANTINE_ROLE
from modelward.registry.db import make_engine
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.signing.tuf.repository import MAX_UNVERIFIED
from modelward.registry.domains.signing.tuf.store import MAX_VERSION, TIMESTAMP, SessionStore
from modelward.registry.errors import RegistryError
from modelward.registry.settings import Settings

__all__ = [
    "RESTORED_ACTION",
    "PublishedStateError",
    "RestoreGuard",
    "guard",
    "guard_restored",
    "published_dir",
    "published_versions",
]

RESTORED_ACTION = "registry.restored"

_VERSIONED = re.compile(r"([1-9][0-9]{0,18})\.([^/]+)\.json")
_QUARANTINE_PREFIX = "quarantine/"


class PublishedStateError(RegistryError):
    """The restored database would undo what the registry published (the message names the
    role, the digests or the file)."""


@dataclass(frozen=True)
class RestoreGuard:
    reserved: dict[str, int]  # role -> the version reserved (the highest published)
    lifted: tuple[str, ...]  # digests quarantined after the backup: the restore lifts them
    reimposed: tuple[str, ...]  # digests lifted after the backup: quarantined again


def _version_in(path: Path) -> int:
    try:
        version = json.loads(path.read_bytes())["signed"]["version"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PublishedStateError(f"{path} holds no TUF metadata version: {exc}") from exc
    if not isinstance(version, int) or version < 1:
        raise PublishedStateError(f"{path} holds no TUF metadata version")
    return version


def published_versions(directory: Path) -> dict[str, int]:
    """(1) role -> its highest version among the metadata files in ``directory``. Raises
    PublishedStateError when it holds no ``timestamp.json`` or a version past MAX_VERSION."""
    if not (directory / "timestamp.json").is_file():
        raise PublishedStateError(
            f"{directory} holds no timestamp.json: not the metadata a registry published "
            "(its mirror, docs/tuf.md#mirrors)"
        )
    latest = {TIMESTAMP: _version_in(directory / "timestamp.json")}
    for path in directory.iterdir():
        match = _VERSIONED.fullmatch(path.name)
        if match is None or match.group(2) == TIMESTAMP:
            continue
        role, version = match.group(2), int(match.group(1))
        latest[role] = max(version, latest.get(role, 0))
    for role, version in latest.items():
        if version >= MAX_VERSION:
            raise PublishedStateError(
                f"{directory}: {role} version {version} leaves no version to follow it "
                f"(the largest is {MAX_VERSION})"
            )
    return latest


def _quarantined(data: bytes | None, where: str) -> frozenset[str]:
    """The digests a quarantine role's bytes quarantine (targets ``quarantine/<hex>``)."""
    if data is None:
        return frozenset()
    try:
        targets = json.loads(data)["signed"]["targets"]
        return frozenset(
            f"sha256:{name.removeprefix(_QUARANTINE_PREFIX)}"
            for name in targets
            if name.startswith(_QUARANTINE_PREFIX)
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PublishedStateError(f"{where} is not a quarantine role: {exc}") from exc


def guard(session: Session, directory: Path, *, accept_quarantine_changes: bool) -> RestoreGuard:
    """Check the restored database in ``session`` against the metadata published in
    ``directory`` and reserve the published versions in it (the caller commits). Raises
    PublishedStateError."""
    published = published_versions(directory)
    store = SessionStore(session)  # the signing domain's store of the TUF tables
    restored = store.latest_versions()
    # (2) root versions cannot skip: a backup before a root rotation cannot serve
    if published.get("root", 0) > restored.get("root", 0):
        raise PublishedStateError(
            f"the registry published root version {published['root']} ({directory}), the "
            f"backup holds root version {restored.get('root', 0)}: it predates a root "
            "rotation, which a restore cannot undo; restore a backup taken after it"
        )
    # (3) the high-water mark
    reserved: dict[str, int] = {}
    for role, high in sorted(published.items()):
        have = restored.get(role, 0)
        if role == "root" or high <= have:
            continue
        if role not in {TIMESTAMP, "snapshot"} and high - have >= MAX_UNVERIFIED:
            raise PublishedStateError(
                f"role {role}: the registry published version {high}, the backup holds "
                f"{have}: more than {MAX_UNVERIFIED - 1} versions behind; restore a newer backup"
            )
        reserved[role] = high
    # (4) quarantines, when the quarantine role was published after the backup
    lifted: tuple[str, ...] = ()
    reimposed: tuple[str, ...] = ()
    if QUARANTINE_ROLE in reserved:
        high = reserved[QUARANTINE_ROLE]
        name = f"{high}.{QUARANTINE_ROLE}.json"
        path = directory / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PublishedStateError(f"{path}: {exc}") from exc
        now = _quarantined(data, str(path))
        have = restored.get(QUARANTINE_ROLE, 0)
        then = _quarantined(store.read(QUARANTINE_ROLE, have), "the backup's quarantine role")
        lifted, reimposed = tuple(sorted(now - then)), tuple(sorted(then - now))
        if (lifted or reimposed) and not accept_quarantine_changes:
            raise PublishedStateError(
                f"the restore would change quarantines made after the backup (quarantine "
                f"role v{have} in the backup, v{high} published): "
                + "; ".join(
                    [f"lifts {d} (quarantined after the backup)" for d in lifted]
                    + [f"quarantines {d} again (lifted after the backup)" for d in reimposed]
                )
                + ". Pass --accept-quarantine-changes to restore anyway, then quarantine "
                "again what it lifts"
            )
    for role, high in reserved.items():
        marker = {"reserved": {"role": role, "version": high, "by": "modelward admin restore"}}
        store.write(role, high, json.dumps(marker).encode())
    return RestoreGuard(reserved, lifted, reimposed)


def published_dir(settings: Settings, given: Path | None, *, unsafe: bool) -> Path | None:
    """Where the published metadata is: ``given``, else the target's ``tuf_metadata_dir``
    when it holds a timestamp; checked now (``published_versions``). None only when
    ``unsafe``. Raises PublishedStateError."""
    mirror = settings.resolved_tuf_metadata_dir()
    directory = given or (mirror if (mirror / "timestamp.json").is_file() else None)
    if directory is None:
        if unsafe:
            return None
        raise PublishedStateError(
            "cannot tell which TUF versions the registry published after this backup: pass "
            "--published-metadata DIR, its metadata mirror (tuf_metadata_dir, by default "
            "<data_dir>/mirror/tuf of the registry backed up; docs/tuf.md#mirrors), or "
            "--unsafe-without-published-metadata to restore without its high-water mark "
            "(the restored registry may then publish version numbers it published before)"
        )
    published_versions(directory)
    return directory


def guard_restored(
    url: str,
    directory: Path,
    *,
    backup: Path,
    created_at: str,
    accept_quarantine_changes: bool,
) -> RestoreGuard:
    """``guard`` on the restored database at ``url``, recorded in its audit log, in one
    transaction. Raises PublishedStateError."""
    engine = make_engine(url)
    try:
        with Session(engine) as session, session.begin():
            guarded = guard(session, directory, accept_quarantine_changes=accept_quarantine_changes)
            append(
                session,
                actor="admin:restore",
                action=RESTORED_ACTION,
                subject="registry",
                details={
                    "backup": str(backup.resolve()),
                    "backup_created_at": created_at,
                    "published_metadata": str(directory.resolve()),
                    "reserved_versions": guarded.reserved,
                    "quarantines_lifted": list(guarded.lifted),
                    "quarantines_reimposed": list(guarded.reimposed),
                },
            )
        return guarded
    finally:
        engine.dispose()
