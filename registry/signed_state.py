"""The registry's signed TUF state across schema downgrades (docs/operations.md#downgrade).

Revisions 0009 (``tuf_metadata``, ``tuf_proposals``) and 0010 (row seals) hold state no
migration can make again: every signed metadata version a pinned worker followed, and the
registry's seals over the rows it delegates from. A downgrade below them drops it; an
upgrade afterwards would start an empty table, and the embedded bootstrap would sign a new
root version 1 that no pinned worker follows. So:

1. ``db downgrade`` below 0010 on a database holding metadata refuses unless told to destroy
   the signed state and given a directory to export it to (``export_signed_state``): every
   stored version of every role and every row seal, with a manifest of their digests. It
   records ``tuf.signed_state.exported`` in the audit log (which 0005 keeps) before the
   tables go.
2. ``bootstrap_embedded`` refuses to create root version 1 when the audit log records any
   earlier TUF event (registry.domains.signing.tuf.lost_state): the registry published before.
3. ``db import-signed-state DIR`` (``import_signed_state``) puts the export back after the
   upgrade: digests checked against the manifest, the root chain and the top-level roles
   verified, in one transaction into an empty ``tuf_metadata``; seals are put back on the
   rows that have none, and only a seal that still verifies over its row counts (a row
   changed meanwhile is not delegated from: registry.domains.signing.tuf.seals).

Pending proposals are not exported: a move that was waiting for signatures is proposed
again (``modelward trust adopt``).

Errors: ``SignedStateError`` (a ``RegistryError``) names the file, row or event at fault.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session
from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Metadata, Root, Snapshot, Targets, Timestamp

from modelward.attest._fileio import write_output
from modelward.registry.db import alembic_config, current_revision
from modelward.registry.domains.signing.tuf.lost_state import (
    EXPORTED_ACTION,
    IMPORTED_ACTION,
    SignedStateError,
)
from modelward.registry.domains.signing.tuf.tables import TufMetadata

__all__ = [
    "EXPORTED_ACTION",
    "IMPORTED_ACTION",
    "SIGNED_STATE_REVISION",
    "ExportSummary",
    "SignedStateError",
    "downgrade_crosses",
    "downgrade_drops_signed_state",
    "export_signed_state",
    "import_signed_state",
]

SIGNED_STATE_REVISION = "0009"  # the first revision holding signed state; 0010 adds seals
SEALS_REVISION = "0010"
MANIFEST = "signed-state.json"
FORMAT = "modelward-signed-state/1"
SEAL_TABLES = {
    "principals": ("id",),
    "signing_keys": ("keyid",),
    "repositories": ("id",),
    "repo_publishers": ("repo_id", "principal_id"),
}


@dataclass(frozen=True)
class ExportSummary:
    directory: Path
    files: int
    root_version: int
    timestamp_version: int


# -- (1) the downgrade ---------------------------------------------------------------------
def _target(script: ScriptDirectory, current: str, target: str) -> str | None:
    """``target`` as an absolute revision (None: base); raises SignedStateError."""
    if target == "base":
        return None
    if target.startswith("-") and target[1:].isdigit():
        at: str | None = current
        for _ in range(int(target[1:])):
            revision = script.get_revision(at) if at is not None else None
            at = None if revision is None else _down(revision.down_revision)
        return at
    revision = script.get_revision(target)
    if revision is None:
        raise SignedStateError(f"unknown schema revision {target!r}")
    return revision.revision


def _down(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise SignedStateError("migrations/ branches: cannot tell what a downgrade drops")


def downgrade_crosses(engine: Engine, target: str) -> frozenset[str]:
    """The revisions a downgrade of ``engine``'s database to ``target`` would undo (empty:
    an empty database, or ``target`` is where it is). Raises SignedStateError (an unknown
    revision)."""
    current = current_revision(engine)
    if current is None:
        return frozenset()
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    goal = _target(script, current, target)
    undone: set[str] = set()
    at: str | None = current
    while at is not None and at != goal:
        undone.add(at)
        revision = script.get_revision(at)
        at = None if revision is None else _down(revision.down_revision)
    return frozenset(undone)


def downgrade_drops_signed_state(engine: Engine, target: str) -> int:
    """How many signed metadata rows a downgrade of ``engine``'s database to ``target``
    would drop (0: none, or the downgrade stays at or above 0010)."""
    if "tuf_metadata" not in inspect(engine).get_table_names():
        return 0
    if not downgrade_crosses(engine, target) & {SEALS_REVISION, SIGNED_STATE_REVISION}:
        return 0
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM tuf_metadata")).scalar_one())


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def export_signed_state(session: Session, directory: Path, *, actor: str) -> ExportSummary:
    """Write every stored metadata version and every row seal into ``directory`` (absent or
    empty), read each file back against its digest, then record the export in the audit
    log in ``session``'s transaction. Raises SignedStateError."""
    from modelward.registry.domains.audit.service import append

    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise SignedStateError(
            f"{directory} is not an empty directory: the export is written only into a new "
            "or empty one (nothing was changed)"
        )
    rows = session.execute(
        select(TufMetadata.role, TufMetadata.version, TufMetadata.data).order_by(
            TufMetadata.role, TufMetadata.version
        )
    ).all()
    if not rows:
        raise SignedStateError("the database holds no TUF metadata: there is nothing to export")
    metadata_dir = directory / "metadata"
    metadata_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    latest: dict[str, int] = {}
    for role, version, data in rows:
        name = f"{int(version)}.{role}.json"
        write_output(metadata_dir / name, bytes(data))
        files[f"metadata/{name}"] = _sha256(bytes(data))
        latest[role] = max(int(version), latest.get(role, 0))
    seals: dict[str, list[dict[str, Any]]] = {}
    for table, keys in SEAL_TABLES.items():
        columns = ", ".join((*keys, "seal"))
        found = session.execute(
            text(f"SELECT {columns} FROM {table} WHERE seal IS NOT NULL")  # noqa: S608 - fixed names
        ).all()
        seals[table] = [dict(zip((*keys, "seal"), row, strict=True)) for row in found]
    seal_bytes = json.dumps(seals, sort_keys=True, indent=1).encode()
    write_output(directory / "seals.json", seal_bytes)
    files["seals.json"] = _sha256(seal_bytes)
    for name, digest in files.items():  # read back: the export is what the tables held
        if _sha256((directory / name).read_bytes()) != digest:
            raise SignedStateError(f"{directory / name} does not read back as written")
    summary = ExportSummary(
        directory, len(files), latest.get("root", 0), latest.get("timestamp", 0)
    )
    manifest = {
        "format": FORMAT,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "schema_revision": current_revision_of(session),
        "root_version": summary.root_version,
        "timestamp_version": summary.timestamp_version,
        "files": files,
    }
    write_output(directory / MANIFEST, json.dumps(manifest, sort_keys=True, indent=1).encode())
    append(
        session,
        actor=actor,
        action=EXPORTED_ACTION,
        subject="tuf",
        details={
            "directory": str(directory.resolve()),
            "root_version": summary.root_version,
            "timestamp_version": summary.timestamp_version,
            "files": len(files),
        },
    )
    return summary


