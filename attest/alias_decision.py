"""The one owner of the verdict "this alias may move to this bundle" (docs/registry.md#aliases).

Every caller reads what the decision needs and hands it in as a ``MoveRequest``; nothing
here does I/O. The registry at ``alias set`` (and its dry run), at the OCI tag push, and
before it publishes a signed proposal; a serving worker, after TUF resolved ``REPO@ALIAS``,
for the steps it can judge without the registry (attest.policy's step (9)). Nothing else in
modelward builds an ``AliasDecision`` or judges a move's release gates.

``decide_move`` runs, in order (docs/registry.md#aliases, docs/policy.md#alias-rules):

    (1) an alias rule of the policy matches the alias (none: nobody may move it);
        (1b) it names the mover's principal or role (a publisher also needs to publish to
             this repository: the repository layer's ``may`` decided ``publishes_here``);
    (2) the bundle's digest is quarantined in no repository;
    (3) the repository's current policy allows the bundle: the bundle verifier's report
        (attest.verifier.verify_bundle_result) for the bundle as it is now;
    (4) a protected alias needs, as its rule says:
        (4a) a determinism baseline,
        (4b) a replay result against the bundle on the alias now (against none when the
             alias has none yet),
        (4c) every release gate passed by every evaluation that counts
             (attest.evaluation.judge_evaluations, baseline: the bundle on the alias now),
        each counting only when signed by a signer the ``evidence`` rule admits (the
        registry's: never the publisher, the mover, a publisher of the repository or an
        admin; docs/policy.md#evidence);
    (5) a move asked as a rollback names an earlier target of the alias;
    (6) a protected alias has ``approvals`` approvers that count (reviewers other than the
        publisher and the mover; the caller reads them), checked last so that a move short
        only of approvals can be proposed instead (docs/tuf.md#proposals).

``decide_move`` raises ``AliasMoveRefused`` at the first failed step, carrying its typed
``reason`` and its evidence, or returns the ``AliasDecision``. ``decide_move_result`` runs
the very same steps and returns every check, passed or not (``alias set --dry-run``).

A step outside ``MoveRequest.judged`` cannot fail (it reports "not judged here" with what it
found): a worker judges ``WORKER_STEPS``, its release gates, from what it verified itself; it
has no mover, no approvals and no alias history, and the TUF role's signatures are its word
for those. The registry decides step (1) alone first (``judged={"1"}``), before it reads the
bundle, and before it publishes a signed move judges ``ALL_STEPS - {"6"}`` (the signatures
are the approvals). A step in ``judged`` whose input the caller did not read (``mover``,
``quarantine`` left ``NOT_READ``, ``approvers``, ``history``) is caller misuse: the run
raises ``ValueError`` rather than let the step pass unjudged (fail closed). The tree::

    AttestError
    └── AliasMoveRefused     reason: RefusalReason, step, message, evidence
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from modelward.attest.errors import AttestError
from modelward.attest.evaluation import GatesJudgement, gate_label, judge_evaluations
from modelward.attest.statement import PredicateType

if TYPE_CHECKING:
    from modelward.attest.evaluation import EvidenceRule
    from modelward.attest.policy import AliasRule, Decision
    from modelward.attest.trust import VerifiedStatement
    from modelward.attest.verifier import BundleVerdict

__all__ = [
    "ALL_STEPS",
    "NOT_READ",
    "WORKER_STEPS",
    "AliasDecision",
    "AliasDecisionReport",
    "AliasMoveRefused",
    "MoveCheck",
    "MoveRequest",
    "Mover",
    "NotRead",
    "RefusalReason",
    "decide_move",
    "decide_move_result",
]

ALL_STEPS = frozenset({"1", "2", "3", "4a", "4b", "4c", "5", "6"})
# A worker judges, from what it verified itself, the release gates of its own policy's alias
# rule (no rule: nothing to judge; a reference by digest matches none); the rest is the
# registry's word, which the worker takes only as the TUF role's signatures
# (docs/policy.md#release-gates, docs/tuf.md#workers). Its verify_bundle is its step (3).
WORKER_STEPS = frozenset({"4c"})
EVIDENCE_WHO = (
    "never the publisher, the mover, a publisher of the repository or an admin"  # registry
)


class NotRead(Enum):
    """A fact the caller did not read: not the same as "there is none" (``None``)."""

    NOT_READ = "not read"


NOT_READ = NotRead.NOT_READ


class RefusalReason(Enum):
    """Why a move is refused: one value per step that can fail."""

    RULE_MISSING = "no_rule"
    NOT_ALLOWED = "not_allowed_by_rule"
    NOT_A_PUBLISHER = "not_a_publisher_of_repository"
    QUARANTINED = "bundle_quarantined"
    POLICY_DENIED = "policy_denied"
    BASELINE_REQUIRED = "baseline_required"
    REPLAY_REQUIRED = "replay_required"
    GATES_FAILED = "gates_failed"
    NOT_A_ROLLBACK = "not_a_rollback"
    APPROVALS_REQUIRED = "approvals_required"


@dataclass(frozen=True)
class Mover:
    """Who moves the alias, as the repository layer decided it: the principal's name and
    role, and whether it may publish to this repository (``may(caller, "publish", repo)``)."""

    name: str
    role: str
    publishes_here: bool


@dataclass(frozen=True)
class MoveRequest:
    """Everything one move is decided on; the caller read it, nothing here reads more.

    ``statements`` are the bundle's verified statements and ``denied`` the bundle verifier's
    denial (None: the policy allows it): ``for_bundle`` takes both from a ``BundleVerdict``.
    ``evidence`` says why a signer does not count for a worker's evidence (None when it
    does); ``evidence_policy`` is the policy's ``evidence`` section, shown in refusals.
    ``mover``, ``approvers`` and ``history`` None, ``quarantine`` ``NOT_READ``: not read by
    the caller, allowed only for a step outside ``judged`` (a worker); ``quarantine`` None:
    read, and the digest is quarantined nowhere.
    """

    repo: str
    alias: str
    digest: str
    rule: AliasRule | None
    statements: tuple[VerifiedStatement, ...]
    evidence: EvidenceRule
    denied: Decision | None = None
    evidence_policy: Mapping[str, Any] = field(default_factory=dict)
    mover: Mover | None = None
    # the digest's quarantine; None: it has none; NOT_READ: the caller did not read it
    quarantine: Mapping[str, Any] | NotRead | None = NOT_READ
    approvers: tuple[str, ...] | None = None
    current: str | None = None  # the bundle on the alias now (None: the alias is new)
    history: frozenset[str] | None = None  # every earlier target of the alias
    rollback: bool = False
    judged: frozenset[str] = ALL_STEPS  # the steps this caller judges (WORKER_STEPS: a worker)

    @classmethod
    def for_bundle(cls, bundle: BundleVerdict, **facts: Any) -> MoveRequest:
        """A request about the bundle ``bundle`` reports on (a ``TrustedBundle`` or, for a
        dry run, a denied verdict): its digest, statements and denial."""
        denied = None if bundle.allowed else bundle.decision
        return cls(digest=bundle.digest, statements=bundle.statements, denied=denied, **facts)

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.alias}"


@dataclass(frozen=True)
class MoveCheck:
    """One step's outcome; a failed one carries its ``reason`` and ``evidence``."""

    step: str
    name: str
    passed: bool
    message: str
    reason: RefusalReason | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "check": self.name,
            "passed": self.passed,
            "message": self.message,
            "reason": self.reason.value if self.reason is not None else None,
            "evidence": dict(self.evidence),
        }


