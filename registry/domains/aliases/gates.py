"""Release gates of a protected alias: evaluation evidence judged against the rule's ``gates``.

``check_gates`` is step (4) of an alias move for a rule with ``gates`` (docs/evaluation.md#gates,
docs/policy.md#release-gates). Which evaluations count and whether they pass is decided by
``attest.evaluation.judge_evaluations``, the same rule a serving worker applies under its own
policy; this module only supplies the registry's part of it:

  (1) who counts for evidence: ``EvidenceSigners`` (aliases.evidence: an evidence signer of
      the policy, never the publisher, the mover, a publisher of the repository or an admin);
  (2) the baseline every counting evaluation must be compared with: the bundle on the alias
      now (any, when it has none);
  (3) the refusal: ``gates_failed`` (422) with every gate of the blocking evaluation, every
      counting evaluation and every one not counted, with its reason.

No I/O: the caller reads the statements and the evidence signers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelward.attest.evaluation import gate_label, judge_evaluations
from modelward.registry.errors import Refused

if TYPE_CHECKING:
    from modelward.attest.policy import AliasRule
    from modelward.attest.trust import VerifiedStatement
    from modelward.registry.domains.aliases.evidence import EvidenceSigners

__all__ = ["check_gates"]


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
    gates = rule.gates
    if gates is None:
        return
    ref = f"{repo_name}@{alias}"
    against = f" against {current_digest} (the bundle on {ref} now)" if current_digest else ""
    # (1) + (2): the one rule (attest.evaluation), with the registry's evidence signers and
    # the bundle on the alias now as the baseline.
    judged = judge_evaluations(
        gates,
        statements,
        digest=digest,
        baseline=current_digest,
        evidence=vouches.reason_against,
        missing=f"no evaluation of {digest}{against} signed by an evidence signer of the policy",
    )
    if judged.promote:
        return
    # (3): refused, naming every gate of the blocking evaluation.
    detail = {
        "gates": [g.to_json() for g in judged.gates],
        "evaluations": [e.to_json() for e in judged.evaluations],
        "not_counted": [n.to_json() for n in judged.not_counted],
    }
    if not judged.evaluations:
        raise Refused(
            f"{ref} may not move to {digest}: release gates need an evaluation statement "
            f"(`modelward eval attach`) of {digest}{against}, signed by an evidence signer of "
            "the policy (never the publisher, the mover, a publisher of the repository or an "
            "admin)",
            detail=detail,
            code="gates_failed",
        )
    reasons = "; ".join(
        f"{gate_label(g)} {g.verdict.upper()}: {g.message}"
        for g in judged.gates
        if g.verdict != "pass"
    )
    raise Refused(
        f"{ref} may not move to {digest}: do not promote: {reasons}",
        detail=detail,
        code="gates_failed",
    )
