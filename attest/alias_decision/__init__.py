"""The one owner of the verdict "this alias may move to this bundle" (docs/registry.md#aliases).

Every caller reads what the decision needs and hands it in as a ``MoveRequest``; nothing
here does I/O, and nothing here words an outcome: a check carries its step, its status and
its typed ``reason`` with the evidence, and the wing that prints it writes the words (the
registry's moves.refusals, the loader's alias_gates). The registry decides at
``alias set`` (and its dry run), at the OCI tag push, and before it publishes a signed
proposal; a serving worker, after ``verify_bundle`` allowed the bundle it resolved
``REPO@ALIAS`` to, decides the steps it can judge without the registry (``WORKER_STEPS``).

``decide_move`` runs, in order (docs/registry.md#aliases, docs/policy.md#alias-rules):

    (1) an alias rule of the policy matches the alias (none: nobody may move it);
        (1b) it names the mover's principal, or the mover's role where the repository
             layer found that role holds in this repository (``Mover.role_holds_here``);
    (2) the bundle's digest is quarantined in no repository;
    (3) the repository's current policy allows the bundle: the bundle verifier's report
        (attest.verifier.verify_bundle_result) for the bundle as it is now;
    (4) a protected alias needs, as its rule says:
        (4a) a determinism baseline,
        (4b) a replay result against the bundle on the alias now (against none when the
             alias has none yet),
        (4c) every release gate passed by every evaluation that counts
             (attest.evaluation.judge_evaluations, baseline: the bundle on the alias now),
        each counting only when signed by a signer the ``evidence`` rule admits
        (docs/policy.md#evidence);
    (5) a move asked as a rollback names an earlier target of the alias;
    (6) a protected alias has ``approvals`` approvers that count (the caller reads them),
        checked last so that a move short only of approvals can be proposed instead
        (docs/tuf.md#proposals).

``decide_move`` raises ``AliasMoveRefused`` at the first failed step, carrying the check,
or returns the ``AliasDecision``. ``decide_move_result`` runs the very same steps and
returns every check (``alias set --dry-run``).

A step outside ``MoveRequest.judged``, or one whose rule asks nothing, is never "passed"
when it was not judged: it is ``SKIPPED``. A step in ``judged`` whose input the caller did
not read (``mover``, ``quarantine`` left ``NOT_READ``, ``approvers``, ``history``) is
caller misuse: the run raises ``ValueError`` (fail closed). The tree::

    AttestError
    └── AliasMoveRefused     check: MoveCheck (reason, step, evidence), request, gates
"""

from __future__ import annotations

from modelward.attest.alias_decision._model import (
    ALL_STEPS,
    NOT_READ,
    WORKER_STEPS,
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
from modelward.attest.alias_decision._steps import decide_move, decide_move_result

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
    "Status",
    "decide_move",
    "decide_move_result",
]
