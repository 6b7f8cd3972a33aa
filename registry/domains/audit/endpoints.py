"""``GET /v1/audit``: page through the hash-chained audit log (admins and reviewers)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from modelward.registry.audit_chain import event_to_json
from modelward.registry.domains._state import State
from modelward.registry.domains.audit.service import page
from modelward.registry.domains.auth.deps import Reviewer

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get("/audit")
def list_events(
    caller: Reviewer,
    state: State,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Events with ``seq > after`` in order; ``next_after`` is null once the end is reached."""
    with state.db.read() as session:
        events = page(session, after=after, limit=limit)
    return {
        "events": [event_to_json(e) for e in events],
        "next_after": events[-1].seq if len(events) == limit else None,
    }
