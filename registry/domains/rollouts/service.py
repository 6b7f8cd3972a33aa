"""Rollouts: start (a plan through the alias decision and the alias's TUF role), advance
one step at a time, abort toward the stable digest (docs/rollouts.md); what they answer,
and status, weights and history, are ``views``. Every decision reads the signed state
(``signing.tuf.view``); the ``rollouts`` and ``rollout_steps`` rows are the record of it.

Authority (docs/rollouts.md#authority): the registry's online key signs the steps, and this
module signs only

1. the plan's first step (index 0), once the plan is signed by the alias's role;
2. the signed step's next index (never a skip), the weight the plan names there;
3. an abort at any time (weight 0: every worker on the stable digest), after which the
   plan is done: a new rollout needs a new plan, with a new rollout id and its signatures.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.alias_decision import MoveRequest
from modelward.attest.names import ALIAS_RE
from modelward.attest.rollout import (
    PlanInvalid,
    RolloutPlan,
    SeenStep,
    StepRefused,
    make_plan,
    make_step,
    parse_analysis,
    verify_next_step,
    verify_step,
)
from modelward.attest.rollout.paths import rollout_path, rollout_role, step_path
from modelward.attest.tuf import online_role
from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.moves import repository as moves
from modelward.registry.domains.moves.service import decide, require_move_allowed
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.rollouts.cohorts import (
    cohorts_json,
    known_fleet,
    plan_fleet,
    refuse_unjudgeable,
)
from modelward.registry.domains.rollouts.rows import active_rollout, latest_rollout
from modelward.registry.domains.rollouts.views import rollout_json
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.proposals import sign_online, supersede
from modelward.registry.domains.signing.publish import sync
from modelward.registry.domains.signing.tuf.bootstrap import delegated_as_wanted
from modelward.registry.domains.signing.tuf.keys import ALIAS_KEY
from modelward.registry.domains.signing.tuf.proposals import (
    delegated_role_for,
    propose_target,
)
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.view import signed_plan, signed_step
from modelward.registry.domains.webhooks import enqueue
from modelward.registry.errors import BadRequest, Conflict, NotFound
from modelward.registry.models import Rollout, RolloutStepRow, utcnow

__all__ = ["JudgedStep", "StepTaken", "abort", "advance", "start"]

MAX_REASON = 2000


class RolloutConflict(Conflict):
    """A rollout action the signed state does not allow (``detail`` says what it holds)."""

    code = "rollout_refused"


class StepTaken(RolloutConflict):
    """The signed step is no longer the one the analysis judged: another registry process
    (or a person) acted first. The rollout controller does nothing then."""


@dataclass(frozen=True)
class JudgedStep:
    """What the rollout controller acts on (registry/domains/rollouts/analysis.py): the
    rollout and the signed step index it judged (None: no step yet), whether to pause there
    instead of advancing (the analysis's ``manual``), and what to record in the same write
    transaction as the signed step (the verdict, the rollback figures)."""

    rollout_id: str
    index: int | None
    pause: bool = False
    record: Callable[[Session, Rollout], None] | None = None


def _require_judged(row: Rollout, seen: SeenStep | None, judged: JudgedStep) -> None:
    index = None if seen is None else seen.index
    if row.rollout_id != judged.rollout_id or index != judged.index:
        raise StepTaken(
            f"rollout {judged.rollout_id} step {judged.index} was judged, the signed step is "
            f"{row.rollout_id} {index}: acted on already"
        )
    if judged.pause and (seen is None or seen.state == "paused"):
        raise StepTaken(f"rollout {judged.rollout_id} is already paused at step {index}")


def _under_way(
    session: Session, repo_id: int, repo_name: str, alias: str, judged: JudgedStep | None
) -> Rollout:
    """The alias's rollout under way. None under way: NotFound for a person; StepTaken
    for the controller (``judged``): another process (the controller's tick, an
    ``analyze``, a person) ended the rollout it judged while it judged, so it does
    nothing."""
    row = active_rollout(session, repo_id, alias)
    if row is not None:
        return row
    if judged is not None:
        raise StepTaken(f"rollout {judged.rollout_id} is no longer under way")
    raise NotFound(f"{repo_name}@{alias} has no rollout under way")


def _require_passed(session: Session, row: Rollout, index: int) -> None:
    """A plan with an analysis advances past ``index`` only after that step's analysis
    passed (docs/rollouts.md#analysis)."""
    verdict = session.scalar(
        select(RolloutStepRow.verdict)
        .where(RolloutStepRow.rollout_pk == row.id, RolloutStepRow.step_index == index)
        .order_by(RolloutStepRow.seq.desc())
        .limit(1)
    )
    if verdict != "pass":
        raise RolloutConflict(
            f"rollout {row.rollout_id}: step {index}'s analysis has not passed (verdict "
            f"{verdict or 'none yet'}); the plan advances only after it passes "
            "(modelward rollout analyze)",
            detail={"index": index, "verdict": verdict},
        )


def _plan_error(exc: PlanInvalid) -> BadRequest:
    return BadRequest(str(exc), code="invalid_rollout_plan", detail={"field": exc.field})


def _tuf(session: Session, state: AppState, repo_name: str, caller: Caller) -> MetadataRepository:
    """The TUF repository, its delegations made for ``repo_name`` (the plan paths and the
    rollout role included) first when they are not yet as the database asks."""
    repo = repository(session, state)
    keys = trust_of(state.settings).keys
    if not keys.has(ALIAS_KEY):
        raise RolloutConflict(
            "this registry has no online alias key (tuf_keys_dir/aliases.key): nobody could "
            "sign the rollout's steps (docs/rollouts.md#signed-state)",
            detail={"missing": "aliases.key"},
        )
    if not delegated_as_wanted(session, repo, keys, state.default_policy_yaml, repo_name):
        sync(session, state, repo, proposer_id=caller.id)
    return repo


def start(
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    candidate: str,
    steps: tuple[int, ...],
    window_seconds: int,
    min_samples: int,
    analysis_text: str | None,
    reason: str | None,
    caller: Caller,
    allow_no_fleet: bool = False,
) -> dict[str, Any]:
    """Propose the plan of a rollout of ``repo_name@alias`` to ``candidate``.

    1. the alias name and the analysis document (400 ``invalid_rollout_plan``, naming the
       field);
    2. the alias's stable digest is the one its TUF role signs (409 when none); the fleet
       the registry knows (``cohorts.known_fleet``) is listed in the plan (``fleet``: the
       workers its cohorts are drawn from) when it holds 1 to MAX_FLEET workers, and a plan
       whose analysis could never judge its first step on that fleet, or with no worker
       known, is refused (409 ``rollout_refused``, ``cohorts.refuse_unjudgeable``), unless
       ``allow_no_fleet`` (no worker known; audited ``rollout.start.no_fleet``);
    3. the candidate passes steps (1) to (5) of the alias decision for ``caller`` (the
       reviewers' signatures on the plan are step (6), the approvals);
    4. no other rollout of the alias is under way, nor a completed one still in force (its
       candidate becomes stable by a move of the alias) (409 ``rollout_refused``);
    5. the plan is proposed in the alias's role (signed at once when the online key signs
       the alias); the rollout is recorded ``planned`` and audited ``rollout.start``.
    """
    # (1): names and the analysis
    if not ALIAS_RE.fullmatch(alias):
        raise BadRequest(f"invalid alias name {alias!r}")
    analysis, analysis_sha = None, None
    if analysis_text is not None:
        raw = analysis_text.encode()
        try:
            analysis = parse_analysis(raw)
        except PlanInvalid as exc:
            raise _plan_error(exc) from exc
        analysis_sha = hashlib.sha256(raw).hexdigest()
    # (2): the stable digest, as signed, and the fleet the registry knows
    with state.db.read() as session:
        repo_id = get_repo(session, repo_name, caller).id
        stable = state.signed.aliases(session, repo_name).get(alias)
        known = known_fleet(session, repo_id, alias, utcnow())
    if stable is None:
        raise RolloutConflict(
            f"{repo_name}@{alias} has no signed target: a rollout starts from a signed "
            "stable digest (move the alias first, docs/tuf.md#proposals)",
            detail={"alias": alias},
        )
    # (3): the alias decision, steps (1) to (5), for the candidate
    require_move_allowed(state, repo_name=repo_name, alias=alias, digest=candidate, mover=caller)
    try:
        plan = make_plan(
            rollout_id=uuid.uuid4().hex,
            repository=repo_name,
            alias=alias,
            stable=stable,
            candidate=candidate,
            steps=steps,
            window_seconds=window_seconds,
            min_samples=min_samples,
            analysis=analysis,
            analysis_sha256=analysis_sha,
            fleet=plan_fleet(known),
        )
    except PlanInvalid as exc:
        raise _plan_error(exc) from exc
    refuse_unjudgeable(plan, len(known), allow_no_fleet=allow_no_fleet)
    with state.db.write() as session:
        repo_row = get_repo(session, repo_name, caller)
        # (4): one rollout at a time
        running = active_rollout(session, repo_row.id, alias)
        if running is not None:
            raise RolloutConflict(
                f"{repo_name}@{alias} has a rollout under way ({running.rollout_id}, "
                f"{running.state}): abort it first (modelward rollout abort)",
                detail={"rollout_id": running.rollout_id, "state": running.state},
            )
        repo = _tuf(session, state, repo_name, caller)
        _refuse_over_completed(
            session, repo, repo_id=repo_row.id, repo_name=repo_name, alias=alias, stable=stable
        )
        # (5): the plan, proposed in the alias's role
        path = rollout_path(repo_name, alias)
        try:
            role = delegated_role_for(repo, path)
        except NotFound as exc:
            raise RolloutConflict(
                f"no TUF role is delegated {path} yet (a targets proposal waits for the "
                "admins: modelward trust pending)",
                detail={"path": path},
            ) from exc
        supersede(session, path)
        proposal = propose_target(
            session,
            repo,
            path=path,
            data=plan.raw,
            proposer_id=caller.id,
            reason=reason,
            from_digest=stable,
            to_digest=candidate,
            delegated_role=role,
            custom={"plan": plan.raw.decode()},
        )
        if role.name == online_role(repo_name):
            sign_online(session, state, repo, proposal)
        row = Rollout(
            rollout_id=plan.rollout_id,
            repo_id=repo_row.id,
            alias=alias,
            stable=stable,
            candidate=candidate,
            plan_json=plan.raw,
            plan_sha256=plan.sha256,
            analysis_text=analysis_text,
            state="planned",
            step_index=-1,
            proposal_id=proposal.id,
            reason=reason,
            created_by=caller.id,
        )
        session.add(row)
        session.flush()
        append(
            session,
            actor=caller.name,
            action="rollout.start",
            subject=f"{repo_name}@{alias}",
            details={
                "rollout_id": plan.rollout_id,
                "plan_sha256": plan.sha256,
                "stable": stable,
                "candidate": candidate,
                "steps": list(plan.steps),
                "proposal": proposal.id,
            },
        )
        if allow_no_fleet and not known:
            append(
                session,
                actor=caller.name,
                action="rollout.start.no_fleet",
                subject=f"{repo_name}@{alias}",
                details={"rollout_id": plan.rollout_id, "why": "no worker known; started anyway"},
            )
        _notify(session, "rollout.started", repo_name, row, at=(None, 0), why=reason, caller=caller)
        answer = rollout_json(session, repo, repo_name, row, proposal.state)
        answer["cohorts"] = cohorts_json(plan, len(known))
        return answer


def _refuse_over_completed(
    session: Session,
    repo: MetadataRepository,
    *,
    repo_id: int,
    repo_name: str,
    alias: str,
    stable: str,
) -> None:
    """A completed rollout whose plan is still in force runs every worker on its candidate;
    a new plan from the same stable digest would send them back. Its candidate becomes the
    stable digest by a move of the alias (signed as any), which ends the plan."""
    latest = latest_rollout(session, repo_id, alias)
    plan = signed_plan(repo, repo_name, alias)
    if (
        latest is not None
        and latest.state == "completed"
        and plan is not None
        and plan.sha256 == latest.plan_sha256
        and plan.stable == stable
    ):
        raise RolloutConflict(
            f"{repo_name}@{alias}: rollout {latest.rollout_id} completed and every worker runs "
            f"{latest.candidate}; move the alias there first (modelward alias set "
            f"{repo_name}@{alias} {latest.candidate}), which ends its plan",
            detail={"rollout_id": latest.rollout_id, "candidate": latest.candidate},
        )


def _publish_step(
    session: Session,
    state: AppState,
    repo: MetadataRepository,
    row: Rollout,
    plan: RolloutPlan,
    *,
    index: int,
    step_state: str,
    reason: str,
    seen: SeenStep | None,
    caller: Caller,
) -> int:
    """Sign and publish ``plan``'s step ``index`` in ``step_state`` with the online key,
    checked first as a worker will check it, and as the next step of the chain
    (``verify_next_step``: no step skipped); records the history row."""
    step = make_step(plan, index=index, state=step_state, reason=reason)
    try:
        verify_next_step(plan, step, seen)
    except StepRefused as exc:  # the registry refuses what a worker would
        raise RolloutConflict(str(exc), detail={"check": exc.check}) from exc
    repo_name = plan.repository
    path = step_path(repo_name, plan.alias)
    role = delegated_role_for(repo, path)
    if role.name != rollout_role(repo_name):
        raise RolloutConflict(f"{path} is delegated to {role.name}, not the rollout role")
    supersede(session, path)
    proposal = propose_target(
        session,
        repo,
        path=path,
        data=step.raw,
        proposer_id=caller.id,
        reason=reason or None,
        from_digest=plan.stable,
        to_digest=plan.candidate,
        delegated_role=role,
        custom={"step": step.raw.decode()},
    )
    sign_online(session, state, repo, proposal)
    seq = len(
        list(session.scalars(select(RolloutStepRow.id).where(RolloutStepRow.rollout_pk == row.id)))
    )
    session.add(
        RolloutStepRow(
            rollout_pk=row.id,
            seq=seq,
            step_index=index,
            weight=step.weight,
            state=step_state,
            reason=reason or None,
            actor=caller.name,
            tuf_version=proposal.version,
        )
    )
    row.state, row.step_index = step_state, index
    if step_state in ("aborted", "completed"):
        row.finished_at = utcnow()
    return step.weight


def _signed_or_refused(repo: MetadataRepository, row: Rollout, repo_name: str) -> RolloutPlan:
    plan = signed_plan(repo, repo_name, row.alias)
    if plan is None or plan.sha256 != row.plan_sha256:
        raise RolloutConflict(
            f"{repo_name}@{row.alias}: rollout {row.rollout_id}'s plan is not signed by the "
            f"alias's role yet (proposal #{row.proposal_id}: modelward trust sign)",
            code="rollout_plan_unsigned",
            detail={"rollout_id": row.rollout_id, "proposal": row.proposal_id},
        )
    return plan


# A signed step's reason that starts so is read as the analysis's verdict by a release record
# (attest/release/_verdicts.py): only the controller (``judged``) may sign one.
_VERDICT_REASONS = ("analysis passed: ", "analysis failed at ")


def _person_reason(reason: str, judged: JudgedStep | None) -> None:
    if judged is None and reason.lstrip().startswith(_VERDICT_REASONS):
        raise BadRequest(
            f"a reason starting {reason.lstrip()[:18]!r} is the analysis's verdict, signed "
            "only by the rollout controller: say it otherwise",
            code="reason_reserved",
        )


def advance(
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    reason: str,
    caller: Caller,
    judged: JudgedStep | None = None,
) -> dict[str, Any]:
    """The next step of the rollout under way, one at a time.

    1. a rollout of the alias is under way, and its plan is the one the alias's role signs;
    2. the step signed now (not the database row) decides the next index: 0 when none is
       signed for this plan, else its index + 1; an aborted or completed one ends it;
    3. the candidate passes steps (1) to (5) of the alias decision again for ``caller``
       (a quarantine since the start refuses);
    4. the step is signed with the online key (``completed`` at the plan's last step),
       recorded and audited ``rollout.advance``.

    A plan with an analysis advances past a step only after its analysis passed (or the
    controller paused it for a person); ``judged``: the controller's action, taken only if
    the signed step is still the one it judged (else StepTaken), ``paused`` at the same
    index when ``judged.pause``.
    """
    _person_reason(reason, judged)
    # (1) and (3) first, outside the write transaction (it judges the bundle): the
    # candidate judged is the signed plan's, never the row's
    with state.db.read() as session:
        repo_row = get_repo(session, repo_name, caller)
        row = _under_way(session, repo_row.id, repo_name, alias, judged)
        plan = _signed_or_refused(repository(session, state), row, repo_name)
    require_move_allowed(
        state, repo_name=repo_name, alias=alias, digest=plan.candidate, mover=caller
    )
    with state.db.write() as session:
        repo_row = get_repo(session, repo_name, caller)
        row = _under_way(session, repo_row.id, repo_name, alias, judged)
        if row.plan_sha256 != plan.sha256:
            raise RolloutConflict(
                f"{repo_name}@{alias}: the rollout changed while its candidate was judged; "
                "advance again",
            )
        repo = _tuf(session, state, repo_name, caller)
        # (1): the signed plan, read again in the transaction that acts on it
        if _signed_or_refused(repo, row, repo_name).sha256 != plan.sha256:
            raise RolloutConflict(f"{repo_name}@{alias}: the signed plan changed; advance again")
        # (2): the signed step decides the next index
        current = signed_step(repo, repo_name, alias)
        seen = None
        if current is not None and current[0].rollout_id == plan.rollout_id:
            try:
                step = verify_step(plan, current[0])
            except StepRefused as exc:  # a step the online key signed out of the plan
                raise RolloutConflict(
                    f"the signed step does not follow the plan ({exc}): abort the rollout",
                    detail={"check": exc.check},
                ) from exc
            if step.state in ("aborted", "completed"):
                raise RolloutConflict(
                    f"rollout {plan.rollout_id} is {step.state}: start a new rollout",
                    detail={"state": step.state},
                )
            seen = SeenStep(step.rollout_id, step.index, step.state)
        if judged is not None:
            _require_judged(row, seen, judged)
        elif plan.analysis_sha256 is not None and seen is not None and seen.state != "paused":
            _require_passed(session, row, seen.index)
        pause = judged is not None and judged.pause and seen is not None
        index = 0 if seen is None else seen.index + (0 if pause else 1)
        last = len(plan.steps) - 1
        # (4): sign it
        weight = _publish_step(
            session,
            state,
            repo,
            row,
            plan,
            index=index,
            step_state="paused" if pause else "completed" if index == last else "running",
            reason=reason,
            seen=seen,
            caller=caller,
        )
        if judged is not None and judged.record is not None:
            judged.record(session, row)
        append(
            session,
            actor=caller.name,
            action="rollout.pause" if pause else "rollout.advance",
            subject=f"{repo_name}@{alias}",
            details={
                "rollout_id": plan.rollout_id,
                "index": index,
                "weight": weight,
                "reason": reason,
            },
        )
        done = "rollout.completed" if index == last else "rollout.advanced"
        _notify(session, done, repo_name, row, at=(index, weight), why=reason, caller=caller)
        return rollout_json(session, repo, repo_name, row, None)


def abort(
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    reason: str,
    caller: Caller,
    judged: JudgedStep | None = None,
) -> dict[str, Any]:
    """Abort the rollout under way toward the stable digest: an ``aborted`` step (weight 0)
    signed with the online key, at the signed step's index (0 before the first). A plan
    not yet signed is withdrawn instead (nothing signed names it). Who may move the alias
    may abort (step (1) of the alias decision, for the stable digest); audited
    ``rollout.abort`` with the reason. ``judged``: the rollout controller's abort of a
    failed analysis (the online key may always abort; StepTaken when that rollout is no
    longer under way), with what it records in the same transaction."""
    if not reason.strip():
        raise BadRequest("an abort needs a --reason", code="reason_required")
    _person_reason(reason, judged)
    with state.db.read() as session:
        repo_row = get_repo(session, repo_name, caller)
        stable = _under_way(session, repo_row.id, repo_name, alias, judged).stable
    if judged is None:
        _may_move(state, repo_name, alias, stable, caller)
    with state.db.write() as session:
        repo_row = get_repo(session, repo_name, caller)
        row = _under_way(session, repo_row.id, repo_name, alias, judged)
        if judged is not None and row.rollout_id != judged.rollout_id:
            raise StepTaken(f"rollout {judged.rollout_id} is no longer under way")
        repo = _tuf(session, state, repo_name, caller)
        plan = signed_plan(repo, repo_name, alias)
        if plan is None or plan.sha256 != row.plan_sha256:
            supersede(session, rollout_path(repo_name, alias))
            row.state, row.finished_at, row.reason = "aborted", utcnow(), reason
            session.add(
                RolloutStepRow(
                    rollout_pk=row.id, seq=0, step_index=-1, weight=0, state="aborted",
                    reason=reason, actor=caller.name, tuf_version=None,
                )
            )  # fmt: skip
        else:
            # at the signed step's index (an abort is taken at any index: even a step
            # signed out of the plan is aborted, never a reason to refuse the abort)
            current = signed_step(repo, repo_name, alias)
            index = 0
            if current is not None and current[0].rollout_id == plan.rollout_id:
                index = min(current[0].index, len(plan.steps) - 1)
            _publish_step(
                session,
                state,
                repo,
                row,
                plan,
                index=index,
                step_state="aborted",
                reason=reason,
                seen=None,
                caller=caller,
            )
        if judged is not None and judged.record is not None:
            judged.record(session, row)
        append(
            session,
            actor=caller.name,
            action="rollout.abort",
            subject=f"{repo_name}@{alias}",
            details={"rollout_id": row.rollout_id, "reason": reason},
        )
        at = row.step_index if row.step_index >= 0 else None
        _notify(session, "rollout.aborted", repo_name, row, at=(at, 0), why=reason, caller=caller)
        return rollout_json(session, repo, repo_name, row, None)


def _notify(
    session: Session,
    event_type: str,
    repo_name: str,
    row: Rollout,
    *,
    at: tuple[int | None, int],
    why: str | None,
    caller: Caller,
) -> None:
    """The signed webhook of this decision, in its transaction (docs/webhooks.md#events):
    ``at`` is the step's (index, weight)."""
    index, weight = at
    enqueue(
        session,
        event_type,
        {
            "repository": repo_name,
            "alias": row.alias,
            "rollout_id": row.rollout_id,
            "plan_sha256": row.plan_sha256,
            "index": index,
            "weight": weight,
            "state": row.state,
            "reason": why,
            "actor": caller.name,
        },
    )


def _may_move(state: AppState, repo_name: str, alias: str, digest: str, caller: Caller) -> None:
    """Step (1) of the alias decision: ``caller`` may move ``repo_name@alias``."""
    with state.db.read() as session:
        rule = moves.read_rule(session, state, repo_name=repo_name, alias=alias, caller=caller)
    decide(
        MoveRequest(
            repo=repo_name,
            alias=alias,
            digest=digest,
            rule=rule.rule,
            statements=(),
            evidence=lambda _signer: "not judged: an abort only needs step (1)",
            mover=rule.mover,
            judged=frozenset({"1"}),
        )
    )
