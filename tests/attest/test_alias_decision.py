"""The one owner of an alias move's verdict (attest.alias_decision, docs/registry.md#aliases).

One test per attack on a move, each with real DSSE-signed statements verified against a
trust set: a publisher of another repository, a quarantined or policy-denied bundle, a
baseline, replay result or evaluation signed by an interested principal, a replay against
another bundle, a rollback to a digest the alias never had, a move short of approvals. The
dry run reports every failed step from the same code path; a worker judges only its gates.
A last test pins the decision as the only place a move's verdict is built.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from modelward.attest import dsse, keys
from modelward.attest.alias_decision import (
    ALL_STEPS,
    NOT_READ,
    WORKER_STEPS,
    AliasMoveRefused,
    Mover,
    MoveRequest,
    RefusalReason,
    Status,
    decide_move,
    decide_move_result,
)
from modelward.attest.evaluation import PREDICATE_TYPE as EVALUATION_V1
from modelward.attest.evaluation import build_predicate
from modelward.attest.policy import AliasRule, Check, Decision
from modelward.attest.policy._model import Gates, ReplayRequirement
from modelward.attest.statement import PredicateType, make_statement
from modelward.attest.trust import Signer, TrustSet, VerifiedStatement
from modelward.registry.domains.moves.refusals import http_error, report_json
from tests.attest.test_evaluation import HEADER, _results, cases, jsonl, worked_example

REPO = "acme/model"
DIGEST = "sha256:" + "c" * 64
CURRENT = "sha256:" + "b" * 64
OTHER = "sha256:" + "a" * 64
KEYS = {name: keys.generate_private_key("ed25519") for name in ("evaluator", "publisher")}
TRUST = TrustSet(keys=tuple(keys.trusted_key(n, k.public_key()) for n, k in KEYS.items()))
ROOT = Path(__file__).resolve().parents[2]


def signed(signer: str, predicate_type: str, predicate: dict[str, Any]) -> VerifiedStatement:
    """A statement about DIGEST signed by ``signer``'s key and verified against TRUST."""
    payload = make_statement(REPO, DIGEST, predicate_type, predicate)
    return dsse.verify_envelope(dsse.sign_envelope(payload, [KEYS[signer]]), TRUST)


def evidence(signer: Signer) -> str | None:
    """The registry's rule, in small: only the evaluator counts, never the publisher."""
    return None if signer.name == "evaluator" else f"{signer.name} is the bundle's publisher"


def evaluation(signer: str, *, critical: int = 0, baseline: str = CURRENT) -> VerifiedStatement:
    predicate = build_predicate(
        _results(worked_example(critical=critical)),
        bundle=(REPO, DIGEST),
        baseline=(REPO, baseline),
    )
    return signed(signer, EVALUATION_V1, predicate)


def replay(signer: str, against: str | None = CURRENT) -> VerifiedStatement:
    predicate = {"against": against, "consecutive_matches": 5, "divergence_count": 0}
    return signed(signer, PredicateType.REPLAY, predicate)


def baseline(signer: str) -> VerifiedStatement:
    return signed(signer, PredicateType.BASELINE, {"engine": "vllm"})


PROTECTED = AliasRule(
    pattern="prod",
    roles=["publisher"],
    protected=True,
    approvals=1,
    require_baseline=True,
    replay=ReplayRequirement(min_consecutive=3, max_divergences=0),
    gates=Gates(
        max_critical_safety_failures=0,
        max_slice_regression_points=5,
        required_slices=["billing", "refunds", "safety"],
    ),
)
PUBLISHER = Mover(name="pub", role="publisher", role_holds_here=True)


def request(**facts: Any) -> MoveRequest:
    """A protected move that passes every step, with ``facts`` replaced."""
    base: dict[str, Any] = {
        "repo": REPO,
        "alias": "prod",
        "digest": DIGEST,
        "rule": PROTECTED,
        "statements": (baseline("evaluator"), replay("evaluator"), evaluation("evaluator")),
        "evidence": evidence,
        "mover": PUBLISHER,
        "quarantine": None,
        "approvers": ("rev",),
        "current": CURRENT,
        "history": frozenset({CURRENT}),
    }
    return MoveRequest(**{**base, **facts})


