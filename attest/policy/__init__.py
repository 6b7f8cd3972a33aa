"""Trust policy: the document (docs/policy.md), its loader, and the one evaluator.

The registry (at push and alias moves) and the loader (at pull and boot) both decide with
``evaluate``; nothing else in modelward decides whether a bundle is trusted.

Errors: ``PolicyError`` (attest.errors) for an invalid document, naming the field;
``PolicyDenied`` when ``require_allowed`` is given a denying Decision.
"""

from __future__ import annotations

from modelward.attest.policy._evaluate import (
    OMS_TREE_NOTE,
    Check,
    Decision,
    PolicyDenied,
    evaluate,
    require_allowed,
    size_checks,
)
from modelward.attest.policy._flags import TrustFlags, policy_from_flags
from modelward.attest.policy._load import (
    MAX_POLICY_BYTES,
    load_policy,
    policy_trust_set,
    trusted_public_key,
)
from modelward.attest.policy._model import (
    PROVENANCE_V1,
    AliasRule,
    CASigner,
    Files,
    IdentitySigner,
    KeySigner,
    Limits,
    Policy,
    ReplayRequirement,
    Signers,
    policy_json_schema,
    policy_json_schema_text,
)
from modelward.attest.policy._rules import alias_rule_for, policy_scan_limits

__all__ = [
    "MAX_POLICY_BYTES",
    "OMS_TREE_NOTE",
    "PROVENANCE_V1",
    "AliasRule",
    "CASigner",
    "Check",
    "Decision",
    "Files",
    "IdentitySigner",
    "KeySigner",
    "Limits",
    "Policy",
    "PolicyDenied",
    "ReplayRequirement",
    "Signers",
    "TrustFlags",
    "alias_rule_for",
    "evaluate",
    "load_policy",
    "policy_from_flags",
    "policy_json_schema",
    "policy_json_schema_text",
    "policy_scan_limits",
    "policy_trust_set",
    "require_allowed",
    "size_checks",
    "trusted_public_key",
]
