"""Policy lookups other components need: alias rules and the scanner's limits; and the
check that a policy's protected alias rules can each be one TUF role."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from modelward.attest.errors import PolicyError
from modelward.attest.policy._model import AliasRule, Policy

if TYPE_CHECKING:
    from modelward.attest.scanner import ScanLimits

__all__ = ["alias_rule_for", "policy_scan_limits", "require_distinct_role_patterns"]


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


def require_distinct_role_patterns(policy: Policy, source: str = "policy") -> None:
    """Refuse a policy whose protected alias rules could not each be their own TUF role.

    A protected rule's pattern names its role (``attest.tuf.protected_role``, docs/tuf.md#roles),
    and the first rule whose pattern matches an alias decides it (``alias_rule_for``). So a
    protected pattern written twice (or a pattern written twice where either rule is
    protected) would be two roles of one name, or a role for a rule never applied.

    Raises:
        PolicyError: naming both rules (``aliases[i]`` and ``aliases[j]``) and the pattern.
    """
    seen: dict[str, int] = {}
    for i, rule in enumerate(policy.aliases):
        first = seen.setdefault(rule.pattern, i)
        if first != i and (rule.protected or policy.aliases[first].protected):
            raise PolicyError(
                f"{source}: aliases[{i}]: pattern {rule.pattern!r} repeats aliases[{first}], "
                "and one of them is protected; a protected pattern names its TUF role "
                "(docs/tuf.md#roles), so it may appear once"
            )
