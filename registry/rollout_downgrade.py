"""Rollouts under way across schema downgrades (docs/operations.md#downgrade).

A rollout's plan and steps are signed TUF metadata (revision 0009's ``tuf_metadata``), which a
downgrade to 0013 keeps: workers go on following the signed step's weights. Its rows
(``rollouts``, ``rollout_steps``: 0014; ``rollout_reports`` and the analysis columns: 0015)
are what the registry advances, analyses and aborts it from; a downgrade below them drops
them, and ``rollout status``/``abort`` then answer 404 while the fleet stays split. So, as
for the signed state (registry.signed_state):

1. ``rollouts_under_way`` names every rollout a downgrade would drop the rows of while it is
   planned, running or paused; ``db downgrade`` refuses when there is one, unless told to
   destroy the state and given a directory to export it to;
2. ``export_rollouts`` writes those tables' rows into the directory (``rollouts.json``, with
   its sha256 in ``rollouts.sha256``), reads it back, and records
   ``db.rollouts.exported`` in the audit log before the tables go. The export is the record
   of what was dropped; nothing imports it: the way to keep a rollout is to finish or abort
   it before the downgrade.

Errors: ``SignedStateError`` (a ``RegistryError``) names the directory or file at fault.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, bindparam, inspect, text
from sqlalchemy.orm import Session

from modelward.attest._fileio import write_output
from modelward.registry.signed_state import SignedStateError, downgrade_crosses

__all__ = [
    "EXPORTED_ACTION",
    "ROLLOUT_REVISIONS",
    "RolloutExport",
    "export_rollouts",
    "rollouts_under_way",
]

ROLLOUT_REVISIONS = frozenset({"0014_rollouts", "0015_rollout_reports"})
ROLLOUT_TABLES = ("rollouts", "rollout_steps", "rollout_reports")
UNDER_WAY = ("planned", "running", "paused")  # registry.domains.rollouts.rows.ACTIVE
EXPORTED_ACTION = "db.rollouts.exported"
EXPORT_FILE = "rollouts.json"


@dataclass(frozen=True)
class RolloutExport:
    path: Path
    rollouts: int
    sha256: str


def rollouts_under_way(engine: Engine, target: str) -> list[str]:
    """(1): each rollout under way whose rows a downgrade of ``engine``'s database to
    ``target`` would drop, as ``ORG/NAME@ALIAS (STATE at step N)``; [] when none."""
    if "rollouts" not in inspect(engine).get_table_names():
        return []
    if not downgrade_crosses(engine, target) & ROLLOUT_REVISIONS:
        return []
    with engine.connect() as conn:
        query = text(
            "SELECT r.name, o.alias, o.state, o.step_index FROM rollouts o "
            "JOIN repositories r ON r.id = o.repo_id WHERE o.state IN :states ORDER BY o.id"
        ).bindparams(bindparam("states", expanding=True))
        rows = conn.execute(query, {"states": list(UNDER_WAY)}).all()
    return [f"{repo}@{alias} ({state} at step {step})" for repo, alias, state, step in rows]


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)  # datetimes


def export_rollouts(session: Session, directory: Path, *, actor: str) -> RolloutExport:
    """(2): every row of the rollout tables into ``directory/rollouts.json`` (the file must
    not exist), read back against its digest, and the export recorded in the audit log in
    ``session``'s transaction. Raises SignedStateError."""
    from modelward.registry.domains.audit.service import append

    path = directory / EXPORT_FILE
    if path.exists() or (directory.exists() and not directory.is_dir()):
        raise SignedStateError(
            f"{path} exists: the rollouts are exported only into a new file (nothing was changed)"
        )
    tables = set(inspect(session.connection()).get_table_names())
    exported: dict[str, list[dict[str, Any]]] = {}
    for table in ROLLOUT_TABLES:
        if table not in tables:
            continue
        result = session.execute(text(f"SELECT * FROM {table} ORDER BY id"))  # noqa: S608 - fixed names
        exported[table] = [
            {key: _jsonable(value) for key, value in row.items()} for row in result.mappings()
        ]
    data = json.dumps(exported, sort_keys=True, indent=1).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    directory.mkdir(parents=True, exist_ok=True)
    write_output(path, data)
    write_output(directory / "rollouts.sha256", f"{digest}  {EXPORT_FILE}\n".encode())
    if "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise SignedStateError(f"{path} does not read back as written")
    count = len(exported.get("rollouts", []))
    append(
        session,
        actor=actor,
        action=EXPORTED_ACTION,
        subject="rollouts",
        details={"file": str(path.resolve()), "sha256": digest, "rollouts": count},
    )
    return RolloutExport(path, count, digest)
