"""The analysis of a rollout's current step, and what the registry does about it
(docs/rollouts.md#analysis). The rollout controller (``controller.py``) runs ``tick`` in
every ``serve`` process; ``rollout analyze`` runs ``analyze`` for one alias now.

For the latest rollout of an alias whose plan the alias's role signs and which has an
analysis document (a plan without one stays manual):

1. a quarantine of the candidate aborts the rollout (reason ``candidate quarantined``);
2. the current signed step is judged (``attest.rollout.judge_step``) from the fleet
   reports of the window (``reports.reports_in_window``, the registry's clock), against
   the workers its cohort should hold (every worker that reported during the rollout and
   whose bucket is inside the step's weight); a report of a digest the signed step did
   not assign its key when it arrived is a fault, evidence for no cohort, and each
   worker's weight is bounded (docs/rollouts.md#evidence);
3. before each step it signs the known-good pool's capacity is checked
   (``attest.rollout.capacity_check``): a pass with too little capacity holds (the first
   step is a person's: ``rollout advance``, as for a plan without analysis);
4. ``fail`` aborts at once with the reason and records the rollback's detection and
   decision (``rollouts.detected_at``, ``decided_at``, ``figures``); ``inconclusive`` holds
   (the step row's verdict and analysis, audited ``rollout.hold`` and the ``rollout.held``
   webhook when the verdict becomes inconclusive; nothing signed); ``pass`` signs the
   next step, or ``paused`` at this one when the analysis's ``manual`` names the next
   weight (a person runs ``rollout advance``);
5. after an abort, later ticks record the route's convergence and the stable cohort's
   recovery (``converged_at``, ``recovered_at``, the figures).

Every action goes through ``service.advance``/``service.abort`` with the step judged
(``JudgedStep``): it is taken only if the signed step is still that one, so two serve
processes, or two registries on one database, judging the same step sign it once (the
other gets ``StepTaken`` and does nothing). The actor is ``rollout-controller`` (on the
authority of the rollout's creator, whose alias decision steps (1) to (5) are checked
again before each step).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from modelward.attest.rollout import (
    Judgement,
    RolloutPlan,
    RolloutStep,
    StepRefused,
    WindowReport,
    capacity_check,
    inside_thresholds,
    judge_step,
    parse_plan,
    resolve_digest,
    verify_step,
)
from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.quarantine.service import is_quarantined
from modelward.registry.domains.repos.service import writable_repo
from modelward.registry.domains.rollouts import service
from modelward.registry.domains.rollouts.reports import reports_in_window
from modelward.registry.domains.rollouts.rows import ACTIVE
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.tuf.view import signed_plan, signed_step
from modelward.registry.domains.webhooks import enqueue
from modelward.registry.errors import NotFound, RegistryError
from modelward.registry.kit.logs import log_failure
from modelward.registry.models import (
    Principal,
    Repository,
    Rollout,
    RolloutReport,
    RolloutStepRow,
    utcnow,
)

__all__ = ["CONTROLLER", "DEFAULT_WINDOW_SECONDS", "analyze", "tick"]

log = logging.getLogger("modelward.registry.rollouts")

CONTROLLER = "rollout-controller"
DEFAULT_WINDOW_SECONDS = 60  # a plan's window of 0: judged over the last minute
FOLLOW_ABORT_FOR = timedelta(days=1)  # after that, an unconverged rollback is left as is
MAX_RECOVERY_WINDOWS = 1000


@dataclass(frozen=True)
class _Seen:
    """What the read phase found for one rollout."""

    row_id: int
    rollout_id: str
    repo_id: int
    repo_name: str
    alias: str
    plan: RolloutPlan
    step: RolloutStep | None
    step_row_id: int | None
    step_at: datetime | None
    actor: Caller


def _window(plan: RolloutPlan) -> int:
    return plan.window_seconds or DEFAULT_WINDOW_SECONDS


def _controller(session: Session, row: Rollout) -> Caller:
    """The controller acts on the authority of the rollout's creator, as itself."""
    creator = session.get(Principal, row.created_by)
    if creator is None:  # pragma: no cover - a foreign key
        raise NotFound(f"rollout {row.rollout_id}'s creator is gone")
    return Caller(id=creator.id, name=CONTROLLER, role=creator.role)


