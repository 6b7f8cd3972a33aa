"""``/v1/repos/{org}/{name}/bundles/{digest}/boots``: serving workers report boot outcomes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator
from sqlalchemy import select

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State, iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.deps import AnyCaller, Worker
from modelward.registry.domains.bundles.service import find_bundle
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.models import Boot, Principal

router = domain_router(prefix="/v1/repos/{org}/{name}/bundles/{digest}/boots", tags=["boots"])


MAX_REPORT_JSON = 64 * 1024  # characters of fingerprint and of detail, each, as stored


class BootIn(BaseModel):
    fingerprint_id: str = Field(min_length=1, max_length=200)
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    outcome: str = Field(min_length=1, max_length=50)
    detail: Any = None

    @field_validator("fingerprint", "detail")
    @classmethod
    def _bounded_json(cls, value: Any) -> Any:
        try:
            text = json.dumps(value, allow_nan=False)
        except ValueError as exc:  # NaN or Infinity: not JSON, and unlistable later
            raise ValueError("must be JSON without NaN or Infinity") from exc
        if len(text) > MAX_REPORT_JSON:
            raise ValueError(f"larger than {MAX_REPORT_JSON} characters as JSON")
        return value


@router.post("", status_code=201)
def report_boot(
    *, org: str, name: str, digest: str, body: BootIn, caller: Worker, state: State
) -> dict[str, Any]:
    with state.db.write() as session:
        bundle = find_bundle(session, get_repo(session, f"{org}/{name}", caller), digest)
        row = Boot(
            bundle_id=bundle.id,
            principal_id=caller.id,
            fingerprint_id=body.fingerprint_id,
            fingerprint=json.dumps(body.fingerprint),
            outcome=body.outcome,
            detail=json.dumps(body.detail),
            created_at=datetime.now(UTC),
        )
        session.add(row)
        session.flush()
        append(
            session,
            actor=caller.name,
            action="boot.report",
            subject=f"{org}/{name}@{digest}",
            details={"id": row.id, "fingerprint_id": body.fingerprint_id, "outcome": body.outcome},
        )
        return {"id": row.id}


@router.get("")
def list_boots(
    org: str, name: str, digest: str, caller: AnyCaller, state: State
) -> list[dict[str, Any]]:
    with state.db.read() as session:
        bundle = find_bundle(session, get_repo(session, f"{org}/{name}", caller), digest)
        rows = session.execute(
            select(Boot, Principal.name)
            .join(Principal, Principal.id == Boot.principal_id)
            .where(Boot.bundle_id == bundle.id)
            .order_by(Boot.id)
        ).all()
        return [
            {
                "id": b.id,
                "principal": pname,
                "fingerprint_id": b.fingerprint_id,
                "fingerprint": json.loads(b.fingerprint),
                "outcome": b.outcome,
                "detail": json.loads(b.detail),
                "at": iso(b.created_at),
            }
            for b, pname in rows
        ]
