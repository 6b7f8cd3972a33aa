"""``/v1/repos/{org}/{name}/rollouts/{alias}``: start, advance, abort, status, weights
(docs/rollouts.md)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from modelward.attest.rollout import DEFAULT_STEPS
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import AnyCaller
from modelward.registry.domains.blobs.streaming import check_digest
from modelward.registry.domains.rollouts import analysis, service, views

router = domain_router(prefix="/v1/repos/{org}/{name}/rollouts", tags=["rollouts"])

MAX_ANALYSIS_CHARS = 64 * 1024


class StartIn(BaseModel):
    to: str = Field(max_length=100)
    steps: list[int] = Field(default=list(DEFAULT_STEPS), min_length=1, max_length=10)
    window_seconds: int = Field(default=0, ge=0, le=7 * 24 * 3600)
    min_samples: int = Field(default=0, ge=0, le=10**9)
    analysis: str | None = Field(default=None, max_length=MAX_ANALYSIS_CHARS)
    reason: str | None = Field(default=None, max_length=2000)
    allow_no_fleet: bool = False  # start a judged plan with no worker known (audited)


class ReasonIn(BaseModel):
    reason: str = Field(min_length=1, max_length=2000)


@router.post("/{alias}", status_code=201)
def start(
    *, org: str, name: str, alias: str, body: StartIn, caller: AnyCaller, state: State
) -> JSONResponse:
    """Propose a rollout plan of the alias to ``to`` (the alias decision's steps (1) to (5)
    for the caller); the alias's role signs it (``proposal``; signed at once for an
    ``online:`` alias). 409 ``rollout_refused`` while another rollout is under way, or for
    a plan whose analysis could never judge its first step (no worker known: unless
    ``allow_no_fleet``, audited)."""
    answer = service.start(
        state,
        repo_name=f"{org}/{name}",
        alias=alias,
        candidate=check_digest(body.to),
        steps=tuple(body.steps),
        window_seconds=body.window_seconds,
        min_samples=body.min_samples,
        analysis_text=body.analysis,
        reason=body.reason,
        caller=caller,
        allow_no_fleet=body.allow_no_fleet,
    )
    return JSONResponse(answer, status_code=201)


@router.post("/{alias}/advance")
def advance(
    *, org: str, name: str, alias: str, body: ReasonIn, caller: AnyCaller, state: State
) -> dict[str, Any]:
    """Sign the plan's next step (one step at a time; 409 ``rollout_plan_unsigned`` before
    the plan is signed, ``rollout_refused`` once aborted or completed)."""
    return service.advance(
        state, repo_name=f"{org}/{name}", alias=alias, reason=body.reason, caller=caller
    )


@router.post("/{alias}/abort")
def abort(
    *, org: str, name: str, alias: str, body: ReasonIn, caller: AnyCaller, state: State
) -> dict[str, Any]:
    """Abort toward the stable digest: a signed ``aborted`` step, for good."""
    return service.abort(
        state, repo_name=f"{org}/{name}", alias=alias, reason=body.reason, caller=caller
    )


@router.post("/{alias}/analyze")
def analyze(org: str, name: str, alias: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """Judge the current step now and act on it as the rollout controller would: pass
    advances (or pauses where the analysis's ``manual`` says), fail aborts, inconclusive
    holds (docs/rollouts.md#analysis)."""
    return analysis.analyze(state, repo_name=f"{org}/{name}", alias=alias, caller=caller)


@router.get("/{alias}")
def status(org: str, name: str, alias: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """The alias's latest rollout: plan, signed step, history with times."""
    return views.status(state, repo_name=f"{org}/{name}", alias=alias, caller=caller)


@router.get("/{alias}/weights")
def weights(org: str, name: str, alias: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """The signed step's weights for request-level routers (docs/rollouts.md#weights)."""
    return views.weights(state, repo_name=f"{org}/{name}", alias=alias, caller=caller)


@router.get("/{alias}/history")
def history(org: str, name: str, alias: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """Every rollout of the alias, oldest first, each as ``GET .../rollouts/{alias}`` shows
    one (``rollouts``; empty when none): what a release record gathers (docs/release.md)."""
    return views.history(state, repo_name=f"{org}/{name}", alias=alias, caller=caller)