def _judge_json(judgement: Judgement, capacity: dict[str, Any] | None) -> str:
    doc = judgement.to_json()
    doc["capacity"] = capacity
    return json.dumps(doc, sort_keys=True, default=str)


def _read(session: Session, state: AppState, row: Rollout) -> _Seen | str:
    """(the read phase) the signed plan and step of ``row``, or why nothing is judged."""
    repo_name = session.scalar(select(Repository.name).where(Repository.id == row.repo_id))
    assert repo_name is not None  # noqa: S101 - a foreign key
    repo = repository(session, state)
    plan = signed_plan(repo, repo_name, row.alias)
    if plan is None or plan.sha256 != row.plan_sha256:
        return "the plan is not signed yet"
    if plan.analysis_sha256 is None:
        return "the plan has no analysis: it advances by hand (rollout advance)"
    current = signed_step(repo, repo_name, row.alias)
    step = None
    if current is not None and current[0].rollout_id == plan.rollout_id:
        try:
            step = verify_step(plan, current[0])
        except StepRefused as exc:
            return f"the signed step does not follow the plan ({exc}): abort it"
    if step is None:
        return "no step signed yet: the first step is a person's (rollout advance)"
    if step.state in ("aborted", "completed"):
        return f"the signed step is {step.state}: nothing to judge"
    step_row = None
    if step is not None:
        step_row = session.scalars(
            select(RolloutStepRow)
            .where(RolloutStepRow.rollout_pk == row.id, RolloutStepRow.step_index == step.index)
            .order_by(RolloutStepRow.seq.desc())
            .limit(1)
        ).first()
    first_row = None
    if step is not None:
        first_row = session.scalars(  # when this index was first signed: its window's start
            select(RolloutStepRow.at)
            .where(RolloutStepRow.rollout_pk == row.id, RolloutStepRow.step_index == step.index)
            .order_by(RolloutStepRow.seq)
            .limit(1)
        ).first()
    return _Seen(
        row_id=row.id,
        rollout_id=row.rollout_id,
        repo_id=row.repo_id,
        repo_name=repo_name,
        alias=row.alias,
        plan=plan,
        step=step,
        step_row_id=step_row.id if step_row is not None else None,
        step_at=first_row,
        actor=_controller(session, row),
    )


def _judge(session: Session, seen: _Seen, now: datetime) -> tuple[Judgement, dict[str, Any]]:
    """(2) and (3): the step's judgement and the capacity check, from the reports."""
    plan, step = seen.plan, seen.step
    window = _window(plan)
    longest = max((int(t["for_seconds"]) for t in plan.analysis.get("triggers", [])), default=0)
    since = now - timedelta(seconds=max(window, longest))
    until = now + timedelta(microseconds=1)
    reports = [
        WindowReport.from_report(s.report, s.received_at, s.assigned)
        for s in reports_in_window(session, seen.repo_id, seen.alias, seen.row_id, since, until)
    ]
    in_window = [r for r in reports if r.received_at >= now - timedelta(seconds=window)]
    capacity = capacity_check(plan, in_window)
    assert step is not None  # noqa: S101 - _read returns no step as a reason
    known = session.scalars(
        select(RolloutReport.worker_keyid).where(RolloutReport.rollout_pk == seen.row_id).distinct()
    ).all()
    expected = [k for k in known if resolve_digest(plan, step, k) == plan.candidate]
    judgement = judge_step(
        plan,
        [r for r in reports if r.digest == plan.candidate],
        [r for r in reports if r.digest == plan.stable],
        expected_candidate_keyids=expected,
        window_seconds=window,
        now=now,
        step_started_at=seen.step_at,
    )
    if judgement.verdict == "pass" and not capacity.ok and step.state != "completed":
        judgement = Judgement("inconclusive", [f"capacity: {capacity.reason}"], judgement.metrics)
    return judgement, capacity.to_json()


def _set_verdict(session: Session, step_row_id: int | None, verdict: str, doc: str) -> bool:
    """The judged step row's verdict and evidence; True when the verdict changed."""
    if step_row_id is None:
        return False
    step_row = session.get(RolloutStepRow, step_row_id)
    if step_row is None:
        return False
    changed = step_row.verdict != verdict
    step_row.verdict, step_row.analysis = verdict, doc
    return changed


