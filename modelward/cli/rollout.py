"""``modelward rollout start|advance|abort|analyze|status|history|weights``: canary rollouts
of an alias as signed state (docs/rollouts.md)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.remote import (
    AliasRef,
    AsJson,
    PassphraseEnvOpt,
    emit,
    registry_client,
    reported,
    valid_digest,
)
from modelward.client.config import parse_reference

__all__ = [
    "rollout_abort",
    "rollout_advance",
    "rollout_app",
    "rollout_history",
    "rollout_start",
    "rollout_status",
    "rollout_weights",
]

rollout_app = typer.Typer(
    name="rollout",
    help="Canary rollouts of an alias: a signed plan, signed steps (docs/rollouts.md).",
    no_args_is_help=True,
)

ReasonOpt = Annotated[
    str, typer.Option("--reason", metavar="TEXT", help="Why (recorded, audited, signed)")
]


def _steps(value: str | None) -> str | None:
    if value is not None:
        from modelward.attest.rollout import PlanInvalid, parse_steps

        try:
            parse_steps(value)
        except PlanInvalid as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def _window(value: str | None) -> str | None:
    if value is not None:
        from modelward.attest.rollout import PlanInvalid, parse_duration

        try:
            parse_duration(value, "--window")
        except PlanInvalid as exc:
            raise typer.BadParameter(str(exc)) from exc
    return value


def _analysis(path: Path | None) -> str | None:
    """The analysis file's text, checked here first (the registry checks it again)."""
    if path is None:
        return None
    from modelward.attest.rollout import PlanInvalid, parse_analysis

    try:
        raw = path.read_bytes()
        parse_analysis(raw)
        return raw.decode()
    except (OSError, UnicodeDecodeError, PlanInvalid) as exc:
        raise typer.BadParameter(f"{path}: {exc}", param_hint="--analysis") from exc


def _analysis_summary(plan: dict[str, Any]) -> list[str]:
    """The plan's thresholds and triggers, as signed (none: steps advance by hand)."""
    analysis = plan.get("analysis") or {}
    thresholds = analysis.get("thresholds") or {}
    triggers = analysis.get("triggers") or []
    if not thresholds and not triggers:
        return ["  analysis  none: each step advances by hand (`rollout advance`)"]
    bounds = ", ".join(
        f"{metric} {' '.join(f'{k} {v}' for k, v in sorted(bound.items()))}"
        for metric, bound in sorted(thresholds.items())
    )
    lines = [f"  analysis  thresholds: {bounds or 'none'}"]
    if triggers:
        lines.append(
            "            triggers: "
            + "; ".join(", ".join(f"{k} {v}" for k, v in sorted(t.items())) for t in triggers)
        )
    return lines


def _step_lines(history: list[dict[str, Any]]) -> list[str]:
    """Each signed step with its verdict and reasons (holds included)."""
    lines = []
    for h in history:
        why = f"  ({h['reason']})" if h.get("reason") else ""
        lines.append(
            f"  {h.get('at')}  {h.get('actor')}  step {h.get('index')}  "
            f"{h.get('weight')}%  {h.get('state')}{why}"
        )
        analysis = h.get("analysis") or {}
        verdict = h.get("verdict") or analysis.get("verdict")
        if verdict:
            held = "  HELD" if verdict == "inconclusive" else ""
            lines.append(f"      verdict {verdict}{held}")
            lines += [f"        {reason}" for reason in analysis.get("reasons") or []]
            lines += _evidence_lines(analysis.get("metrics") or {})
    return lines


def _evidence_lines(metrics: dict[str, Any]) -> list[str]:
    """What a verdict judged: each cohort's workers and counted requests (each worker's
    weight bounded: docs/rollouts.md#evidence), and the reports set aside as faults."""
    lines = []
    for name in ("candidate", "stable"):
        cohort = metrics.get(name)
        if not isinstance(cohort, dict):
            continue
        capped = cohort.get("capped") or []
        lines.append(
            f"        {name}: {cohort.get('worker_count')} worker(s), "
            f"{cohort.get('counted_errors')}/{cohort.get('counted_requests')} errors counted "
            f"of {cohort.get('errors')}/{cohort.get('requests')} reported"
            + (f"; {len(capped)} worker(s) capped" if capped else "")
        )
    unassigned = metrics.get("unassigned") or {}
    if unassigned.get("reports"):
        lines.append(
            f"        not counted: {unassigned['reports']} report(s) from "
            f"{len(unassigned.get('workers') or [])} worker(s) of a digest not assigned to them"
        )
    return lines


