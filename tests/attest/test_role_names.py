"""A protected alias rule's TUF role name fits everywhere a role name goes (docs/tuf.md#roles):
the registry's role columns (300 characters), a metadata file name (``VERSION.ROLE.json``,
URL-quoted as ngclient quotes it, within NAME_MAX) and a file name at all (no ``/``), for
the longest repository name; refused at policy load, naming the rule and the limit."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from modelward.attest.errors import PolicyError
from modelward.attest.policy import load_policy
from modelward.attest.policy._rules import RoleNameLimits, require_role_names_fit
from modelward.attest.tuf import protected_role


def _policy(pattern: str, *, protected: bool = True) -> bytes:
    flag = ", protected: true, approvals: 1" if protected else ""
    return (
        "version: 1\ntrust_registered_signers: true\naliases:\n"
        "  - {pattern: dev, roles: [publisher]}\n"
        f"  - {{pattern: '{pattern}', roles: [publisher]{flag}}}\n"
    ).encode()


def _check(pattern: str, limits: RoleNameLimits = RoleNameLimits(), **kw: bool) -> None:
    require_role_names_fit(load_policy(_policy(pattern, **kw), source="p.yaml"), "p.yaml", limits)


def test_the_longest_pattern_that_fits_is_accepted_and_its_file_name_fits() -> None:
    limits = RoleNameLimits()
    longest = "r" * 25
    _check(longest)
    role = protected_role(limits.longest_repository, longest)
    assert len(f"{'9' * 18}.{quote(role, safe='')}.json".encode()) == 255


@pytest.mark.parametrize(
    ("pattern", "quoted"),
    [("r" * 26, 26), ("release-*-" + "x" * 14, 26), ("é" * 5, 30), ("*" * 9, 27)],
)
def test_a_protected_pattern_too_long_for_a_file_name_is_refused(pattern: str, quoted: int) -> None:
    """Every byte counts as ngclient quotes it: '*' is three, 'é' six."""
    assert len(quote(pattern, safe="")) == quoted
    with pytest.raises(PolicyError) as refused:
        _check(pattern)
    message = str(refused.value)
    assert message.startswith("p.yaml: aliases[1]: protected pattern")
    assert f"would be {24 + 206 + quoted} bytes" in message
    assert "over the limit of 255 (a file name); keep the pattern to 25 bytes URL-quoted" in (
        message
    )


def test_a_protected_pattern_too_long_for_the_role_column_is_refused() -> None:
    """With a file-name limit that allows it, the 300-character column still refuses."""
    limits = RoleNameLimits(max_file_name_bytes=10_000)
    _check("r" * 98, limits)
    with pytest.raises(PolicyError) as refused:
        _check("r" * 99, limits)
    message = str(refused.value)
    assert "p.yaml: aliases[1]: protected pattern 'rrrr" in message
    assert "...' is 99 characters: its TUF role name (ORG:NAME@PATTERN) would be 301" in message
    assert "over the limit of 300; keep the pattern to 98 characters" in message


def test_a_protected_pattern_holding_a_slash_is_refused() -> None:
    with pytest.raises(PolicyError) as refused:
        _check("team/prod")
    assert "p.yaml: aliases[1]: protected pattern 'team/prod' holds '/'" in str(refused.value)


def test_an_unprotected_pattern_names_no_role_and_is_not_limited() -> None:
    _check("team/" + "r" * 150, protected=False)


def test_the_repository_it_judges_sets_the_budget_not_the_longest_name() -> None:
    """A registry checks a repository's policy for that repository's name: a 40-byte pattern,
    refused for a name of the longest allowed, fits a short one."""
    pattern = "release-candidate-" + "x" * 22
    policy = load_policy(_policy(pattern), source="p.yaml")
    with pytest.raises(PolicyError, match="for the longest allowed"):
        require_role_names_fit(policy, "p.yaml")
    require_role_names_fit(policy, "p.yaml", repository="acme/tiny-llama")
    with pytest.raises(PolicyError, match="for repository acme/tiny-llama"):
        require_role_names_fit(
            load_policy(_policy("*" * 80), source="p.yaml"), "p.yaml", repository="acme/tiny-llama"
        )