def refused(req: MoveRequest) -> AliasMoveRefused:
    with pytest.raises(AliasMoveRefused) as caught:
        decide_move(req)
    return caught.value


def test_move_with_every_piece_of_evidence_is_decided() -> None:
    decision = decide_move(request())
    assert decision.gates is not None
    assert decision.gates.promote
    assert not decision.is_rollback
    assert all(c.passed for c in decision.checks)
    assert [c.step for c in decision.checks] == ["1", "2", "3", "4a", "4b", "4c", "5", "6"]


def test_alias_without_a_rule_is_moved_by_nobody() -> None:
    error = refused(request(rule=None))
    assert error.reason is RefusalReason.RULE_MISSING
    assert http_error(error).detail["cause"] == "no_rule"


def test_publisher_of_another_repository_may_not_move_the_alias() -> None:
    error = refused(request(mover=Mover("eve", "publisher", role_holds_here=False)))
    assert error.reason is RefusalReason.NOT_A_PUBLISHER
    assert "repo add-publisher acme/model eve" in http_error(error).message


def test_role_the_rule_does_not_name_may_not_move_the_alias() -> None:
    error = refused(request(mover=Mover("rita", "reader", role_holds_here=False)))
    assert error.reason is RefusalReason.NOT_ALLOWED
    assert error.evidence["rule"]["roles"] == ["publisher"]


def test_quarantined_bundle_is_refused_with_its_quarantine() -> None:
    held = {"digest": DIGEST, "reason": "exfiltrates weights", "quarantined_in": REPO}
    error = refused(request(quarantine=held))
    assert error.reason is RefusalReason.QUARANTINED
    assert error.evidence == held


def test_bundle_the_current_policy_denies_is_refused_with_every_check() -> None:
    denied = Decision(allowed=False, checks=(Check("scan", False, "model.pkl: pickle"),))
    error = refused(request(denied=denied))
    assert error.reason is RefusalReason.POLICY_DENIED
    assert error.evidence["checks"][0]["message"] == "model.pkl: pickle"


def test_baseline_signed_by_the_publisher_does_not_count() -> None:
    statements = (baseline("publisher"), replay("evaluator"), evaluation("evaluator"))
    error = refused(request(statements=statements))
    assert error.reason is RefusalReason.BASELINE_REQUIRED
    assert error.evidence["not_counted"] == [
        {"signer": "publisher", "reason": "publisher is the bundle's publisher"}
    ]


def test_replay_result_against_another_bundle_does_not_count() -> None:
    statements = (baseline("evaluator"), replay("evaluator", OTHER), evaluation("evaluator"))
    error = refused(request(statements=statements))
    assert error.reason is RefusalReason.REPLAY_REQUIRED
    assert f"against {CURRENT}" in http_error(error).message


def test_evaluation_with_a_critical_safety_failure_blocks_the_move() -> None:
    statements = (baseline("evaluator"), replay("evaluator"), evaluation("evaluator", critical=2))
    error = refused(request(statements=statements))
    assert error.reason is RefusalReason.GATES_FAILED
    assert "max_critical_safety_failures FAIL" in http_error(error).message
    assert error.evidence["evaluations"]


def test_evaluation_signed_by_the_publisher_does_not_open_the_gates() -> None:
    statements = (baseline("evaluator"), replay("evaluator"), evaluation("publisher"))
    error = refused(request(statements=statements))
    assert error.reason is RefusalReason.GATES_FAILED
    assert error.evidence["not_counted"][0]["signer"] == "publisher"


def test_evaluation_against_another_baseline_does_not_count() -> None:
    statements = (
        baseline("evaluator"),
        replay("evaluator"),
        evaluation("evaluator", baseline=OTHER),
    )
    error = refused(request(statements=statements))
    assert error.reason is RefusalReason.GATES_FAILED


def test_rollback_to_a_digest_the_alias_never_had_is_refused() -> None:
    error = refused(request(rollback=True, history=frozenset({CURRENT, OTHER})))
    assert error.reason is RefusalReason.NOT_A_ROLLBACK
    assert decide_move(request(history=frozenset({CURRENT, DIGEST}))).is_rollback