def _hold(state: AppState, seen: _Seen, judgement: Judgement, doc: str) -> None:
    """Inconclusive: recorded on the step row, audited and announced when it becomes so."""
    with state.db.write() as session:
        row = session.get(Rollout, seen.row_id)
        if row is None or row.state not in ACTIVE:
            return
        if not _set_verdict(session, seen.step_row_id, "inconclusive", doc):
            return
        details = {
            "rollout_id": seen.rollout_id,
            "index": seen.step.index if seen.step is not None else None,
            "reasons": judgement.reasons[:10],
        }
        append(
            session,
            actor=CONTROLLER,
            action="rollout.hold",
            subject=f"{seen.repo_name}@{seen.alias}",
            details=details,
        )
        enqueue(  # the data of every rollout event (docs/webhooks.md#events), and reasons
            session,
            "rollout.held",
            {
                "repository": seen.repo_name,
                "alias": seen.alias,
                "rollout_id": seen.rollout_id,
                "plan_sha256": seen.plan.sha256,
                "index": details["index"],
                "weight": seen.step.weight if seen.step is not None else 0,
                "state": row.state,
                "reason": "; ".join(judgement.reasons),
                "actor": CONTROLLER,
                "reasons": details["reasons"],
            },
        )


def _abort(
    state: AppState, seen: _Seen, judgement: Judgement, doc: str, capacity: dict[str, Any]
) -> None:
    """(4) fail: abort at once, recording detection and decision in the same transaction."""
    step = seen.step
    where = f"step {step.index} ({step.weight}%)" if step is not None else "the start"
    reason = f"analysis failed at {where}: " + "; ".join(judgement.reasons)

    def record(session: Session, row: Rollout) -> None:
        _set_verdict(session, seen.step_row_id, "fail", doc)
        decided = utcnow()
        detected = judgement.detected_at or decided
        row.detected_at, row.decided_at = detected, decided
        candidate = judgement.metrics.get("candidate", {})
        row.figures = json.dumps(
            {
                "detection_seconds": (
                    (detected - seen.step_at).total_seconds() if seen.step_at else None
                ),
                "decision_seconds": (decided - detected).total_seconds(),
                "convergence_seconds": None,
                "recovery_seconds": None,
                "capacity_before": {
                    "stable": capacity["stable"],
                    "candidate": capacity["candidate"],
                },
                "capacity_after": None,
                "retry_volume": candidate.get("retries", 0),
                "reason": reason[:2000],
                "fired_trigger": judgement.fired_trigger,
            },
            sort_keys=True,
        )

    service.abort(
        state,
        repo_name=seen.repo_name,
        alias=seen.alias,
        reason=reason[:2000],
        caller=seen.actor,
        judged=service.JudgedStep(seen.rollout_id, step.index if step else None, record=record),
    )


def _advance(state: AppState, seen: _Seen, judgement: Judgement, doc: str) -> str:
    """(4) pass: the next step, or ``paused`` here when ``manual`` names the next weight."""
    plan, step = seen.plan, seen.step
    assert step is not None  # noqa: S101 - _read returns no step as a reason
    if step.state == "paused":
        with state.db.write() as session:
            _set_verdict(session, seen.step_row_id, "pass", doc)
        return "paused"
    next_index = step.index + 1
    pause = plan.steps[next_index] in plan.analysis.get("manual", [])

    def record(session: Session, _row: Rollout) -> None:
        _set_verdict(session, seen.step_row_id, "pass", doc)

    verb = "paused before" if pause else "advanced to"
    service.advance(
        state,
        repo_name=seen.repo_name,
        alias=seen.alias,
        reason=f"analysis passed: {verb} {plan.steps[next_index]}%",
        caller=seen.actor,
        judged=service.JudgedStep(seen.rollout_id, step.index, pause=pause, record=record),
    )
    return "paused" if pause else "advanced"


