"""Sign checkpoints of the audit log on demand, and keep every one (docs/registry.md#checkpoints).

``current_checkpoint`` answers with the stored checkpoint when the tree has not grown and the
key is the same; otherwise it signs a new one in a write transaction (serialized with appends),
after checking that the tree it is about to sign extends the last checkpoint it signed
(C2SP tlog-checkpoint: a log never signs a checkpoint inconsistent with an earlier one) and
that the tree and the events agree on the size. A failed check refuses to sign
(``AuditLogInconsistent``): the database was edited, and the operator should find out now.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from modelward.attest.audit.checkpoint import sign_checkpoint
from modelward.attest.audit.signed_note import NoteSigner
from modelward.registry.db import Database
from modelward.registry.domains.audit.tree import root_at, tree_size
from modelward.registry.errors import RegistryError
from modelward.registry.models import AuditCheckpointRow, AuditRow

__all__ = ["AuditLogInconsistent", "SignedCheckpoint", "current_checkpoint"]


class AuditLogInconsistent(RegistryError):  # noqa: N818 - the name is the finding
    """The stored tree, the events and the signed checkpoints disagree: refuse to sign."""

    code = "audit_log_inconsistent"


@dataclass(frozen=True)
class SignedCheckpoint:
    size: int
    root: bytes
    note: str

    def to_json(self, signer: NoteSigner) -> dict[str, object]:
        return {
            "checkpoint": self.note,
            "origin": signer.name,
            "tree_size": self.size,
            "root_hash": base64.b64encode(self.root).decode(),
            "verifier_key": signer.verifier.key_string,
        }


def _latest(session: Session) -> AuditCheckpointRow | None:
    return session.execute(
        select(AuditCheckpointRow).order_by(AuditCheckpointRow.id.desc()).limit(1)
    ).scalar()


def _checked_size(session: Session, latest: AuditCheckpointRow | None) -> tuple[int, bytes]:
    """The tree's size and root, after checking it against the events and ``latest``."""
    size = tree_size(session)
    events = session.execute(select(func.max(AuditRow.seq))).scalar() or 0
    if events != size:
        raise AuditLogInconsistent(
            f"the audit log has {events} events but its Merkle tree {size} leaves: "
            "audit_events or audit_tree_nodes was edited; run `modelward audit verify`",
            detail={"events": events, "tree_size": size},
        )
    if latest is not None:
        if latest.tree_size > size:
            raise AuditLogInconsistent(
                f"the registry signed a checkpoint of {latest.tree_size} events, the log now "
                f"has {size}: events were removed",
                detail={"checkpoint": latest.tree_size, "tree_size": size},
            )
        if root_at(session, latest.tree_size) != bytes(latest.root_hash):
            raise AuditLogInconsistent(
                f"the first {latest.tree_size} events no longer hash to the root the registry "
                "signed for them: the log was rewritten",
                detail={"checkpoint": latest.tree_size},
            )
    return size, root_at(session, size)


def current_checkpoint(db: Database, signer: NoteSigner) -> SignedCheckpoint:
    """The checkpoint of the current tree signed by ``signer``; raises AuditLogInconsistent,
    TreeIncomplete."""
    label = signer.verifier.label
    with db.read() as session:
        # reads may each see a newer snapshot (PostgreSQL autocommit): only the stored tree
        # nodes, which never change once written, are compared here
        latest = _latest(session)
        if latest is not None and latest.key == label and latest.tree_size == tree_size(session):
            root = bytes(latest.root_hash)
            if root_at(session, latest.tree_size) == root:
                return SignedCheckpoint(latest.tree_size, root, latest.note)
    with db.write() as session:
        latest = _latest(session)
        size, root = _checked_size(session, latest)
        if latest is not None and latest.tree_size == size and latest.key == label:
            return SignedCheckpoint(size, root, latest.note)
        note = sign_checkpoint(signer, size, root).decode()
        session.add(
            AuditCheckpointRow(
                tree_size=size, root_hash=root, key=label, note=note, created_at=datetime.now(UTC)
            )
        )
        return SignedCheckpoint(size, root, note)
