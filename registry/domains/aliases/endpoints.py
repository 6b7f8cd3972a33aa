"""``/v1/repos/{org}/{name}/aliases/{alias}`` and bundle approvals."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State
from modelward.registry.domains.aliases import service
from modelward.registry.domains.auth.deps import AnyCaller, Reviewer, authenticated_read
from modelward.registry.domains.blobs.streaming import check_digest
from modelward.registry.domains.repos.listing import DEFAULT_PAGE, MAX_CURSOR_CHARS, MAX_PAGE

router = domain_router(prefix="/v1/repos/{org}/{name}", tags=["aliases"])
MAX_VERSION = 2**62  # far beyond any real version; keeps database integers in range


class AliasIn(BaseModel):
    digest: str = Field(max_length=100)
    expected_version: int = Field(ge=0, le=MAX_VERSION)
    reason: str | None = Field(default=None, max_length=2000)
    rollback: bool = False
    propose: bool = False  # a protected alias short of approvals: 202 with the proposal


class DryRunIn(BaseModel):
    digest: str = Field(max_length=100)
    rollback: bool = False


class ApprovalIn(BaseModel):
    alias: str = Field(min_length=1, max_length=100)


class WithdrawalIn(BaseModel):
    alias: str = Field(min_length=1, max_length=100)
    reason: str = Field(max_length=2000)


class AliasOut(BaseModel):
    alias: str
    digest: str | None
    version: int


@router.get("/aliases")
def list_aliases(
    *,
    org: str,
    name: str,
    caller: AnyCaller,
    state: State,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> dict[str, Any]:
    """The repository's aliases by name, each with the state of the bundle it points at;
    ``next``: the ``cursor`` of the next page."""
    repo_name = f"{org}/{name}"
    with state.db.read() as session:
        page = service.list_aliases(
            session, caller, repo_name, limit=limit, cursor=cursor, view=state.signed
        )
    return {"repository": repo_name, "aliases": page.items, "next": page.next}


@router.get("/aliases/{alias}", response_model=AliasOut)
def get_alias(org: str, name: str, alias: str, request: Request) -> JSONResponse:
    """Any authenticated caller. The hot path serving workers poll: authentication and the
    read share one connection and one worker thread, and the service's plain dict is sent
    as is (docs/performance.md#registry)."""
    with authenticated_read(request) as (caller, session):
        state: AppState = request.app.state.registry
        return JSONResponse(
            service.get_alias(session, f"{org}/{name}", alias, caller, view=state.signed)
        )


@router.put("/aliases/{alias}", responses={202: {"description": "proposed (``pending``)"}})
def set_alias(
    *, org: str, name: str, alias: str, body: AliasIn, caller: AnyCaller, state: State
) -> JSONResponse:
    """Compare-and-swap: ``expected_version`` 0 creates; 409 ``stale_version`` with the current
    state when another writer moved it first. The move is proposed to the alias's TUF role
    too (``signed``, ``proposal``). With ``propose``, a protected alias short of approvals
    answers 202 with the ``pending`` proposal its reviewers sign (docs/tuf.md#proposals)."""
    answer = service.set_alias(
        state,
        repo_name=f"{org}/{name}",
        alias=alias,
        digest=check_digest(body.digest),
        expected_version=body.expected_version,
        reason=body.reason,
        rollback=body.rollback,
        caller=caller,
        propose=body.propose,
    )
    return JSONResponse(answer, status_code=202 if "pending" in answer else 200)


@router.post("/aliases/{alias}/dry-run")
def dry_run(
    *, org: str, name: str, alias: str, body: DryRunIn, caller: AnyCaller, state: State
) -> dict[str, Any]:
    """Every check a move of the alias to ``digest`` by the caller would make, each reported
    (``checks``: step, check, passed, message, reason, evidence) and ``allowed``: nothing
    moves and nothing is proposed. Audited (``alias.dry_run``). 404/410 for a missing or
    deleted bundle."""
    return service.dry_run(
        state,
        repo_name=f"{org}/{name}",
        alias=alias,
        digest=check_digest(body.digest),
        rollback=body.rollback,
        caller=caller,
    )


@router.get("/aliases/{alias}/history")
def alias_history(
    org: str, name: str, alias: str, caller: AnyCaller, state: State
) -> list[dict[str, Any]]:
    with state.db.read() as session:
        return service.history(session, f"{org}/{name}", alias, caller)


@router.post("/bundles/{digest}/approvals", status_code=201)
def approve(
    *, org: str, name: str, digest: str, body: ApprovalIn, caller: Reviewer, state: State
) -> dict[str, Any]:
    with state.db.write() as session:
        approvers = service.approve(
            session, repo_name=f"{org}/{name}", digest=digest, alias=body.alias, caller=caller
        )
    return {"digest": digest, "alias": body.alias, "approvers": approvers}


@router.delete("/bundles/{digest}/approvals")
def withdraw_approval(
    *, org: str, name: str, digest: str, body: WithdrawalIn, caller: Reviewer, state: State
) -> dict[str, Any]:
    """Withdraw the caller's own approval of ``digest`` for ``alias`` (with a reason): it no
    longer counts; the record stays. 403 when only others approved it, 409 when already
    withdrawn."""
    with state.db.write() as session:
        return service.withdraw_approval(
            session,
            repo_name=f"{org}/{name}",
            digest=check_digest(digest),
            alias=body.alias,
            reason=body.reason,
            caller=caller,
        )
