"""A worker's release gates for ``REPO@ALIAS`` (docs/policy.md#release-gates, docs/loader.md#pull).

After TUF resolved the alias and the one bundle verifier judged the bundle
(attest.verifier.verify_bundle_result), ``gate_checks`` asks the one decision of an alias
move (attest.alias_decision, ``WORKER_STEPS``: the gates, under the worker's own policy and
evidence signers) and words its judgement as the worker's policy checks; the pull refuses
on any that failed, with the verifier's. A reference by digest matches no alias rule and
is never asked here.
"""

from __future__ import annotations

from dataclasses import replace

from modelward.attest.alias_decision import WORKER_STEPS, MoveRequest, decide_move_result
from modelward.attest.evaluation import GateResult, gate_label
from modelward.attest.policy import Check, Decision, Policy, alias_rule_for, evidence_rule
from modelward.attest.verifier import BundleVerdict

__all__ = ["GATES_STEP", "gate_checks", "with_gates"]

GATES_STEP = 9  # the number the worker's gate checks carry among the policy's checks


def with_gates(decision: Decision, checks: list[Check]) -> Decision:
    """``decision`` with the worker's gate ``checks`` added: allowed only if all pass."""
    allowed = decision.allowed and all(c.passed for c in checks)
    return replace(decision, allowed=allowed, checks=(*decision.checks, *checks))


def gate_checks(policy: Policy, repo: str, alias: str, verdict: BundleVerdict) -> list[Check]:
    """The release gates of the worker policy's alias rule for ``alias``, judged by the
    alias decision from the evaluations ``verdict`` verified, as policy checks."""
    checks = _gate_checks(policy, repo, alias, verdict)
    return [replace(c, step=GATES_STEP) for c in checks]


def _gate_check(result: GateResult) -> Check:
    observed = "none" if result.observed is None else f"{result.observed + 0.0:g}"
    more = f", {result.more_cases} more cases" if result.more_cases is not None else ""
    return Check(
        f"gate {gate_label(result)}",
        result.verdict == "pass",
        f"{result.verdict} (observed {observed}, bound {result.bound:g}{more}): {result.message}",
    )


def _gate_checks(policy: Policy, repo: str, alias: str, verdict: BundleVerdict) -> list[Check]:
    rule = alias_rule_for(policy, alias)
    if rule is None or rule.gates is None:
        what = "no alias rule" if rule is None else f"alias rule {rule.pattern!r} sets no gates"
        return [Check("gates", True, f"{what} for {alias!r}: no release gates")]
    digest = verdict.digest
    nobody = (
        ""
        if policy.evidence.signers
        else (
            " (evidence.signers names none; evidence.principals and evidence.roles are the "
            "registry's, a worker counts only its own evidence.signers)"
        )
    )
    report = decide_move_result(
        MoveRequest(
            repo=repo,
            alias=alias,
            digest=digest,
            rule=rule,
            statements=verdict.statements,
            evidence=evidence_rule(policy, verdict.statements, verdict.manifest),
            judged=WORKER_STEPS,
        )
    )
    judged = report.gates
    if judged is None:  # pragma: no cover - the rule sets gates (checked above)
        raise AssertionError("the alias decision judged no gates")
    promote = report.allowed
    checks = [_gate_check(g) for g in judged.gates]
    checks.extend(
        Check("gates", False, f"evaluation by {n.signer} not counted: {n.reason}")
        for n in judged.not_counted
        if not promote
    )
    where = f"alias {alias!r} (rule {rule.pattern!r})"
    if promote:
        message = (
            f"promote: {len(judged.evaluations)} evaluation(s) of {digest} by evidence "
            f"signers pass every gate of {where}"
        )
    elif not judged.evaluations:
        message = (
            f"do not promote: {where} needs an evaluation statement (`modelward eval "
            f"attach`) of {digest} signed by an evidence signer of the policy{nobody}"
        )
    else:
        blocking = [gate_label(g) for g in judged.gates if g.verdict != "pass"]
        passed = [gate_label(g) for g in judged.gates if g.verdict == "pass"]
        message = (
            f"do not promote: {len(blocking)} of {len(judged.gates)} gate(s) of {where} "
            f"block ({', '.join(blocking)}); passed: {', '.join(passed) or 'none'}"
        )
    checks.append(Check("gates", promote, message))
    return checks
