"""A registry that lost its signed TUF state must not start again at root version 1
(docs/operations.md#downgrade; the export and import are registry.signed_state).

``refuse_if_signed_state_lost`` runs before the embedded bootstrap would create root
version 1 on a database with no root: when the audit log (which survives a downgrade below
the TUF revisions) records any ``tuf.*`` event, the registry published metadata before and
workers are pinned to that root, so it raises ``SignedStateError`` naming the event, the
export directory a ``db downgrade`` recorded, and the command that puts it back.
"""

from __future__ import annotations

import json

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.errors import RegistryError
from modelward.registry.models import AuditRow

__all__ = [
    "EXPORTED_ACTION",
    "IMPORTED_ACTION",
    "SignedStateError",
    "refuse_if_signed_state_lost",
]

EXPORTED_ACTION = "tuf.signed_state.exported"
IMPORTED_ACTION = "tuf.signed_state.imported"


class SignedStateError(RegistryError):
    """Signed TUF state would be lost, or an export cannot be put back (the message says
    which file, row or event, and the way out)."""


def refuse_if_signed_state_lost(session: Session) -> None:
    """Raise SignedStateError when the audit log records TUF events (the registry published
    metadata before) and the database holds no root: called before the embedded bootstrap
    would create root version 1, which no worker pinned to the old root follows."""
    event = session.execute(
        select(AuditRow).where(AuditRow.action.like("tuf.%")).order_by(AuditRow.seq.desc()).limit(1)
    ).scalar()
    if event is None:
        return
    exported = session.execute(
        select(AuditRow)
        .where(AuditRow.action == EXPORTED_ACTION)
        .order_by(AuditRow.seq.desc())
        .limit(1)
    ).scalar()
    where = "DIR"
    if exported is not None:
        where = str(json.loads(exported.details).get("directory", "DIR"))
    raise SignedStateError(
        "this registry published TUF metadata before (audit event "
        f"#{event.seq} {event.action} at {event.at}) but its database holds no root: a "
        "schema downgrade below 0009 dropped it. Refusing to create a new root version 1, "
        "which no worker pinned to the registry's root would follow. Recover: "
        f"`modelward db import-signed-state {where}` with the same --data-dir / "
        "--database-url, then start serve again (docs/operations.md#downgrade)"
    )