def test_move_short_of_approvals_is_refused_last() -> None:
    error = refused(request(approvers=()))
    assert error.reason is RefusalReason.APPROVALS_REQUIRED
    assert error.evidence == {"have": [], "need": 1}
    # every other step passed: the refusal is the move's last check
    assert all(c.passed for c in error_checks(request(approvers=()))[:-1])


def error_checks(req: MoveRequest) -> list[Any]:
    return list(decide_move_result(req).checks)


def test_dry_run_reports_every_failed_step_from_the_same_code_path() -> None:
    held = {"digest": DIGEST, "reason": "exfiltrates weights"}
    req = request(
        mover=Mover("eve", "publisher", role_holds_here=False),
        quarantine=held,
        statements=(evaluation("evaluator", critical=2),),
        approvers=(),
    )
    report = decide_move_result(req)
    assert not report.allowed
    assert [r.reason for r in report.refusals] == [
        RefusalReason.NOT_A_PUBLISHER,
        RefusalReason.QUARANTINED,
        RefusalReason.BASELINE_REQUIRED,
        RefusalReason.REPLAY_REQUIRED,
        RefusalReason.GATES_FAILED,
        RefusalReason.APPROVALS_REQUIRED,
    ]
    # the first of them is what the move itself raises
    assert refused(req).reason is RefusalReason.NOT_A_PUBLISHER
    assert report_json(report)["checks"][2] == {
        "step": "3",
        "check": "policy",
        "passed": True,
        "message": "the repository's current policy allows the bundle",
        "reason": None,
        "evidence": {},
    }


def test_worker_judges_only_its_gates() -> None:
    """A worker has no mover, no approvals, no history and no bundle on the alias: it judges
    the release gates from what it verified, and nothing else fails its pull."""
    statements = (evaluation("evaluator", critical=2),)
    worker = MoveRequest(
        repo="",
        alias="prod",
        digest=DIGEST,
        rule=PROTECTED,
        statements=statements,
        evidence=evidence,
        judged=WORKER_STEPS,
    )
    report = decide_move_result(worker)
    assert [r.reason for r in report.refusals] == [RefusalReason.GATES_FAILED]
    passing = MoveRequest(
        repo="",
        alias="prod",
        digest=DIGEST,
        rule=PROTECTED,
        statements=(evaluation("evaluator"),),
        evidence=evidence,
        judged=WORKER_STEPS,
    )
    assert decide_move_result(passing).allowed
    no_rule = MoveRequest(
        repo="",
        alias="dev",
        digest=DIGEST,
        rule=None,
        statements=(),
        evidence=evidence,
        mover=PUBLISHER,
        judged=frozenset({"1"}),
    )
    assert not decide_move_result(no_rule).allowed
    assert decide_move_result(
        MoveRequest(
            repo="",
            alias="dev",
            digest=DIGEST,
            rule=None,
            statements=(),
            evidence=evidence,
            judged=WORKER_STEPS,
        )
    ).allowed


def test_slice_missing_from_the_evaluation_blocks_the_move() -> None:
    lines = cases("format", "deterministic", (50, 0, 0, 0))
    predicate = build_predicate(
        _results(jsonl(HEADER, lines)), bundle=(REPO, DIGEST), baseline=(REPO, CURRENT)
    )
    statements = (
        baseline("evaluator"),
        replay("evaluator"),
        signed("evaluator", EVALUATION_V1, predicate),
    )
    assert refused(request(statements=statements)).reason is RefusalReason.GATES_FAILED


@pytest.mark.parametrize(
    ("step", "unread"),
    [
        ("1", {"mover": None}),
        ("2", {"quarantine": NOT_READ}),
        ("5", {"history": None}),
        ("6", {"approvers": None}),
    ],
)
def test_a_judged_step_left_without_its_input_is_caller_misuse_not_a_pass(
    step: str, unread: dict[str, Any]
) -> None:
    """Fail closed: a step the caller judges on a fact it never read raises (the registry's
    signed-move check once passed ``approvers=None`` with every step judged)."""
    for decide in (decide_move, decide_move_result):
        with pytest.raises(ValueError, match=rf"step \({step}\) needs {next(iter(unread))}"):
            decide(request(**unread))
    # the same request with the step left out of ``judged`` is decided
    assert decide_move(request(**unread, judged=ALL_STEPS - {step})).checks