def _abort_quarantined(state: AppState, row_id: int) -> dict[str, Any]:
    """(1) for a rollout with nothing to judge (no step yet, no analysis): abort it."""
    with state.db.read() as session:
        row = session.get(Rollout, row_id)
        assert row is not None  # noqa: S101 - read a moment ago
        repo_name = session.scalar(select(Repository.name).where(Repository.id == row.repo_id))
        assert repo_name is not None  # noqa: S101 - a foreign key
        rollout_id, alias, actor = row.rollout_id, row.alias, _controller(session, row)
        reason = f"the candidate {row.candidate} is quarantined"
    service.abort(
        state,
        repo_name=repo_name,
        alias=alias,
        reason=reason,
        caller=actor,
        judged=service.JudgedStep(rollout_id, None),
    )
    return {"rollout_id": rollout_id, "verdict": "fail", "reasons": [reason], "action": "aborted"}


def _act(state: AppState, row_id: int, now: datetime) -> dict[str, Any]:
    """Judge rollout ``row_id`` now and act on it; the answer says what was done."""
    with state.db.read() as session:
        row = session.get(Rollout, row_id)
        if row is None:
            raise NotFound(f"rollout #{row_id} is gone")
        if row.state not in ACTIVE:
            return {"rollout_id": row.rollout_id, "state": row.state, "action": "none"}
        # (1): a quarantined candidate aborts, whatever the step (before the first too)
        quarantined = is_quarantined(session, row.candidate)
        seen = _read(session, state, row)
        if isinstance(seen, str):
            nothing = {"rollout_id": row.rollout_id, "action": "none", "why": seen}
        else:
            judgement, capacity = _judge(session, seen, now)
    if isinstance(seen, str):
        return _abort_quarantined(state, row_id) if quarantined else nothing
    if quarantined:
        judgement = Judgement(
            "fail",
            [f"the candidate {seen.plan.candidate} is quarantined"],
            judgement.metrics,
            None,
            now,
        )
    doc = _judge_json(judgement, capacity)
    answer: dict[str, Any] = {"rollout_id": seen.rollout_id, **json.loads(doc)}
    try:
        if judgement.verdict == "fail":
            _abort(state, seen, judgement, doc, capacity)
            answer["action"] = "aborted"
        elif judgement.verdict == "inconclusive":
            _hold(state, seen, judgement, doc)
            answer["action"] = "held"
        else:
            answer["action"] = _advance(state, seen, judgement, doc)
    except service.StepTaken as exc:  # another process acted on this step first
        answer["action"], answer["why"] = "none", str(exc)
    except RegistryError as exc:  # e.g. the alias decision refuses the candidate now
        if judgement.verdict == "fail":
            raise
        refused = Judgement("inconclusive", [str(exc)], judgement.metrics)
        _hold(state, seen, refused, _judge_json(refused, capacity))
        answer["action"], answer["why"] = "held", str(exc)
    return answer


def _follow_abort(state: AppState, row_id: int, now: datetime) -> None:
    """(5) after an abort: convergence (every worker that reported the candidate it was
    assigned during the rollout has since reported the stable digest), the capacity then,
    the retries from detection to convergence (or now), and recovery (the end of the first
    window after the abort in which the stable cohort is inside every threshold)."""
    with state.db.read() as session:
        row = session.get(Rollout, row_id)
        if row is None or row.decided_at is None or row.detected_at is None:
            return
        plan = parse_plan(row.plan_json)
        decided, detected = row.decided_at, row.detected_at
        canaries = set(
            session.scalars(
                select(RolloutReport.worker_keyid)
                .where(
                    RolloutReport.rollout_pk == row_id,
                    RolloutReport.digest == plan.candidate,
                    RolloutReport.assigned == plan.candidate,  # a canary, not a fault
                )
                .distinct()
            ).all()
        )
        since = min(detected, decided) - timedelta(seconds=_window(plan))
        until = now + timedelta(microseconds=1)
        reports = reports_in_window(session, row.repo_id, row.alias, row_id, since, until)
        figures = json.loads(row.figures or "{}")
        converged = row.converged_at
        recovered = row.recovered_at
    after = [s for s in reports if s.received_at >= decided]
    if converged is None:
        first: dict[str, datetime] = {}
        for s in after:
            if s.digest == plan.stable and s.worker_keyid in canaries:
                first.setdefault(s.worker_keyid, s.received_at)
        if set(first) == canaries:  # no canary at all: converged at the decision
            converged = max(first.values(), default=decided)
            latest = {s.worker_keyid: s for s in reports if s.received_at <= converged}
            figures["capacity_after"] = {
                cohort: sum(s.report.capacity for s in latest.values() if s.digest == digest)
                for cohort, digest in (("stable", plan.stable), ("candidate", plan.candidate))
            }
            figures["convergence_seconds"] = (converged - detected).total_seconds()
        figures["retry_volume"] = sum(
            s.report.retries
            for s in reports
            if s.received_at >= detected and (converged is None or s.received_at <= converged)
        )
    if recovered is None:
        window = timedelta(seconds=_window(plan))
        start = decided
        for _ in range(MAX_RECOVERY_WINDOWS):
            end = start + window
            if end > now:
                break
            stable = [
                WindowReport.from_report(s.report, s.received_at, s.assigned)
                for s in after
                if start <= s.received_at < end and s.digest == plan.stable
            ]
            if inside_thresholds(plan, stable):
                recovered = end
                figures["recovery_seconds"] = (end - detected).total_seconds()
                break
            start = end
    with state.db.write() as session:
        row = session.get(Rollout, row_id)
        if row is None:
            return
        row.converged_at, row.recovered_at = converged, recovered
        row.figures = json.dumps(figures, sort_keys=True)