class AliasMoveRefused(AttestError):  # noqa: N818 - the name is the outcome
    """A step of ``decide_move`` failed: ``reason`` says which, ``evidence`` why."""

    def __init__(self, check: MoveCheck) -> None:
        super().__init__(check.message)
        if check.reason is None:
            raise ValueError("a refusal needs a reason")
        self.check = check
        self.reason: RefusalReason = check.reason
        self.message = check.message
        self.evidence: Mapping[str, Any] = check.evidence


@dataclass(frozen=True)
class AliasDecision:
    """A move every judged step allows; only ``decide_move`` makes one."""

    request: MoveRequest
    is_rollback: bool  # asked as one, or the digest was an earlier target
    gates: GatesJudgement | None  # the release gates' judgement (None: the rule sets none)
    checks: tuple[MoveCheck, ...]


@dataclass(frozen=True)
class AliasDecisionReport:
    """Every step of ``decide_move``, passed or failed, for display (a dry run)."""

    request: MoveRequest
    is_rollback: bool
    gates: GatesJudgement | None
    checks: tuple[MoveCheck, ...]

    @property
    def allowed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def refusals(self) -> tuple[AliasMoveRefused, ...]:
        return tuple(AliasMoveRefused(c) for c in self.checks if not c.passed)

    def to_json(self) -> dict[str, Any]:
        return {
            "repository": self.request.repo,
            "alias": self.request.alias,
            "digest": self.request.digest,
            "current": self.request.current,
            "allowed": self.allowed,
            "rollback": self.is_rollback,
            "checks": [c.to_json() for c in self.checks],
        }


