"""Audit events for ``modelward audit verify``: through the API, or straight from a database.

Both yield ``registry.audit_chain.AuditEvent`` in sequence order; ``verify_chain`` (the server
helper's pure checker) recomputes the chain over them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from modelward.registry.audit_chain import AuditEvent, event_from_json

if TYPE_CHECKING:
    from modelward.registry.client import RegistryClient

__all__ = ["events_from_api", "events_from_database"]


def events_from_api(client: RegistryClient, page: int = 500) -> Iterator[AuditEvent]:
    """Every event from GET /v1/audit, page by page. Raises ValueError for a malformed event."""
    for obj in client.iter_audit(after=0, page=page):
        yield event_from_json(obj)


def events_from_database(url: str) -> Iterator[AuditEvent]:
    """Every row of ``audit_events`` ordered by seq, read with SQLAlchemy (read-only use)."""
    import sqlalchemy as sa

    from modelward.registry.models import AuditRow

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