def analyze(
    state: AppState, *, repo_name: str, alias: str, caller: Caller, now: datetime | None = None
) -> dict[str, Any]:
    """``rollout analyze``: judge the latest rollout of ``repo_name@alias`` now and act on
    it as the controller would. The registry signs the step the judge gives, so ``caller``
    must be one who may advance or abort it by hand: a publisher of the repository or an
    admin (``PUBLISH`` in auth.authz; 403 otherwise). The actions are the controller's, on
    the rollout creator's authority; audited ``rollout.analyze`` with the verdict and the
    action."""
    now = now or utcnow()
    with state.db.read() as session:
        repo_row = writable_repo(session, repo_name, caller)
        row_id = session.scalar(
            select(Rollout.id)
            .where(Rollout.repo_id == repo_row.id, Rollout.alias == alias)
            .order_by(Rollout.id.desc())
            .limit(1)
        )
    if row_id is None:
        raise NotFound(f"{repo_name}@{alias} has never had a rollout")
    answer = _act(state, row_id, now)
    _follow_abort(state, row_id, now)
    with state.db.write() as session:
        append(
            session,
            actor=caller.name,
            action="rollout.analyze",
            subject=f"{repo_name}@{alias}",
            details={
                "rollout_id": answer.get("rollout_id"),
                "verdict": answer.get("verdict"),
                "action": answer.get("action"),
            },
        )
    answer.update(repository=repo_name, alias=alias, at=iso(now))
    return answer


def tick(state: AppState, now: datetime | None = None) -> int:
    """One pass of the controller: every rollout under way, and every abort still being
    followed, judged and acted on; a failure of one is logged and the others go on. One
    small query when nothing is under way. Returns how many rollouts were looked at."""
    now = now or utcnow()
    with state.db.read() as session:
        ids = session.scalars(
            select(Rollout.id).where(
                or_(
                    Rollout.state.in_(ACTIVE),
                    and_(
                        Rollout.state == "aborted",
                        Rollout.decided_at.is_not(None),
                        Rollout.decided_at >= now - FOLLOW_ABORT_FOR,
                        or_(Rollout.converged_at.is_(None), Rollout.recovered_at.is_(None)),
                    ),
                )
            )
        ).all()
    for row_id in ids:
        try:
            answer = _act(state, row_id, now)
            _follow_abort(state, row_id, now)
        except Exception as exc:  # noqa: BLE001 - the controller never stops the server
            log_failure(log, "rollout_analysis_failed", exc, rollout=row_id)
            continue
        if answer.get("action") not in (None, "none", "held"):
            log.info(json.dumps({"event": "rollout_analysis", **_brief(answer)}))
    return len(ids)


def _brief(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: answer.get(k) for k in ("rollout_id", "verdict", "action", "reasons")}