def decide_move(request: MoveRequest) -> AliasDecision:
    """Decide whether ``request`` may move its alias (module doc, steps (1)-(6)).

    Raises:
        AliasMoveRefused: the first step that fails; ``reason`` names it.
    """
    found = _Steps(request, collect=False).run()
    return AliasDecision(request, found.is_rollback, found.gates, tuple(found.checks))


def decide_move_result(request: MoveRequest) -> AliasDecisionReport:
    """Steps (1)-(6) of ``decide_move``, every one of them, without raising for a refusal."""
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

    def _add(self, check: MoveCheck) -> None:
        if check.step not in self.req.judged and not check.passed:
            check = MoveCheck(check.step, check.name, True, f"not judged here: {check.message}")
        self.checks.append(check)
        if not check.passed and not self.collect:
            raise AliasMoveRefused(check)

    def _pass(self, step: str, name: str, message: str) -> None:
        self._add(MoveCheck(step, name, True, message))

    def _fail(
        self, step: str, name: str, reason: RefusalReason, message: str, evidence: Mapping[str, Any]
    ) -> None:
        self._add(MoveCheck(step, name, False, message, reason, evidence))

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
            self._pass("1", "rule", f"no alias rule for {req.alias!r}: nothing to judge")
            return self
        if rule is None:
            self._no_rule()
        elif req.mover is None:
            self._pass("1", "rule", f"alias rule {rule.pattern!r} (mover not judged here)")
        else:
            self._mover(rule, req.mover)
        # (2): quarantined nowhere.
        if isinstance(req.quarantine, NotRead):
            self._pass("2", "quarantine", "the quarantine is not judged here")
        elif req.quarantine is not None:
            reason = req.quarantine.get("reason", "no reason given")
            self._fail(
                "2",
                "quarantine",
                RefusalReason.QUARANTINED,
                f"bundle {req.digest} is quarantined: {reason}",
                req.quarantine,
            )
        else:
            self._pass("2", "quarantine", f"{req.digest} is quarantined nowhere")
        # (3): the current policy allows the bundle (the one bundle verifier's report).
        if req.denied is not None:
            self._fail(
                "3",
                "policy",
                RefusalReason.POLICY_DENIED,
                "policy denied the bundle: " + "; ".join(req.denied.reasons),
                req.denied.as_dict(),
            )
        else:
            self._pass("3", "policy", "the repository's current policy allows the bundle")
        if rule is not None and rule.protected:
            # (4): a protected alias's evidence.
            self._baseline(rule)
            self._replay(rule)
            self._gates(rule)
        elif rule is not None:
            self._pass("4", "evidence", f"alias rule {rule.pattern!r} is not protected")
        # (5): a rollback names an earlier target.
        self._rollback()
        # (6): approvals, last (a move short only of them may be proposed instead).
        if rule is not None and rule.protected:
            self._approvals(rule)
        return self

    # -- (1) --------------------------------------------------------------------------------
    def _no_rule(self) -> None:
        req = self.req
        mover = req.mover
        who = f"{mover.name} ({mover.role})" if mover is not None else "nobody"
        self._fail(
            "1",
            "rule",
            RefusalReason.RULE_MISSING,
            f"{who} may not move {req.ref}: no alias rule in the repository's policy matches "
            f"{req.alias!r}, so nobody may move it",
            {
                "principal": mover.name if mover is not None else None,
                "role": mover.role if mover is not None else None,
                "repository": req.repo,
                "alias": req.alias,
                "rule": None,
                "cause": RefusalReason.RULE_MISSING.value,
            },
        )

    def _mover(self, rule: AliasRule, mover: Mover) -> None:
        req = self.req
        by_role = mover.role in rule.roles and (mover.role != "publisher" or mover.publishes_here)
        if mover.name in rule.principals or by_role:
            how = "by name" if mover.name in rule.principals else f"as a {mover.role}"
            self._pass("1", "rule", f"alias rule {rule.pattern!r} lets {mover.name} move it {how}")
            return
        who = f"{mover.name} ({mover.role})"
        plural = {"publisher": f"publishers of {req.repo}", "admin": "admins"}
        allowed = [plural.get(r, f"{r}s") for r in rule.roles]
        allowed += [f"principal {p}" for p in rule.principals]
        rule_text = f"the alias rule {rule.pattern!r} of {req.repo}'s policy"
        if mover.role in rule.roles and mover.role == "publisher":
            reason = RefusalReason.NOT_A_PUBLISHER
            message = (
                f"{who} may not move {req.ref}: {mover.name} is not a publisher of {req.repo} "
                f"({rule_text} lets publishers move it only in repositories they may publish "
                f"to; an admin adds one with `modelward repo add-publisher {req.repo} "
                f"{mover.name}`)"
            )
        else:
            reason = RefusalReason.NOT_ALLOWED
            message = (
                f"{who} may not move {req.ref}: {rule_text} allows only {_and(allowed)}, and "
                f"names neither {mover.name} nor role {mover.role}"
            )
        self._fail(
            "1",
            "rule",
            reason,
            message,
            {
                "principal": mover.name,
                "role": mover.role,
                "repository": req.repo,
                "alias": req.alias,
                "rule": {
                    "pattern": rule.pattern,
                    "roles": list(rule.roles),
                    "principals": list(rule.principals),
                },
                "cause": reason.value,
                # kept from the earlier answer's detail, for scripts that read it
                "pattern": rule.pattern,
            },
        )

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
        req = self.req
        if not rule.require_baseline:
            self._pass("4a", "baseline", "the rule needs no determinism baseline")
            return
        baselines, not_counted = self._vouched(PredicateType.BASELINE)
        if baselines:
            self._pass("4a", "baseline", f"{len(baselines)} baseline(s) by evidence signers")
            return
        self._fail(
            "4a",
            "baseline",
            RefusalReason.BASELINE_REQUIRED,
            f"{req.ref} needs a determinism baseline for {req.digest} signed by an evidence "
            f"signer of the policy ({EVIDENCE_WHO})",
            {"evidence": dict(req.evidence_policy), "not_counted": not_counted},
        )

    def _replay(self, rule: AliasRule) -> None:
        req = self.req
        if rule.replay is None:
            self._pass("4b", "replay", "the rule needs no replay result")
            return
        vouched, not_counted = self._vouched(PredicateType.REPLAY)
        replays = [s for s in vouched if _against(s) == req.current]
        if _replay_ok(replays, rule.replay.min_consecutive, rule.replay.max_divergences):
            self._pass("4b", "replay", "a replay result by an evidence signer passes")
            return
        against = f"against {req.current}" if req.current else "against no bundle"
        self._fail(
            "4b",
            "replay",
            RefusalReason.REPLAY_REQUIRED,
            f"{req.ref} needs a replay result {against} (the bundle on the alias now) with at "
            f"least {rule.replay.min_consecutive} consecutive matches and at most "
            f"{rule.replay.max_divergences} divergences, signed by an evidence signer of the "
            f"policy ({EVIDENCE_WHO})",
            {"evidence": dict(req.evidence_policy), "not_counted": not_counted},
        )

    def _gates(self, rule: AliasRule) -> None:
        """(4c): the one rule of attest.evaluation, with the caller's evidence signers and
        the bundle on the alias now as the baseline (docs/policy.md#release-gates)."""
        req = self.req
        gates = rule.gates
        if gates is None:
            self._pass("4c", "gates", f"alias rule {rule.pattern!r} sets no release gates")
            return
        against = f" against {req.current} (the bundle on {req.ref} now)" if req.current else ""
        judged = judge_evaluations(
            gates,
            req.statements,
            digest=req.digest,
            baseline=req.current,
            evidence=req.evidence,
            missing=f"no evaluation of {req.digest}{against} signed by an evidence signer of "
            "the policy",
        )
        self.gates = judged
        if judged.promote:
            self._pass(
                "4c",
                "gates",
                f"promote: {len(judged.evaluations)} evaluation(s) pass every gate",
            )
            return
        evidence = {
            "gates": [g.to_json() for g in judged.gates],
            "evaluations": [e.to_json() for e in judged.evaluations],
            "not_counted": [n.to_json() for n in judged.not_counted],
        }
        if not judged.evaluations:
            message = (
                f"{req.ref} may not move to {req.digest}: release gates need an evaluation "
                f"statement (`modelward eval attach`) of {req.digest}{against}, signed by an "
                f"evidence signer of the policy ({EVIDENCE_WHO})"
            )
        else:
            reasons = "; ".join(
                f"{gate_label(g)} {g.verdict.upper()}: {g.message}"
                for g in judged.gates
                if g.verdict != "pass"
            )
            message = f"{req.ref} may not move to {req.digest}: do not promote: {reasons}"
        self._fail("4c", "gates", RefusalReason.GATES_FAILED, message, evidence)

    # -- (5), (6) ---------------------------------------------------------------------------
    def _rollback(self) -> None:
        req = self.req
        if req.history is None:
            self._pass("5", "rollback", "the alias's history is not judged here")
            return
        earlier = req.history - ({req.current} if req.current else set())
        self.is_rollback = req.rollback or req.digest in earlier
        if req.rollback and req.digest not in earlier:
            self._fail(
                "5",
                "rollback",
                RefusalReason.NOT_A_ROLLBACK,
                f"{req.digest} was never an earlier target of {req.ref}",
                {"digest": req.digest, "current": req.current},
            )
            return
        what = "a rollback to an earlier target" if self.is_rollback else "not a rollback"
        self._pass("5", "rollback", what)

    def _approvals(self, rule: AliasRule) -> None:
        req = self.req
        if req.approvers is None:
            self._pass("6", "approvals", "approvals are not judged here")
            return
        have = list(req.approvers)
        if len(have) >= rule.approvals:
            self._pass("6", "approvals", f"{len(have)} of {rule.approvals} approval(s)")
            return
        self._fail(
            "6",
            "approvals",
            RefusalReason.APPROVALS_REQUIRED,
            f"{req.ref} needs {rule.approvals} approval(s) by reviewers other than the "
            f"publisher and the mover; {req.digest} has {len(have)}",
            {"have": have, "need": rule.approvals},
        )


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


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
