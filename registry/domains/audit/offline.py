"""``modelward audit verify --database``: the audit log read straight from a registry's
database (read-only) and handed to the pure checkers (docs/registry.md#checkpoints).

The server wing's half of ``audit verify``; the client's half (``modelward.client.audit``)
reads the same log through the API. Nothing here decides: every verdict is raised by
attest.audit (checkpoint, tree, chain) as an ``attest.errors.AuditVerificationError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import sqlalchemy as sa

from modelward.attest.audit.chain import AuditEvent
from modelward.attest.audit.checkpoint import (
    AuditReport,
    Checkpoint,
    TrustedLog,
    open_checkpoint,
    verify_log,
)
from modelward.attest.audit.signed_note import NoteVerifier
from modelward.attest.audit.tree import fold, perfect_cover
from modelward.registry.domains.audit.tree import TreeIncomplete
from modelward.registry.models import AuditCheckpointRow, AuditNode, AuditRow

__all__ = ["events_from_database", "verify_database"]


def events_from_database(url: str) -> Iterator[AuditEvent]:
    """Every row of ``audit_events`` ordered by seq, read with SQLAlchemy (read-only use)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(AuditRow.__table__).order_by(AuditRow.seq))
            for row in rows:
                try:
                    details = json.loads(row.details)
                except ValueError as exc:
                    raise ValueError(f"seq {row.seq}: details are not JSON ({exc})") from exc
                if not isinstance(details, dict):
                    raise TypeError(f"seq {row.seq}: details are not an object")
                yield AuditEvent(
                    seq=int(row.seq),
                    at=str(row.at),
                    actor=str(row.actor),
                    action=str(row.action),
                    subject=str(row.subject),
                    details=details,
                    prev_hash=str(row.prev_hash),
                    hash=str(row.hash),
                )
    finally:
        engine.dispose()


def _database_tree(url: str) -> tuple[int, bytes, list[tuple[str, str]]]:
    """(tree size, root from the stored nodes, stored checkpoints as (key, note)) of a
    database."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            last = conn.execute(
                sa.select(sa.func.max(AuditNode.idx)).where(AuditNode.level == 0)
            ).scalar()
            size = 0 if last is None else int(last) + 1
            wanted = perfect_cover(0, size) if size else []
            found: dict[tuple[int, int], bytes] = {}
            for lv, ix in wanted:
                digest = conn.execute(
                    sa.select(AuditNode.hash).where(AuditNode.level == lv, AuditNode.idx == ix)
                ).scalar()
                if digest is not None:
                    found[(lv, ix)] = bytes(digest)
            if set(wanted) - set(found):
                raise TreeIncomplete(set(wanted) - set(found))
            notes = [
                (str(key), str(note))
                for key, note in conn.execute(
                    sa.select(AuditCheckpointRow.key, AuditCheckpointRow.note).order_by(
                        AuditCheckpointRow.id
                    )
                )
            ]
    finally:
        engine.dispose()
    return size, fold([found[n] for n in wanted]), notes


def verify_database(
    url: str, *, verifier: NoteVerifier | None, since: bytes | None = None
) -> AuditReport:
    """Re-hash the events of the database at ``url`` against its stored Merkle tree, against
    every checkpoint stored there that the pinned ``verifier`` signed, and against ``since``
    (a saved checkpoint; needs ``verifier``). Raises as ``verify_through_api``, TreeIncomplete
    and SQLAlchemy errors."""
    old: Checkpoint | None = None
    if since is not None:
        if verifier is None:
            raise ValueError("checking a log against a saved checkpoint needs the pinned key")
        old = TrustedLog(since, verifier).trusted
    size, root, notes = _database_tree(url)
    stored = Checkpoint("the database's stored tree", size, root, b"", None)
    checkpoints: list[Checkpoint] = [stored]
    if verifier is not None:  # checkpoints stored as signed by other keys are ignored
        checkpoints += [
            open_checkpoint(note.encode(), verifier) for key, note in notes if key == verifier.label
        ]
    if old is not None:
        checkpoints.append(old)
    count = verify_log(events_from_database(url), checkpoints)
    return AuditReport(count, tuple(checkpoints), old)
