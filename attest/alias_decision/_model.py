"""The decision's types: the request, each check, the decision and its report, the refusal
(attest.alias_decision). No words: a check is a step, a status, a typed reason, evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from modelward.attest.errors import AttestError

if TYPE_CHECKING:
    from modelward.attest.evaluation import EvidenceRule, GatesJudgement
    from modelward.attest.policy import AliasRule, Decision
    from modelward.attest.trust import VerifiedStatement
    from modelward.attest.verifier import BundleVerdict

ALL_STEPS = frozenset({"1", "2", "3", "4a", "4b", "4c", "5", "6"})
# A worker judges, from what it verified itself, the release gates of its own policy's alias
# rule; the rest is the registry's word, which the worker takes only as the TUF role's
# signatures (docs/policy.md#release-gates, docs/tuf.md#workers).
WORKER_STEPS = frozenset({"4c"})


class NotRead(Enum):
    """A fact the caller did not read: not the same as "there is none" (``None``)."""

    NOT_READ = "not read"


NOT_READ = NotRead.NOT_READ


class Status(Enum):
    """A step's outcome: judged and passed, judged and failed, or not judged at all."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class RefusalReason(Enum):
    """Why a move is refused: one value per step that can fail."""

    RULE_MISSING = "no_rule"
    NOT_ALLOWED = "not_allowed_by_rule"
    NOT_A_PUBLISHER = "not_a_publisher_of_repository"  # the rule's role does not hold here
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
    role, and whether that role holds in this repository (a publisher: it may publish to
    it; decided by the repository layer's ``may``)."""

    name: str
    role: str
    role_holds_here: bool


@dataclass(frozen=True)
class MoveRequest:
    """Everything one move is decided on; the caller read it, nothing here reads more.

    ``statements`` are the bundle's verified statements and ``denied`` the bundle verifier's
    denial (None: the policy allows it): ``for_bundle`` takes both from a ``BundleVerdict``.
    ``evidence`` says why a signer does not count for evidence (None when it does);
    ``evidence_policy`` is the policy's ``evidence`` section, carried in refusals.
    ``mover``, ``approvers`` and ``history`` None, ``quarantine`` ``NOT_READ``: not read by
    the caller, allowed only for a step outside ``judged``; ``quarantine`` None: read, and
    the digest is quarantined nowhere.
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
    """One step's outcome: ``reason`` and ``evidence`` say why a failed one failed;
    ``found`` holds what a step counted (``{"count": n}``), for whoever words it."""

    step: str
    name: str
    status: Status
    reason: RefusalReason | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    found: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    @property
    def failed(self) -> bool:
        return self.status is Status.FAILED


class AliasMoveRefused(AttestError):  # noqa: N818 - the name is the outcome
    """A step of ``decide_move`` failed: ``check`` says which (its ``reason``, ``evidence``)."""

    def __init__(
        self, check: MoveCheck, request: MoveRequest, gates: GatesJudgement | None = None
    ) -> None:
        if check.reason is None:
            raise ValueError("a refusal needs a reason")
        super().__init__(
            f"{request.ref} -> {request.digest}: step ({check.step}) refused: {check.reason.value}"
        )
        self.check = check
        self.request = request
        self.gates = gates
        self.reason: RefusalReason = check.reason
        self.evidence: Mapping[str, Any] = check.evidence


@dataclass(frozen=True)
class AliasDecision:
    """A move every judged step allows; only ``decide_move`` makes one."""

    request: MoveRequest
    is_rollback: bool  # asked as one, or the digest was an earlier target
    gates: GatesJudgement | None  # the release gates' judgement (None: not judged)
    checks: tuple[MoveCheck, ...]


@dataclass(frozen=True)
class AliasDecisionReport:
    """Every step of ``decide_move``, passed, failed or skipped, for display (a dry run)."""

    request: MoveRequest
    is_rollback: bool
    gates: GatesJudgement | None
    checks: tuple[MoveCheck, ...]

    @property
    def allowed(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def refusals(self) -> tuple[AliasMoveRefused, ...]:
        return tuple(AliasMoveRefused(c, self.request, self.gates) for c in self.checks if c.failed)
