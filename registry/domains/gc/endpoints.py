"""``POST /v1/admin/gc`` and ``/v1/repos/{org}/{name}/quota`` (docs/registry.md#storage-hygiene)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.deps import Admin, AnyCaller
from modelward.registry.domains.gc import quota as quotas
from modelward.registry.domains.gc.service import collect
from modelward.registry.domains.repos.service import get_repo, may_publish
from modelward.registry.errors import Forbidden
from modelward.registry.models import Repository

router = domain_router(prefix="/v1", tags=["storage"])

MAX_QUOTA = 2**62  # bytes; the store's sizes are 64-bit


class GcIn(BaseModel):
    dry_run: bool = False


class QuotaIn(BaseModel):
    quota_bytes: int | None = Field(ge=0, le=MAX_QUOTA)


def _quota_out(repo: Repository, used: int) -> dict[str, Any]:
    return {"repository": repo.name, "quota_bytes": repo.quota_bytes, "usage_bytes": used}


@router.post("/admin/gc")
def run_gc(caller: Admin, state: State, body: GcIn | None = None) -> dict[str, Any]:
    """Collect unreferenced blobs and abandoned upload sessions older than the GC window
    (``dry_run``: report them, delete nothing). One ``storage.gc`` audit event per run.
    ``digests`` lists the first 1000 blobs; the counts are complete."""
    report = collect(state, caller=caller, dry_run=body.dry_run if body else False)
    return report.as_dict()


@router.get("/repos/{org}/{name}/quota")
def get_quota(org: str, name: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """The repository's quota (null: none) and the bytes charged to it (admins and the
    repository's publishers)."""
    with state.db.read() as session:
        repo = get_repo(session, f"{org}/{name}", caller)
        if not (caller.is_admin or may_publish(session, repo, caller)):
            raise Forbidden(
                f"{caller.name} may not read the quota of {repo.name}: admins and its "
                "publishers may"
            )
        return _quota_out(repo, quotas.usage(session, repo.id, state.settings))


@router.put("/repos/{org}/{name}/quota")
def set_quota(org: str, name: str, body: QuotaIn, caller: Admin, state: State) -> dict[str, Any]:
    """Set the repository's quota in bytes (null: no quota), audited ``repo.quota``. A quota
    below the current usage refuses new bytes only (every push and upload to it is refused
    until usage falls below; ``usage_bytes`` says how far); nothing stored is removed."""
    with state.db.write() as session:
        repo = get_repo(session, f"{org}/{name}", caller)
        before = repo.quota_bytes
        repo.quota_bytes = body.quota_bytes
        used = quotas.usage(session, repo.id, state.settings)
        append(
            session,
            actor=caller.name,
            action="repo.quota",
            subject=repo.name,
            details={"from": before, "to": body.quota_bytes, "usage_bytes": used},
        )
        return _quota_out(repo, used)
