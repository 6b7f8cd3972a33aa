"""The org floor check (attest.policy._floor): one test per way a policy can fall short, the
happy path, and a differential test of its pattern automata against fnmatch itself."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from modelward.attest.errors import PolicyError
from modelward.attest.policy import (
    FloorLimits,
    Policy,
    PolicyBelowFloor,
    PolicyFloor,
    alias_rule_for,
    floor_shortfalls,
    require_meets_floor,
)
from modelward.attest.policy._floor import (
    ALIAS_FIRST_CHARS,
    ALIAS_MAX_CHARS,
    ALIAS_REST_CHARS,
    glob_matcher,
)

FLOOR = PolicyFloor.model_validate(
    {"aliases": [{"pattern": "prod", "approvals": 2}, {"pattern": "release-*", "approvals": 2}]}
)


def policy(*rules: dict[str, Any]) -> Policy:
    doc: dict[str, Any] = {"version": 1, "trust_registered_signers": True, "aliases": list(rules)}
    if "evidence" in Policy.model_fields:  # who signs baselines (require_baseline needs it)
        doc["evidence"] = {"roles": ["reader"]}
    return Policy.model_validate(doc)


def rule(pattern: str, approvals: int | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"pattern": pattern, "roles": ["publisher"], **extra}
    if approvals is not None:
        out |= {"protected": True, "approvals": approvals}
    return out


def shortfalls(p: Policy, floor: PolicyFloor = FLOOR) -> list[tuple[str, str, int | None]]:
    return [(s.floor_pattern, s.alias, s.rule_index) for s in floor_shortfalls(p, floor)]


def test_a_policy_that_protects_every_floor_alias_meets_it() -> None:
    p = policy(rule("prod", 2), rule("release-*", 3), rule("*"))
    require_meets_floor(p, FLOOR)
    require_meets_floor(p, None)  # no floor: always


def test_unprotected_prod_rule_falls_short() -> None:
    p = policy(rule("prod"), rule("release-*", 2))
    [short] = floor_shortfalls(p, FLOOR)
    assert (short.alias, short.rule_index) == ("prod", 0)
    assert short.missing[0] == "protected: true"


def test_fewer_approvals_than_the_floor_falls_short() -> None:
    p = policy(rule("prod", 1), rule("release-*", 2))
    with pytest.raises(PolicyBelowFloor) as info:
        require_meets_floor(p, FLOOR, source="acme/m policy")
    assert isinstance(info.value, PolicyError)
    message = str(info.value)
    assert "acme/m policy" in message
    assert "'prod'" in message
    assert "approvals: 2 or more (the rule has 1)" in message


def test_a_floor_alias_no_rule_matches_falls_short() -> None:
    p = policy(rule("release-*", 2))
    assert shortfalls(p) == [("prod", "prod", None)]


def test_star_rule_before_prod_shadows_it() -> None:
    """The first matching rule governs: `*` listed first leaves `prod` unprotected, however
    strict the `prod` rule after it."""
    p = policy(rule("*"), rule("prod", 5), rule("release-*", 5))
    assert alias_rule_for(p, "prod") is p.aliases[0]
    found = shortfalls(p)
    assert ("prod", "prod", 0) in found
    assert ("release-*", "release-", 0) in found


def test_a_glob_rule_covering_only_part_of_a_floor_pattern_falls_short() -> None:
    """`release-[0-9]*` is protected, but `release-a` falls through to `*`."""
    p = policy(rule("prod", 2), rule("release-[0-9]*", 2), rule("*"))
    [short] = floor_shortfalls(p, FLOOR)
    assert short.floor_pattern == "release-*"
    assert short.rule_index == 2
    assert fnmatch.fnmatchcase(short.alias, "release-*")
    assert not fnmatch.fnmatchcase(short.alias, "release-[0-9]*")
    assert alias_rule_for(p, short.alias) is p.aliases[2]


def test_an_earlier_weaker_glob_that_overlaps_a_floor_pattern_falls_short() -> None:
    p = policy(rule("prod", 2), rule("rel*", 1), rule("release-*", 2))
    [short] = floor_shortfalls(p, FLOOR)
    assert (short.floor_pattern, short.rule_index) == ("release-*", 1)


def test_a_question_mark_rule_before_prod_shadows_it() -> None:
    p = policy(rule("pro?"), rule("prod", 2), rule("release-*", 2))
    assert shortfalls(p) == [("prod", "prod", 0)]


def test_a_bracket_rule_before_prod_shadows_it() -> None:
    p = policy(rule("[!x]rod"), rule("prod", 2), rule("release-*", 2))
    assert shortfalls(p) == [("prod", "prod", 0)]


def test_names_longer_than_an_alias_can_be_are_not_counted() -> None:
    """Only names the registry accepts (at most 100 characters) count against a policy."""
    too_long = "x" * (ALIAS_MAX_CHARS + 1) + "*"
    floor = PolicyFloor.model_validate({"aliases": [{"pattern": too_long, "approvals": 2}]})
    assert floor_shortfalls(policy(rule("*")), floor) == []
    longest = "x" * (ALIAS_MAX_CHARS - 1) + "?"
    floor = PolicyFloor.model_validate({"aliases": [{"pattern": longest, "approvals": 2}]})
    [short] = floor_shortfalls(policy(rule("*")), floor)
    assert len(short.alias) == ALIAS_MAX_CHARS


def test_the_floors_alphabets_are_the_alias_grammar_of_attest_names() -> None:
    """The floor searches the names ``attest.names.ALIAS_RE`` accepts: the same first and
    following characters and the same length, checked over every code point below 0x250
    (so the two spellings of one grammar cannot drift apart)."""
    from modelward.attest.names import ALIAS_MAX, ALIAS_RE

    assert ALIAS_MAX_CHARS == ALIAS_MAX
    for code in range(0x250):
        ch = chr(code)
        assert (ALIAS_RE.fullmatch(ch) is not None) == (ch in ALIAS_FIRST_CHARS), repr(ch)
        assert (ALIAS_RE.fullmatch("a" + ch) is not None) == (ch in ALIAS_REST_CHARS), repr(ch)
    assert ALIAS_RE.fullmatch("a" * ALIAS_MAX_CHARS)
    assert not ALIAS_RE.fullmatch("a" * (ALIAS_MAX_CHARS + 1))


def test_a_floor_that_requires_a_baseline() -> None:
    floor = PolicyFloor.model_validate(
        {"aliases": [{"pattern": "prod", "approvals": 1, "require_baseline": True}]}
    )
    [short] = floor_shortfalls(policy(rule("prod", 3)), floor)
    assert short.missing == ("require_baseline: true",)
    require_meets_floor(policy(rule("prod", 1, require_baseline=True)), floor)


def test_rules_too_complex_to_decide_fail_closed() -> None:
    rules = [
        rule("*" + "*".join("abcdefgh"[(i + j) % 8] for j in range(8)) + "*") for i in range(40)
    ]
    floor = PolicyFloor.model_validate({"aliases": [{"pattern": "*", "approvals": 0}]})
    [short] = floor_shortfalls(policy(*rules), floor, FloorLimits(max_steps=10_000))
    assert short.alias == ""
    assert "simple enough" in str(short)


@pytest.mark.parametrize(
    "doc",
    [
        {"aliases": []},
        {"aliases": [{"pattern": "prod", "approvals": 1}, {"pattern": "prod", "approvals": 2}]},
        {"aliases": [{"pattern": "prod", "approvals": -1}]},
        {"aliases": [{"pattern": "prod"}]},
        {"aliases": [{"pattern": "prod", "approvals": 1, "protected": False}]},
        {"aliases": [{"pattern": "", "approvals": 1}]},
    ],
)
def test_an_empty_or_malformed_floor_is_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PolicyFloor.model_validate(doc)


# -- differential: the floor's automata against fnmatch ----------------------------------
PATTERN_PARTS = st.sampled_from(
    [
        "*",
        "?",
        "a",
        "b",
        "-",
        ".",
        "[ab]",
        "[!a]",
        "[a-c]",
        "[]a]",
        "[!]]",
        "[",
        "]",
        "!",
        "[--a]",
        "[a-]",
        "[0-9]",
        "x",
        "A",
        "_",
        "[A-Z]",
        "[\\]",
        "/",
        "[.-]",
    ]
)
NAMES = st.text(alphabet=ALIAS_REST_CHARS, min_size=1, max_size=12).filter(
    lambda n: n[0] in ALIAS_FIRST_CHARS
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(PATTERN_PARTS, max_size=8), names=st.lists(NAMES, min_size=1, max_size=8))
def test_pattern_automata_agree_with_fnmatch(parts: list[str], names: list[str]) -> None:
    pattern = "".join(parts)
    glob = glob_matcher(pattern)
    for name in names:
        assert glob.matches(name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    floor_parts=st.lists(PATTERN_PARTS, min_size=1, max_size=5),
    rules=st.lists(
        st.tuples(st.lists(PATTERN_PARTS, min_size=1, max_size=5), st.booleans()), max_size=4
    ),
    names=st.lists(NAMES, min_size=1, max_size=20),
)
def test_every_shortfall_is_real_and_every_sampled_violation_is_found(
    floor_parts: list[str], rules: list[tuple[list[str], bool]], names: list[str]
) -> None:
    """Each reported example alias really is governed as reported (alias_rule_for), and no
    sampled name the floor pattern matches is governed by a weak rule unreported."""
    floor_pattern = "".join(floor_parts)
    floor = PolicyFloor.model_validate({"aliases": [{"pattern": floor_pattern, "approvals": 1}]})
    p = policy(*(rule("".join(parts), 1 if strong else None) for parts, strong in rules))
    found = floor_shortfalls(p, floor)
    weak = {s.rule_index for s in found}
    for short in found:
        assert fnmatch.fnmatchcase(short.alias, floor_pattern)
        governing = alias_rule_for(p, short.alias)
        index = None if governing is None else p.aliases.index(governing)
        assert index == short.rule_index
    for name in names:
        if fnmatch.fnmatchcase(name, floor_pattern):
            governing = alias_rule_for(p, name)
            if governing is None or not governing.protected:
                index = None if governing is None else p.aliases.index(governing)
                assert index in weak, (floor_pattern, name, index, found)