def _cohort_lines(cohorts: Any) -> list[str]:
    """What each step means for the fleet (the registry's ``cohorts``)."""
    if not cohorts:
        return []
    steps, size = cohorts.get("steps", []), cohorts.get("fleet")
    if cohorts.get("rule") == "fleet":
        parts = [f"{s['weight']}%: {s['workers']} of {size}" for s in steps]
        return [f"  cohorts   {', '.join(parts)} workers (the plan's fleet)"]
    if not size:
        return [
            "  cohorts   by hash bucket: no worker reports for this alias yet, so a step "
            "may hold no candidate worker"
        ]
    parts = [f"{s['weight']}%: about {s['workers']}" for s in steps]
    return [f"  cohorts   by hash bucket over {size} workers: {', '.join(parts)}"]


def _plan_lines(state: Any) -> str:
    plan = state.get("plan") or {}
    ref = f"{state.get('repository')}@{state.get('alias')}"
    lines = [
        f"rollout {state.get('rollout_id')} of {ref}: {state.get('state')}",
        f"  stable    {plan.get('stable')}",
        f"  candidate {plan.get('candidate')}",
        f"  steps     {', '.join(f'{w}%' for w in plan.get('steps', []))}  window "
        f"{plan.get('window_seconds')}s  min samples {plan.get('min_samples')}",
        *_cohort_lines(state.get("cohorts")),
        *_analysis_summary(plan),
        f"  plan sha256 {state.get('plan_sha256')}: "
        + (
            "signed by the alias's role"
            if state.get("plan_signed")
            else f"NOT SIGNED yet (proposal #{state.get('proposal')}: modelward trust sign "
            f"{state.get('proposal')} --key KEY)"
        ),
    ]
    step = state.get("signed_step")
    if step and "refused" in step:
        lines.append(f"  signed step REFUSED: {step['refused']}")
    elif step:
        lines.append(
            f"  signed step {step.get('index')} ({step.get('weight')}% candidate), "
            f"{step.get('state')} (v{step.get('tuf_version')})"
        )
    else:
        lines.append("  no step signed yet: every worker runs the stable digest")
    lines += _step_lines(state.get("history", []))
    rollback = state.get("rollback")
    if rollback:
        figures = ", ".join(f"{k} {v}" for k, v in rollback.items() if v is not None)
        lines.append(f"  rollback: {figures}")
    lines.extend(_fleet_lines(state.get("fleet")))
    return "\n".join(lines)


def _fleet_lines(fleet: Any) -> list[str]:
    """Which workers run which digest, per cohort (``rollout status``: the fleet reports)."""
    if not fleet:
        return []
    workers = fleet.get("workers", [])
    if not workers:
        return ["  fleet: no worker has reported since the rollout began"]
    lines = []
    for name, totals in fleet.get("cohorts", {}).items():
        lines.append(
            f"  fleet {name}: {totals.get('workers')} workers ({totals.get('silent')} silent), "
            f"capacity {totals.get('capacity')}, last reports {totals.get('requests')} "
            f"requests, {totals.get('errors')} errors"
        )
    for w in workers:
        off = "" if w.get("digest") == w.get("assigned") else f"  (assigned {w.get('assigned')})"
        silent = "  SILENT" if w.get("silent") else ""
        lines.append(
            f"    {str(w.get('keyid'))[:16]}  {w.get('principal')}  {w.get('cohort')}  "
            f"{w.get('digest')}  last {w.get('last_report_at')}{silent}{off}"
        )
    return lines


