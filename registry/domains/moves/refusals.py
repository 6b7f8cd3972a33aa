"""The one place a refused alias move (attest.alias_decision) becomes an HTTP error, and
where the registry words the decision's checks (refusal messages, the dry run's answer).

Each ``RefusalReason`` keeps the status, ``code`` and ``detail`` the registry has always
answered with (docs/registry.md#aliases):

=====================================  ======  =============================  ===============
reason                                 status  code                           detail
=====================================  ======  =============================  ===============
RULE_MISSING, NOT_ALLOWED,             403     forbidden                      principal, role,
NOT_A_PUBLISHER                                                               rule, cause
QUARANTINED                            409     bundle_quarantined             the quarantine
POLICY_DENIED                          422     policy_denied                  every check
BASELINE_REQUIRED, REPLAY_REQUIRED     422     baseline_/replay_required      evidence,
                                                                              not_counted
GATES_FAILED                           422     gates_failed                   gates,
                                                                              evaluations,
                                                                              not_counted
NOT_A_ROLLBACK                         400     not_a_rollback                 digest, current
APPROVALS_REQUIRED                     403     approvals_required             have, need
=====================================  ======  =============================  ===============
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelward.attest.alias_decision import (
    AliasDecisionReport,
    AliasMoveRefused,
    MoveCheck,
    MoveRequest,
    RefusalReason,
    Status,
)
from modelward.attest.evaluation import GatesJudgement, gate_label
from modelward.registry.domains.moves.rollback import PROMOTION_GATES
from modelward.registry.errors import (
    BadRequest,
    Forbidden,
    Quarantined,
    Refused,
    RegistryError,
)

__all__ = ["check_message", "http_error", "report_json"]

EVIDENCE_WHO = "never the publisher, the mover, a publisher of the repository or an admin"

_WHO = frozenset(
    {RefusalReason.RULE_MISSING, RefusalReason.NOT_ALLOWED, RefusalReason.NOT_A_PUBLISHER}
)
_EVIDENCE = frozenset(
    {
        RefusalReason.POLICY_DENIED,
        RefusalReason.BASELINE_REQUIRED,
        RefusalReason.REPLAY_REQUIRED,
        RefusalReason.GATES_FAILED,
    }
)


def http_error(refused: AliasMoveRefused) -> RegistryError:
    """The registry error that answers ``refused`` (module doc's table)."""
    reason = refused.reason
    message = check_message(refused.check, refused.request, refused.gates)
    detail = dict(refused.evidence)
    if reason in _WHO:
        detail["cause"] = reason.value
        rule = refused.request.rule
        if rule is not None:  # kept from the earlier answer's detail, for scripts that read it
            detail["pattern"] = rule.pattern
        return Forbidden(message, detail=detail)
    if reason is RefusalReason.QUARANTINED:
        return Quarantined(message, detail=detail)
    if reason in _EVIDENCE:
        return Refused(message, detail=detail, code=reason.value)
    if reason is RefusalReason.NOT_A_ROLLBACK:
        return BadRequest(message, detail=detail, code=reason.value)
    if reason is RefusalReason.APPROVALS_REQUIRED:
        return Forbidden(message, detail=detail, code=reason.value)
    raise ValueError(f"no HTTP error for {reason}")  # pragma: no cover - every reason above


def report_json(report: AliasDecisionReport) -> dict[str, Any]:
    """The dry run's answer: every check of ``report``, worded."""
    req = report.request

    def one(c: MoveCheck) -> dict[str, Any]:
        message = check_message(c, req, report.gates, is_rollback=report.is_rollback)
        answer = {"step": c.step, "check": c.name, "passed": c.passed, "message": message,
                  "reason": c.reason.value if c.reason is not None else None,
                  "evidence": dict(c.evidence)}  # fmt: skip
        if c.status is Status.SKIPPED:
            answer["skipped"] = True
        return answer

    return {
        "repository": req.repo,
        "alias": req.alias,
        "digest": req.digest,
        "current": req.current,
        "allowed": report.allowed,
        "rollback": report.is_rollback,
        "checks": [one(c) for c in report.checks],
    }


def check_message(
    check: MoveCheck,
    req: MoveRequest,
    gates: GatesJudgement | None,
    *,
    is_rollback: bool = False,
) -> str:
    """The registry's words for one check of the decision of ``req``."""
    if check.status is Status.SKIPPED and is_rollback and check.step in PROMOTION_GATES:
        return (
            f"step ({check.step}) {check.name}: not judged: a rollback to a release "
            f"{req.ref} held under valid signatures needs no promotion gate"
        )
    if check.status is Status.SKIPPED:
        return f"step ({check.step}) {check.name}: not judged here"
    if check.failed:
        return _refusal(check, req, gates)
    rule, mover = req.rule, req.mover
    pattern = rule.pattern if rule is not None else ""
    step = check.step
    if step == "1" and mover is not None:
        how = "by name" if check.found.get("by_name") else f"as a {mover.role}"
        return f"alias rule {pattern!r} lets {mover.name} move it {how}"
    if step == "2":
        return f"{req.digest} is quarantined nowhere"
    if step == "3":
        return "the repository's current policy allows the bundle"
    if step == "4":
        return f"alias rule {pattern!r} is not protected"
    if step == "4a":
        if "count" not in check.found:
            return "the rule needs no determinism baseline"
        return f"{check.found['count']} baseline(s) by evidence signers"
    if step == "4b":
        if rule is not None and rule.replay is None:
            return "the rule needs no replay result"
        return "a replay result by an evidence signer passes"
    if step == "4c":
        if gates is None:
            return f"alias rule {pattern!r} sets no release gates"
        return f"promote: {len(gates.evaluations)} evaluation(s) pass every gate"
    if step == "5":
        return "a rollback to an earlier target" if is_rollback else "not a rollback"
    if step == "6" and rule is not None:
        return f"{len(req.approvers or ())} of {rule.approvals} approval(s)"
    return f"step ({step}) {check.name} passed"  # pragma: no cover - every step above


def _refusal(check: MoveCheck, req: MoveRequest, gates: GatesJudgement | None) -> str:
    reason, rule, mover = check.reason, req.rule, req.mover
    who = f"{mover.name} ({mover.role})" if mover is not None else "nobody"
    against = f"against {req.current}" if req.current else "against no bundle"
    if reason is RefusalReason.RULE_MISSING:
        return (
            f"{who} may not move {req.ref}: no alias rule in the repository's policy matches "
            f"{req.alias!r}, so nobody may move it"
        )
    if reason in (RefusalReason.NOT_A_PUBLISHER, RefusalReason.NOT_ALLOWED):
        if rule is None or mover is None:  # pragma: no cover - step (1b) had both
            raise ValueError(f"no words for {reason} without a rule and a mover")
        rule_text = f"the alias rule {rule.pattern!r} of {req.repo}'s policy"
        if reason is RefusalReason.NOT_A_PUBLISHER:
            return (
                f"{who} may not move {req.ref}: {mover.name} is not a publisher of {req.repo} "
                f"({rule_text} lets publishers move it only in repositories they may publish "
                f"to; an admin adds one with `modelward repo add-publisher {req.repo} "
                f"{mover.name}`)"
            )
        plural = {"publisher": f"publishers of {req.repo}", "admin": "admins"}
        allowed = [plural.get(r, f"{r}s") for r in rule.roles]
        allowed += [f"principal {p}" for p in rule.principals]
        return (
            f"{who} may not move {req.ref}: {rule_text} allows only {_and(allowed)}, and "
            f"names neither {mover.name} nor role {mover.role}"
        )
    if reason is RefusalReason.QUARANTINED:
        held = check.evidence.get("reason", "no reason given")
        return f"bundle {req.digest} is quarantined: {held}"
    if reason is RefusalReason.POLICY_DENIED:
        denied = req.denied
        return "policy denied the bundle: " + "; ".join(denied.reasons if denied else ())
    if reason is RefusalReason.BASELINE_REQUIRED:
        return (
            f"{req.ref} needs a determinism baseline for {req.digest} signed by an evidence "
            f"signer of the policy ({EVIDENCE_WHO})"
        )
    if reason is RefusalReason.REPLAY_REQUIRED:
        replay = rule.replay if rule is not None else None
        if replay is None:  # pragma: no cover - step (4b) fails only for a replay rule
            raise ValueError(f"no words for {reason} without a replay rule")
        return (
            f"{req.ref} needs a replay result {against} (the bundle on the alias now) with at "
            f"least {replay.min_consecutive} consecutive matches and at most "
            f"{replay.max_divergences} divergences, signed by an evidence signer of the "
            f"policy ({EVIDENCE_WHO})"
        )
    if reason is RefusalReason.GATES_FAILED:
        on = f" against {req.current} (the bundle on {req.ref} now)" if req.current else ""
        if gates is None or not gates.evaluations:
            return (
                f"{req.ref} may not move to {req.digest}: release gates need an evaluation "
                f"statement (`modelward eval attach`) of {req.digest}{on}, signed by an "
                f"evidence signer of the policy ({EVIDENCE_WHO})"
            )
        reasons = "; ".join(
            f"{gate_label(g)} {g.verdict.upper()}: {g.message}"
            for g in gates.gates
            if g.verdict != "pass"
        )
        return f"{req.ref} may not move to {req.digest}: do not promote: {reasons}"
    if reason is RefusalReason.NOT_A_ROLLBACK:
        return f"{req.digest} was never an earlier target of {req.ref}"
    if reason is RefusalReason.APPROVALS_REQUIRED and rule is not None:
        return (
            f"{req.ref} needs {rule.approvals} approval(s) by reviewers other than the "
            f"publisher and the mover; {req.digest} has {len(req.approvers or ())}"
        )
    raise ValueError(f"no words for {reason}")  # pragma: no cover - every reason above


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
