"""Policy lookups other components need: alias rules and the scanner's limits."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from modelward.attest.policy._model import AliasRule, Policy

if TYPE_CHECKING:
    from modelward.attest.scanner import ScanLimits

__all__ = ["alias_rule_for", "policy_scan_limits"]


def alias_rule_for(policy: Policy, alias: str) -> AliasRule | None:
    """The first alias rule whose pattern (fnmatch, case-sensitive) matches ``alias``.

    None means no rule matches: nobody may move that alias (the registry denies).
    """
    for rule in policy.aliases:
        if fnmatch.fnmatchcase(alias, rule.pattern):
            return rule
    return None


def policy_scan_limits(policy: Policy) -> ScanLimits:
    """The scanner limits a policy asks for (allow_globs only admit unknown formats)."""
    from modelward.attest.scanner import ScanLimits

    return ScanLimits(
        max_safetensors_header=policy.limits.max_safetensors_header,
        allow_globs=tuple(policy.files.allow_globs),
    )
