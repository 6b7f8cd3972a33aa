"""Trust policy: the document (docs/policy.md), its loader, and the one evaluator.

The registry (at push and alias moves) and the loader (at pull and boot) both decide with
``evaluate``; nothing else in modelward decides whether a bundle is trusted.

An org's floor (``PolicyFloor``) is the least a repository policy must require of protected
aliases; ``require_meets_floor`` is the one check (docs/registry.md#orgs).

Errors: ``PolicyError`` (attest.errors) for an invalid document, naming the field;
``PolicyDenied`` when ``require_allowed`` is given a denying Decision; ``PolicyBelowFloor`` (a
PolicyError) when a policy is weaker than a floor, with every shortfall.
"""

from __future__ import annotations

from modelward.attest.policy._evaluate import (
    ATTESTATION_STEPS,
    OMS_TREE_NOTE,
    Check,
    Decision,
    PolicyDenied,
    evaluate,
    evidence_rule,
    require_allowed,
    size_checks,
)
from modelward.attest.policy._flags import TrustFlags, policy_from_flags
from modelward.attest.policy._floor import (
    FloorAlias,
    FloorLimits,
    PolicyBelowFloor,
    PolicyFloor,
    Shortfall,
    floor_shortfalls,
    require_meets_floor,
)
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
    "ATTESTATION_STEPS",
    "MAX_POLICY_BYTES",
    "OMS_TREE_NOTE",
    "PROVENANCE_V1",
    "AliasRule",
    "CASigner",
    "Check",
    "Decision",
    "Files",
    "FloorAlias",
    "FloorLimits",
    "IdentitySigner",
    "KeySigner",
    "Limits",
    "Policy",
    "PolicyBelowFloor",
    "PolicyDenied",
    "PolicyFloor",
    "ReplayRequirement",
    "Shortfall",
    "Signers",
    "TrustFlags",
    "alias_rule_for",
    "evaluate",
    "evidence_rule",
    "floor_shortfalls",
    "load_policy",
    "policy_from_flags",
    "policy_json_schema",
    "policy_json_schema_text",
    "policy_scan_limits",
    "policy_trust_set",
    "require_allowed",
    "require_meets_floor",
    "size_checks",
    "trusted_public_key",
]