def current_revision_of(session: Session) -> str | None:
    value = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return None if value is None else str(value)


# -- (3) the import ------------------------------------------------------------------------
def _load_export(directory: Path) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The export's files, each checked against the manifest (nothing else is read)."""
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise SignedStateError(
            f"{path} does not exist: {directory} is not an export of `db downgrade "
            "--destroy-signed-state --export-to DIR`"
        ) from None
    except (OSError, ValueError) as exc:
        raise SignedStateError(f"{path} is not a signed-state manifest: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SignedStateError(f"{path}: format is not {FORMAT}")
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not listed:
        raise SignedStateError(f"{path} lists no files")
    files: dict[str, bytes] = {}
    for name, digest in sorted(listed.items()):
        if not isinstance(name, str) or Path(name).is_absolute() or ".." in Path(name).parts:
            raise SignedStateError(f"{path} names a file outside the export: {name!r}")
        try:
            data = (directory / name).read_bytes()
        except OSError as exc:
            raise SignedStateError(f"{directory / name} (listed in {path}): {exc}") from exc
        if _sha256(data) != digest:
            raise SignedStateError(
                f"{directory / name}: digest {_sha256(data)}, the manifest says {digest}"
            )
        files[name] = data
    return files, manifest


def _verify_metadata(rows: dict[tuple[str, int], bytes]) -> None:
    """(1) the root chain from version 1, each root signed by its predecessor's keys and
    its own; (2) the latest timestamp, its snapshot and top-level targets, each signed by
    the latest root's keys for its role."""
    roots = sorted(v for role, v in rows if role == "root")
    if not roots or roots != list(range(1, roots[-1] + 1)):
        raise SignedStateError(f"the export's root versions are not 1..N: {roots}")
    trusted: Metadata[Root] | None = None
    for version in roots:
        try:
            root = Metadata[Root].from_bytes(rows["root", version])
            if trusted is not None:
                trusted.verify_delegate(Root.type, root)
            root.verify_delegate(Root.type, root)
        except (RepositoryError, ValueError, TypeError, KeyError) as exc:
            raise SignedStateError(f"{version}.root.json does not verify: {exc}") from exc
        if root.signed.version != version:
            raise SignedStateError(f"{version}.root.json holds version {root.signed.version}")
        trusted = root
    if trusted is None:  # pragma: no cover - roots is not empty
        raise SignedStateError("the export holds no root")
    for role, cls in (("timestamp", Timestamp), ("snapshot", Snapshot), ("targets", Targets)):
        versions = sorted(v for r, v in rows if r == role)
        if not versions:
            raise SignedStateError(f"the export holds no {role} metadata")
        try:
            latest = Metadata[cls].from_bytes(rows[role, versions[-1]])  # type: ignore[valid-type]
            trusted.verify_delegate(role, latest)
        except (RepositoryError, ValueError, TypeError, KeyError) as exc:
            raise SignedStateError(
                f"{versions[-1]}.{role}.json does not verify with root version "
                f"{trusted.signed.version}: {exc}"
            ) from exc


def import_signed_state(session: Session, directory: Path, *, actor: str) -> ExportSummary:
    """Put an export back into ``session``'s database (an empty ``tuf_metadata``) in its
    transaction, after every check passed; audited as ``tuf.signed_state.imported``.
    Raises SignedStateError."""
    from modelward.registry.domains.audit.service import append

    files, manifest = _load_export(directory)
    rows: dict[tuple[str, int], bytes] = {}
    for name, data in files.items():
        if not name.startswith("metadata/"):
            continue
        stem = name.removeprefix("metadata/").removesuffix(".json")
        number, _, role = stem.partition(".")
        if not number.isdigit() or not role:
            raise SignedStateError(f"{directory / name}: not VERSION.ROLE.json")
        rows[role, int(number)] = data
    _verify_metadata(rows)
    have = session.execute(text("SELECT count(*) FROM tuf_metadata")).scalar_one()
    if have:
        raise SignedStateError(
            f"the database already holds {have} TUF metadata row(s): an export is imported "
            "only into a registry that has none (nothing was changed)"
        )
    for (role, version), data in sorted(rows.items()):
        session.add(TufMetadata(role=role, version=version, data=data))
    seals = json.loads(files.get("seals.json", b"{}"))
    restored = 0
    for table, keys in SEAL_TABLES.items():
        for row in seals.get(table, []):
            where = " AND ".join(f"{k} = :{k}" for k in keys)
            result = session.execute(
                text(f"UPDATE {table} SET seal = :seal WHERE seal IS NULL AND {where}"),  # noqa: S608 - fixed names
                {k: row[k] for k in (*keys, "seal")},
            )
            restored += int(getattr(result, "rowcount", 0) or 0)
    session.flush()
    summary = ExportSummary(
        directory,
        len(files),
        max(v for r, v in rows if r == "root"),
        max(v for r, v in rows if r == "timestamp"),
    )
    append(
        session,
        actor=actor,
        action=IMPORTED_ACTION,
        subject="tuf",
        details={
            "directory": str(directory.resolve()),
            "exported_at": str(manifest.get("exported_at")),
            "root_version": summary.root_version,
            "timestamp_version": summary.timestamp_version,
            "metadata_rows": len(rows),
            "seals_restored": restored,
        },
    )
    return summary
