"""The steps of attest.alias_decision's module doc, in order, over one ``MoveRequest``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from modelward.attest.alias_decision._model import (
    NOT_READ,
    AliasDecision,
    AliasDecisionReport,
    AliasMoveRefused,
    MoveCheck,
    Mover,
    MoveRequest,
    NotRead,
    RefusalReason,
    Status,
)
from modelward.attest.evaluation import GatesJudgement, judge_evaluations
from modelward.attest.statement import PredicateType

if TYPE_CHECKING:
    from modelward.attest.policy import AliasRule
    from modelward.attest.trust import VerifiedStatement

__all__ = ["decide_move", "decide_move_result"]


def decide_move(request: MoveRequest) -> AliasDecision:
    """Decide whether ``request`` may move its alias (module doc, steps (1)-(6)).

    Raises:
        AliasMoveRefused: the first judged step that fails; ``reason`` names it.
        ValueError: a judged step's input was not read (caller misuse).
    """
    found = _Steps(request, collect=False).run()
    return AliasDecision(request, found.is_rollback, found.gates, tuple(found.checks))


def decide_move_result(request: MoveRequest) -> AliasDecisionReport:
    """Steps (1)-(6) of ``decide_move``, every one of them, without raising for a refusal.

    Raises ValueError for a judged step whose input was not read, as ``decide_move`` does.
    """
    found = _Steps(request, collect=True).run()
    return AliasDecisionReport(request, found.is_rollback, found.gates, tuple(found.checks))


class _Steps:
    """The steps of the module doc over one request; ``collect``: record every failed
    check instead of raising at the first."""

    def __init__(self, request: MoveRequest, *, collect: bool) -> None:
        self.req = request
        self.collect = collect
        self.checks: list[MoveCheck] = []
        self.gates: GatesJudgement | None = None
        self.is_rollback = request.rollback

    def _check(
        self,
        step: str,
        name: str,
        ok: bool | None,
        reason: RefusalReason | None = None,
        evidence: Mapping[str, Any] | None = None,
        **found: Any,
    ) -> None:
        """Record a step. ``ok`` None (its input was not read here) or a step outside
        ``judged`` (step (4) counts as judged with any of (4a)-(4c)): SKIPPED."""
        judged = self.req.judged
        if ok is None or not (step in judged or (step == "4" and any(s[0] == "4" for s in judged))):
            status = Status.SKIPPED
        else:
            status = Status.PASSED if ok else Status.FAILED
        failed = status is Status.FAILED
        check = MoveCheck(
            step,
            name,
            status,
            reason if failed else None,
            (evidence or {}) if failed else {},
            found,
        )
        self.checks.append(check)
        if failed and not self.collect:
            raise AliasMoveRefused(check, self.req, self.gates)

    def _require_inputs(self) -> None:
        """Caller misuse, not a refusal: a step judged here on a fact nobody read."""
        req = self.req
        unread = {
            "1": ("mover", req.mover is None),
            "2": ("quarantine", req.quarantine is NOT_READ),
            "5": ("history", req.history is None),
            "6": ("approvers", req.approvers is None),
        }
        missing = [
            f"step ({step}) needs {name}"
            for step, (name, absent) in unread.items()
            if absent and step in req.judged
        ]
        if missing:
            raise ValueError(
                f"MoveRequest for {req.ref}: {'; '.join(missing)}, or leave the step out of "
                "`judged`"
            )

    def run(self) -> _Steps:
        self._require_inputs()
        req = self.req
        rule = req.rule
        # (1): an alias rule matches; (1b) it names the mover.
        if rule is None and "1" not in req.judged:
            self._check("1", "rule", None)
            return self
        if rule is None:
            self._check("1", "rule", False, RefusalReason.RULE_MISSING, self._who(None))
        elif req.mover is None:
            self._check("1", "rule", None)
        else:
            self._mover(rule, req.mover)
        # (2): quarantined nowhere.
        if isinstance(req.quarantine, NotRead):
            self._check("2", "quarantine", None)
        else:
            quarantine = req.quarantine
            self._check(
                "2", "quarantine", quarantine is None, RefusalReason.QUARANTINED, quarantine
            )
        # (3): the current policy allows the bundle (the one bundle verifier's report).
        denied = req.denied
        self._check(
            "3",
            "policy",
            denied is None,
            RefusalReason.POLICY_DENIED,
            denied.as_dict() if denied is not None else None,
        )
        if rule is not None and rule.protected:
            # (4): a protected alias's evidence.
            self._baseline(rule)
            self._replay(rule)
            self._gates(rule)
        elif rule is not None:
            self._check("4", "evidence", True)  # not protected: it asks for none
        # (5): a rollback names an earlier target.
        self._rollback()
        # (6): approvals, last (a move short only of them may be proposed instead).
        if rule is not None and rule.protected:
            have = req.approvers
            self._check(
                "6",
                "approvals",
                None if have is None else len(have) >= rule.approvals,
                RefusalReason.APPROVALS_REQUIRED,
                {"have": list(have or ()), "need": rule.approvals},
            )
        return self

    # -- (1) --------------------------------------------------------------------------------
    def _who(self, rule: AliasRule | None) -> dict[str, Any]:
        mover = self.req.mover
        shown = None
        if rule is not None:
            shown = {
                "pattern": rule.pattern,
                "roles": list(rule.roles),
                "principals": list(rule.principals),
            }
        return {
            "principal": mover.name if mover is not None else None,
            "role": mover.role if mover is not None else None,
            "repository": self.req.repo,
            "alias": self.req.alias,
            "rule": shown,
        }

    def _mover(self, rule: AliasRule, mover: Mover) -> None:
        named = mover.name in rule.principals
        if named or (mover.role in rule.roles and mover.role_holds_here):
            self._check("1", "rule", True, by_name=named)
            return
        reason = RefusalReason.NOT_A_PUBLISHER
        if mover.role not in rule.roles:
            reason = RefusalReason.NOT_ALLOWED
        self._check("1", "rule", False, reason, self._who(rule))

    # -- (4) --------------------------------------------------------------------------------
    def _vouched(self, predicate_type: str) -> tuple[list[VerifiedStatement], list[dict[str, str]]]:
        """The statements of ``predicate_type`` an evidence signer vouched for, and each
        signer of the others with the reason it does not count."""
        counted: list[VerifiedStatement] = []
        refused: list[dict[str, str]] = []
        for stmt in self.req.statements:
            if stmt.predicate_type != predicate_type:
                continue
            reasons = [(s.name, self.req.evidence(s)) for s in stmt.signers]
            if any(reason is None for _, reason in reasons):
                counted.append(stmt)
            else:
                refused += [{"signer": n, "reason": r} for n, r in reasons if r is not None]
        return counted, refused

    def _baseline(self, rule: AliasRule) -> None:
        if not rule.require_baseline:
            self._check("4a", "baseline", True)  # the rule asks for none
            return
        baselines, not_counted = self._vouched(PredicateType.BASELINE)
        self._check(
            "4a",
            "baseline",
            bool(baselines),
            RefusalReason.BASELINE_REQUIRED,
            {"evidence": dict(self.req.evidence_policy), "not_counted": not_counted},
            count=len(baselines),
        )

    def _replay(self, rule: AliasRule) -> None:
        if rule.replay is None:
            self._check("4b", "replay", True)  # the rule asks for none
            return
        vouched, not_counted = self._vouched(PredicateType.REPLAY)
        replays = [s for s in vouched if _against(s) == self.req.current]
        ok = _replay_ok(replays, rule.replay.min_consecutive, rule.replay.max_divergences)
        evidence = {"evidence": dict(self.req.evidence_policy), "not_counted": not_counted}
        self._check("4b", "replay", ok, RefusalReason.REPLAY_REQUIRED, evidence)

    def _gates(self, rule: AliasRule) -> None:
        """(4c): the one rule of attest.evaluation, with the caller's evidence signers and
        the bundle on the alias now as the baseline (docs/policy.md#release-gates)."""
        req = self.req
        if rule.gates is None:
            self._check("4c", "gates", True)  # the rule sets none
            return
        against = f" against {req.current} (the bundle on {req.ref} now)" if req.current else ""
        judged = judge_evaluations(
            rule.gates,
            req.statements,
            digest=req.digest,
            baseline=req.current,
            evidence=req.evidence,
            missing=f"no evaluation of {req.digest}{against} signed by an evidence signer of "
            "the policy",
        )
        self.gates = judged
        self._check(
            "4c",
            "gates",
            judged.promote,
            RefusalReason.GATES_FAILED,
            {
                "gates": [g.to_json() for g in judged.gates],
                "evaluations": [e.to_json() for e in judged.evaluations],
                "not_counted": [n.to_json() for n in judged.not_counted],
            },
        )

    # -- (5) --------------------------------------------------------------------------------
    def _rollback(self) -> None:
        req = self.req
        if req.history is None:
            self._check("5", "rollback", None)
            return
        earlier = req.history - ({req.current} if req.current else set())
        self.is_rollback = req.rollback or req.digest in earlier
        ok = not req.rollback or req.digest in earlier
        self._check(
            "5",
            "rollback",
            ok,
            RefusalReason.NOT_A_ROLLBACK,
            {"digest": req.digest, "current": req.current},
        )


def _against(stmt: VerifiedStatement) -> str | None:
    """The digest a replay result compared against (``against``), or None."""
    predicate = stmt.statement.get("predicate", {})
    against = predicate.get("against") if isinstance(predicate, dict) else None
    return against if isinstance(against, str) else None


def _replay_ok(
    statements: Sequence[VerifiedStatement], min_consecutive: int, max_divergences: int
) -> bool:
    for stmt in statements:
        predicate = stmt.statement.get("predicate", {})
        if not isinstance(predicate, dict):
            continue
        consecutive = predicate.get("consecutive_matches")
        divergences = predicate.get("divergence_count")
        if (
            isinstance(consecutive, int)
            and isinstance(divergences, int)
            and consecutive >= min_consecutive
            and divergences <= max_divergences
        ):
            return True
    return False