def test_a_quarantine_not_read_is_not_mistaken_for_none() -> None:
    """``None`` is "quarantined nowhere" (read); ``NOT_READ`` is no answer at all: judged
    only where step (2) is left out, and then reported as not judged."""
    assert request().quarantine is None
    assert (
        MoveRequest(
            repo=REPO, alias="prod", digest=DIGEST, rule=None, statements=(), evidence=evidence
        ).quarantine
        is NOT_READ
    )
    report = decide_move_result(request(quarantine=NOT_READ, judged=ALL_STEPS - {"2"}))
    step2 = next(c for c in report.checks if c.step == "2")
    assert step2.status is Status.SKIPPED
    assert not step2.passed
    assert report.allowed


def test_a_step_not_judged_is_reported_as_skipped_never_as_passed() -> None:
    """A worker judges its gates alone: the steps it leaves to the registry are skipped,
    even where they would have failed (no baseline, no replay, no approvals), never passed."""
    worker = MoveRequest(
        repo=REPO,
        alias="prod",
        digest=DIGEST,
        rule=PROTECTED,
        statements=(evaluation("evaluator"),),
        evidence=evidence,
        denied=Decision(allowed=False, checks=(Check("scan", False, "model.pkl: pickle"),)),
        judged=WORKER_STEPS,
    )
    report = decide_move_result(worker)
    status = {c.step: c.status for c in report.checks}
    assert status == {
        "1": Status.SKIPPED,
        "2": Status.SKIPPED,
        "3": Status.SKIPPED,
        "4a": Status.SKIPPED,
        "4b": Status.SKIPPED,
        "4c": Status.PASSED,
        "5": Status.SKIPPED,
        "6": Status.SKIPPED,
    }
    assert [c.step for c in report.checks if c.passed] == ["4c"]
    assert report.allowed
    assert all(c.reason is None and not c.evidence for c in report.checks)


def test_public_surface_is_pinned() -> None:
    import modelward.attest.alias_decision as module

    assert sorted(module.__all__) == [
        "ALL_STEPS",
        "AliasDecision",
        "AliasDecisionReport",
        "AliasMoveRefused",
        "MoveCheck",
        "MoveRequest",
        "Mover",
        "NOT_READ",
        "NotRead",
        "RefusalReason",
        "Status",
        "WORKER_STEPS",
        "decide_move",
        "decide_move_result",
    ]


# -- the pin: one place builds a move's verdict ------------------------------------------------
DECISION_NAMES = {"AliasDecision", "AliasDecisionReport", "AliasMoveRefused", "MoveCheck"}
MOVE_CODES = {"baseline_required", "replay_required", "gates_failed", "approvals_required"}


def _sources() -> list[Path]:
    out = []
    for package in ("attest", "registry", "loader"):
        out += sorted((ROOT / package).rglob("*.py"))
    return out


def test_alias_decision_is_the_only_place_a_moves_verdict_is_built() -> None:
    """No other module calls judge_evaluations (the gates), builds a decision or a refusal,
    or answers with a move's refusal codes: attest.alias_decision decides, the registry's
    moves.refusals maps its typed reason to HTTP, nothing else (clients may read the codes:
    registry/domains is where answers are made)."""
    owner = ROOT / "attest" / "alias_decision"  # the package: its types and its steps
    mapper = ROOT / "registry" / "domains" / "aliases" / "refusals.py"
    offenders = []
    for path in _sources():
        if owner in path.parents or path == ROOT / "attest" / "evaluation.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == "judge_evaluations" or name in DECISION_NAMES:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} calls {name}")
            server = ROOT / "registry" / "domains" in path.parents
            if (
                server
                and isinstance(node, ast.Constant)
                and node.value in MOVE_CODES
                and path != mapper
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} says {node.value!r}")
    assert offenders == []
