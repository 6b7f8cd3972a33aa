"""Policy lookups other components need: alias rules and the scanner's limits; and the
checks that a policy's protected alias rules can each be one TUF role, with a name that fits
everywhere a role name goes."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from modelward.attest.errors import PolicyError
from modelward.attest.policy._model import AliasRule, Policy
from modelward.attest.tuf import protected_role

if TYPE_CHECKING:
    from modelward.attest.scanner import ScanLimits

__all__ = [
    "RoleNameLimits",
    "alias_rule_for",
    "policy_scan_limits",
    "require_distinct_role_patterns",
    "require_role_names_fit",
]


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


@dataclass(frozen=True)
class RoleNameLimits:
    """Where a protected rule's TUF role name must fit (docs/policy.md#alias-rules), for the
    longest repository name it may be applied to (a policy is loaded before it meets one).

    ``longest_repository``: ORG and NAME at the registry's bound (100 characters each,
    registry/domains/repos/service.py ``NAME_RE``); ``max_role_chars``: the registry's role
    columns (``TufMetadata.role``, ``TufProposal.role``: String(300)); ``max_file_name_bytes``:
    a file name on the filesystems that hold metadata files (NAME_MAX, 255 bytes), checked
    for the longest spelling of one, ``VERSION.ROLE.json`` with ``ROLE`` URL-quoted as
    python-tuf's ngclient quotes it and ``VERSION`` of ``version_digits`` digits (the
    registry's file names allow 18).
    """

    longest_repository: str = "o" * 100 + "/" + "n" * 100
    max_role_chars: int = 300
    max_file_name_bytes: int = 255
    version_digits: int = 18


def require_role_names_fit(
    policy: Policy,
    source: str = "policy",
    limits: RoleNameLimits = RoleNameLimits(),
    *,
    repository: str | None = None,
) -> None:
    """Refuse a policy with a protected alias rule whose TUF role name
    (``attest.tuf.protected_role``) could not be stored or served: a pattern holding ``/``
    (a role name is part of a file name: ``VERSION.ROLE.json``), a role name over
    ``limits.max_role_chars``, or a file name over ``limits.max_file_name_bytes``, for the
    repository it judges (``repository``), or for the longest repository name
    (``limits.longest_repository``) when it may judge any (the operator's default).

    Raises:
        PolicyError: naming the rule (``aliases[i]``), the limit and the pattern's budget.
    """
    named = repository if repository is not None else limits.longest_repository
    for_repo = f"repository {repository}" if repository is not None else "the longest allowed"
    for i, rule in enumerate(policy.aliases):
        if not rule.protected:
            continue
        shown = rule.pattern if len(rule.pattern) <= 40 else rule.pattern[:40] + "..."
        where = f"{source}: aliases[{i}]: protected pattern {shown!r}"
        if "/" in rule.pattern:
            raise PolicyError(
                f"{where} holds '/': a protected pattern names its TUF role, and a role name "
                "is part of a metadata file's name (VERSION.ROLE.json), so it holds no '/' "
                "(docs/policy.md#alias-rules)"
            )
        role = protected_role(named, rule.pattern)
        prefix = len(protected_role(named, ""))
        if len(role) > limits.max_role_chars:
            raise PolicyError(
                f"{where} is {len(rule.pattern)} characters: its TUF role name "
                f"(ORG:NAME@PATTERN) would be {len(role)} characters for {for_repo}, over "
                f"the limit of {limits.max_role_chars}; keep "
                f"the pattern to {limits.max_role_chars - (len(role) - len(rule.pattern))} "
                "characters (docs/policy.md#alias-rules)"
            )
        overhead = limits.version_digits + len("..json")
        file_bytes = overhead + len(quote(role, safe=""))
        if file_bytes > limits.max_file_name_bytes:
            budget = limits.max_file_name_bytes - overhead - len(quote(role[:prefix], safe=""))
            raise PolicyError(
                f"{where} is too long for a TUF role name: its metadata file name "
                f"(VERSION.ROLE.json, ROLE URL-quoted) would be {file_bytes} bytes for "
                f"{for_repo}, over the limit of "
                f"{limits.max_file_name_bytes} (a file name); keep the pattern to "
                f"{budget} bytes URL-quoted (docs/policy.md#alias-rules)"
            )
