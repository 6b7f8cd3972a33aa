"""The one place a refused alias move (attest.alias_decision) becomes an HTTP error.

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

from modelward.attest.alias_decision import AliasMoveRefused, RefusalReason
from modelward.registry.errors import (
    BadRequest,
    Forbidden,
    Quarantined,
    Refused,
    RegistryError,
)

__all__ = ["http_error"]

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
    detail = dict(refused.evidence)
    if reason in _WHO:
        return Forbidden(refused.message, detail=detail)
    if reason is RefusalReason.QUARANTINED:
        return Quarantined(refused.message, detail=detail)
    if reason in _EVIDENCE:
        return Refused(refused.message, detail=detail, code=reason.value)
    if reason is RefusalReason.NOT_A_ROLLBACK:
        return BadRequest(refused.message, detail=detail, code=reason.value)
    if reason is RefusalReason.APPROVALS_REQUIRED:
        return Forbidden(refused.message, detail=detail, code=reason.value)
    raise ValueError(f"no HTTP error for {reason}")  # pragma: no cover - every reason above
