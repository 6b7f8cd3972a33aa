"""Release gates of a protected alias: evaluation evidence judged against the rule's ``gates``.

``check_gates`` is step (4) of an alias move for a rule with ``gates`` (docs/evaluation.md#gates,
docs/policy.md#release-gates), in order:

  (1) the evaluation statements that count: of predicate type evaluation/v1, vouched for by an
      evidence signer of the policy (the same rule as baselines and replay results:
      aliases.evidence, never the publisher, the mover, a publisher of the repository or an
      admin), about this very bundle (the predicate's ``bundle.digest``), and, when the alias
      already points at a bundle, evaluated against it (``baseline.digest``);
  (2) none counts: refused, every gate failing for want of evidence;
  (3) each counting evaluation is judged (attest.evaluation.evaluate_gates, intervals recomputed
      from its counts); every one must pass every gate: a failing evaluation cannot be
      outvoted by a luckier run (its attacher or an admin retracts it, audited);
  (4) otherwise refused ``gates_failed`` with every gate of the first blocking evaluation.

No I/O: the caller reads the statements and the evidence signers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from modelward.attest.evaluation import (
    EvaluationError,
    GateResult,
    evaluate_gates,
    gate_decision,
)
from modelward.attest.statement import PredicateType
from modelward.registry.errors import Refused

if TYPE_CHECKING:
    from modelward.attest.policy import AliasRule
    from modelward.attest.trust import VerifiedStatement
    from modelward.registry.domains.aliases.evidence import EvidenceSigners

__all__ = ["check_gates"]

GATE_NAMES = (
    "min_deterministic_pass_rate",
    "max_overall_regression_points",
    "max_slice_regression_points",
    "max_critical_safety_failures",
    "max_p95_ttft_ms",
    "max_p95_token_spacing_ms",
    "min_goodput_ratio",
    "max_energy_per_token_ratio",
)


def _digest_of(predicate: Any, key: str) -> str | None:
    ref = predicate.get(key) if isinstance(predicate, dict) else None
    digest = ref.get("digest") if isinstance(ref, dict) else None
    return digest if isinstance(digest, str) else None


def _summary(stmt: VerifiedStatement, gates: list[GateResult] | None) -> dict[str, Any]:
    predicate = stmt.statement.get("predicate", {})
    suite = predicate.get("suite") if isinstance(predicate, dict) else None
    entry: dict[str, Any] = {
        "signers": [s.name for s in stmt.signers],
        "suite": suite if isinstance(suite, dict) else None,
        "baseline": _digest_of(predicate, "baseline"),
    }
    if gates is not None:
        entry["verdict"] = gate_decision(gates).verdict
        entry["gates"] = [g.to_json() for g in gates]
    return entry


def check_gates(
    rule: AliasRule,
    statements: Sequence[VerifiedStatement],
    vouches: EvidenceSigners,
    *,
    repo_name: str,
    alias: str,
    digest: str,
    current_digest: str | None,
) -> None:
    """Raise ``Refused`` (422, ``gates_failed``) unless ``rule.gates`` is unset or every
    evaluation that counts for moving ``repo_name@alias`` to ``digest`` passes every gate.

    ``statements``: the bundle's verified statements (bundles.verdict); ``vouches``: who counts
    for evidence (aliases.evidence); ``current_digest``: the bundle on the alias now (None when
    it has none). The refusal's detail: ``gates`` (every gate of the blocking evaluation, with
    its verdict), ``evaluations`` (each counting one), ``not_counted`` (signer, reason).
    """
    from modelward.registry.domains.aliases.service import _vouched  # service imports us

    gates = rule.gates
    if gates is None:
        return
    ref = f"{repo_name}@{alias}"
    # (1): the evaluations that count.
    vouched, not_counted = _vouched(statements, PredicateType.EVALUATION, vouches)
    counted: list[VerifiedStatement] = []
    for stmt in vouched:
        predicate = stmt.statement.get("predicate", {})
        about, baseline = _digest_of(predicate, "bundle"), _digest_of(predicate, "baseline")
        signers = ", ".join(s.name for s in stmt.signers)
        if about != digest:
            not_counted.append({"signer": signers, "reason": f"evaluates {about}, not {digest}"})
        elif current_digest is not None and baseline != current_digest:
            not_counted.append({
                "signer": signers,
                "reason": f"its baseline is {baseline}, not {current_digest}, the bundle on "
                f"{ref} now",
            })
        else:
            counted.append(stmt)
    # (2): no evidence at all: every gate fails for want of it.
    against = f" against {current_digest} (the bundle on {ref} now)" if current_digest else ""
    if not counted:
        missing = (f"no evaluation of {digest}{against} signed by an evidence signer of the "
                   "policy")
        results = [
            {"name": name, "verdict": "fail", "observed": None, "bound": value,
             "interval": None, "slice": None, "message": missing, "more_cases": None}
            for name in GATE_NAMES
            if (value := getattr(gates, name)) is not None
        ]
        raise Refused(
            f"{ref} may not move to {digest}: release gates need an evaluation statement "
            f"(`modelward eval attach`) of {digest}{against}, signed by an evidence signer of "
            "the policy (never the publisher, the mover, a publisher of the repository or an "
            "admin)",
            detail={"gates": results, "evaluations": [], "not_counted": not_counted},
            code="gates_failed",
        )
    # (3): judge each counting evaluation; every one must pass every gate.
    evaluations: list[dict[str, Any]] = []
    blocking: list[GateResult] | None = None
    for stmt in counted:
        try:
            results_of = evaluate_gates(gates, stmt.statement.get("predicate", {}))
        except EvaluationError as exc:
            results_of = [GateResult("evaluation", "fail", None, 0, str(exc))]
        evaluations.append(_summary(stmt, results_of))
        if blocking is None and not gate_decision(results_of).promote:
            blocking = results_of
    if blocking is None:
        return
    # (4): refused, naming every gate of the blocking evaluation.
    reasons = "; ".join(
        f"{g.name}{f'[{g.slice}]' if g.slice else ''} {g.verdict.upper()}: {g.message}"
        for g in blocking if g.verdict != "pass"
    )
    raise Refused(
        f"{ref} may not move to {digest}: do not promote: {reasons}",
        detail={
            "gates": [g.to_json() for g in blocking],
            "evaluations": evaluations,
            "not_counted": not_counted,
        },
        code="gates_failed",
    )
