"""Append to and page through the audit log. Appends run inside the caller's write transaction
(which the Database serializes), so the chain stays gapless; see attest.audit.chain. Each
append also adds the event's leaf to the Merkle tree in that transaction (attest.audit.tree,
domains.audit.tree): event ``seq`` is leaf ``seq - 1``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import rfc8785
from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.audit.chain import AuditEvent, event_entry, next_event
from modelward.attest.audit.tree import leaf_hash
from modelward.registry.domains.audit.tree import add_leaf
from modelward.registry.models import AuditRow

__all__ = ["MAX_SEQ", "append", "page", "row_to_event"]

# The largest seq the next event can follow and still fit the 64-bit column. A row past it
# (a database writer's, at 2**63 - 1) leaves no seq for the next event: it is passed over
# when the last event is read, the next event follows the newest row below it, and ``audit
# verify`` names the row where the chain breaks, instead of every audited write failing.
MAX_SEQ = 2**63 - 2


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def row_to_event(row: AuditRow) -> AuditEvent:
    return AuditEvent(
        seq=row.seq,
        at=row.at,
        actor=row.actor,
        action=row.action,
        subject=row.subject,
        details=json.loads(row.details),
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


def append(
    session: Session, *, actor: str, action: str, subject: str, details: Mapping[str, Any]
) -> AuditEvent:
    """Add the next event to the chain and its leaf to the tree in ``session``'s (write)
    transaction. Raises TreeIncomplete when the stored tree lacks a node it needs."""
    last = session.execute(
        select(AuditRow).where(AuditRow.seq <= MAX_SEQ).order_by(AuditRow.seq.desc()).limit(1)
    ).scalar()
    event = next_event(
        None if last is None else row_to_event(last),
        at=_now(),
        actor=actor,
        action=action,
        subject=subject,
        details=details,
    )
    session.add(
        AuditRow(
            seq=event.seq,
            at=event.at,
            actor=event.actor,
            action=event.action,
            subject=event.subject,
            details=rfc8785.dumps(dict(event.details)).decode(),
            prev_hash=event.prev_hash,
            hash=event.hash,
        )
    )
    add_leaf(session, event.seq - 1, leaf_hash(event_entry(event)))
    session.flush()
    return event


def page(session: Session, *, after: int, limit: int) -> list[AuditEvent]:
    rows = session.execute(
        select(AuditRow).where(AuditRow.seq > after).order_by(AuditRow.seq).limit(limit)
    ).scalars()
    return [row_to_event(r) for r in rows]