@rollout_app.command("start")
def rollout_start(
    ref: AliasRef,
    to: Annotated[
        str,
        typer.Option(
            "--to", metavar="DIGEST", help="The candidate, sha256:<hex>", callback=valid_digest
        ),
    ],
    *,
    steps: Annotated[
        str | None,
        typer.Option(
            metavar="W,W,...",
            help="Percents, increasing to 100 (default 5,20,50,100)",
            callback=_steps,
        ),
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION", help="Observation window per step (90s, 10m, 1h)", callback=_window
        ),
    ] = None,
    min_samples: Annotated[
        int, typer.Option(metavar="N", min=0, help="Minimum samples per step")
    ] = 0,
    analysis: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="Thresholds and triggers, YAML or JSON (docs/rollouts.md#analysis)"
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option(metavar="TEXT", help="Recorded")] = None,
    key: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Sign the plan with your key (publishers' aliases)"),
    ] = None,
    no_fleet_yet: Annotated[
        bool,
        typer.Option(
            "--no-fleet-yet",
            help="Start a plan with an --analysis though no worker has reported for the alias "
            "(refused otherwise: no step could be judged); audited",
        ),
    ] = False,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Propose a rollout plan of REPO@ALIAS to a candidate; the alias's signers sign it."""
    from modelward.attest.rollout import parse_duration, parse_steps
    from modelward.cli.trust import load_key, sign_proposal

    r = parse_reference(ref, require="alias")
    text = _analysis(analysis)
    private = load_key(key, passphrase_env) if key is not None else None
    with reported(as_json), registry_client() as client:
        state = client.start_rollout(
            r.repo,
            str(r.alias),
            to,
            steps=parse_steps(steps) if steps else None,
            window_seconds=parse_duration(window, "--window") if window else 0,
            min_samples=min_samples,
            analysis=text,
            reason=reason,
            allow_no_fleet=no_fleet_yet,
        )
        if private is not None and not state.get("plan_signed"):
            # what this signer asked for; the plan is read from the bytes to be signed
            asked: dict[str, Any] = {
                "repository": r.repo,
                "alias": str(r.alias),
                "candidate": to,
                "min_samples": min_samples,
                "analysis_sha256": hashlib.sha256(text.encode()).hexdigest() if text else None,
            }
            if steps:
                asked["steps"] = list(parse_steps(steps))
            if window:
                asked["window_seconds"] = parse_duration(window, "--window")
            sign_proposal(
                client,
                int(state["proposal"]),
                private,
                expect_target=f"{r.repo}/rollouts/{r.alias}",
                expect_digest=None,
                expect_plan=asked,
            )
            state = client.rollout_status(r.repo, str(r.alias))
    emit(state, as_json, _plan_lines)


@rollout_app.command("advance")
def rollout_advance(ref: AliasRef, reason: ReasonOpt, *, as_json: AsJson = False) -> None:
    """Sign the plan's next step (one step at a time)."""
    r = parse_reference(ref, require="alias")
    with reported(as_json), registry_client() as client:
        state = client.advance_rollout(r.repo, str(r.alias), reason)
    emit(state, as_json, _plan_lines)


@rollout_app.command("abort")
def rollout_abort(ref: AliasRef, reason: ReasonOpt, *, as_json: AsJson = False) -> None:
    """Abort toward the stable digest, for good (a new rollout needs a new plan)."""
    r = parse_reference(ref, require="alias")
    with reported(as_json), registry_client() as client:
        state = client.abort_rollout(r.repo, str(r.alias), reason)
    emit(state, as_json, _plan_lines)


def _analysis_lines(answer: Any) -> str:
    lines = [
        f"{answer.get('repository')}@{answer.get('alias')} rollout {answer.get('rollout_id')}: "
        f"{answer.get('verdict') or '-'} -> {answer.get('action')}"
    ]
    lines += [f"  {reason}" for reason in answer.get("reasons") or []]
    if answer.get("why"):
        lines.append(f"  ({answer['why']})")
    return "\n".join(lines)


@rollout_app.command("analyze")
def rollout_analyze(ref: AliasRef, *, as_json: AsJson = False) -> None:
    """Judge the current step now and act as the controller would: pass advances, fail
    aborts with the reason, inconclusive holds (docs/rollouts.md#analysis)."""
    r = parse_reference(ref, require="alias")
    with reported(as_json), registry_client() as client:
        answer = client.analyze_rollout(r.repo, str(r.alias))
    emit(answer, as_json, _analysis_lines)


@rollout_app.command("status")
def rollout_status(ref: AliasRef, *, as_json: AsJson = False) -> None:
    """The alias's latest rollout: plan, signed step, state, history of steps with times."""
    r = parse_reference(ref, require="alias")
    with reported(as_json), registry_client() as client:
        state = client.rollout_status(r.repo, str(r.alias))
    emit(state, as_json, _plan_lines)


@rollout_app.command("history")
def rollout_history(ref: AliasRef, *, as_json: AsJson = False) -> None:
    """Every rollout of the alias, oldest first, aborted ones included: plan, signed steps,
    verdicts, abort reason, rollback figures."""
    r = parse_reference(ref, require="alias")
    with reported(as_json), registry_client() as client:
        answer = client.rollout_history(r.repo, str(r.alias))
    emit(
        answer,
        as_json,
        lambda a: (
            "\n\n".join(_plan_lines(x) for x in a.get("rollouts") or [])
            or f"{a.get('repository')}@{a.get('alias')} has never had a rollout"
        ),
    )


@rollout_app.command("weights")
def rollout_weights(ref: AliasRef, *, as_json: AsJson = False) -> None:
    """The signed step's weights for request-level routers (docs/rollouts.md#weights)."""
    r = parse_reference(ref, require="alias")
    with reported(as_json), registry_client() as client:
        state = client.rollout_weights(r.repo, str(r.alias))
    emit(
        state,
        as_json,
        lambda s: "\n".join(f"{b['weight']:>3}%  {b['digest']}" for b in s.get("backends", [])),
    )
