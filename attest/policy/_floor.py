"""An org's policy floor, and the one check that a repository policy meets it (no I/O).

A floor (docs/registry.md#orgs) lists alias patterns (fnmatch, as alias rules) that every
repository of the org must protect: ``{aliases: [{pattern: prod, approvals: 2}]}``. A policy
*meets* the floor when, for every alias name a floor pattern matches, the rule that governs the
name under the first-match rule of ``alias_rule_for``:

1. exists — an alias no rule matches is a shortfall too: cover it explicitly;
2. is ``protected``;
3. needs at least the floor's ``approvals``;
4. needs a baseline when the floor's ``require_baseline`` says so.

"Every alias name" is decided exactly, not by sampling: each pattern becomes an automaton over
the alias-name alphabet (``[A-Za-z0-9]`` then ``[A-Za-z0-9._-]``, at most 100 characters, as
the registry accepts), and a breadth-first walk of their product visits every class of names
the floor pattern matches, each with its shortest example. So a ``*`` rule listed before the
``prod`` rule is found to govern ``prod``, and ``release-*`` under a floor that protects
``release-*`` is found to leave, say, ``release-a`` to a later, weaker rule. A policy too
complex to decide within ``FloorLimits.max_steps`` falls short (fail closed).

Errors: ``PolicyBelowFloor`` (a ``PolicyError``) carries every ``Shortfall``, each naming an
example alias, the floor pattern, the rule that governs it and what that rule lacks.
``floor_shortfalls`` returns the same list for display.
"""

from __future__ import annotations

import fnmatch
import string
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from modelward.attest.errors import PolicyError
from modelward.attest.names import ALIAS_MAX
from modelward.attest.policy._model import MAX_APPROVALS, AliasRule, Policy

__all__ = [
    "ALIAS_FIRST_CHARS",
    "ALIAS_MAX_CHARS",
    "ALIAS_REST_CHARS",
    "FloorAlias",
    "FloorLimits",
    "PolicyBelowFloor",
    "PolicyFloor",
    "Shortfall",
    "floor_shortfalls",
    "glob_matcher",
    "require_meets_floor",
]

# The alias names the registry accepts (attest.names.ALIAS_RE, spelled out as alphabets for
# the search below; tests/attest/test_policy_floor.py checks they agree character by character)
ALIAS_FIRST_CHARS = string.ascii_letters + string.digits
ALIAS_REST_CHARS = ALIAS_FIRST_CHARS + "._-"
ALIAS_MAX_CHARS = ALIAS_MAX
MAX_FLOOR_APPROVALS = MAX_APPROVALS


class FloorAlias(BaseModel):
    """Aliases matching ``pattern`` must be protected with at least ``approvals`` approvals."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: Annotated[str, Field(min_length=1, max_length=200)]
    approvals: int = Field(ge=0, le=MAX_FLOOR_APPROVALS, description="distinct approvals")
    require_baseline: bool = False


class PolicyFloor(BaseModel):
    """What every repository policy in an org must require at least. Never empty: no floor
    is ``None``, not an empty list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    aliases: list[FloorAlias] = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def _unique_patterns(self) -> PolicyFloor:
        seen: set[str] = set()
        for entry in self.aliases:
            if entry.pattern in seen:
                raise ValueError(f"floor pattern {entry.pattern!r} is listed twice")
            seen.add(entry.pattern)
        return self


@dataclass(frozen=True)
class FloorLimits:
    """How much work deciding a floor may take, in automaton steps for the whole floor
    (a fraction of a second; a policy of a dozen rules needs a few thousand)."""

    max_steps: int = 200_000


@dataclass(frozen=True)
class Shortfall:
    """One way a policy falls short of a floor pattern, with the shortest example alias."""

    floor_pattern: str
    alias: str
    rule_index: int | None  # aliases[i] governs ``alias``; None: no rule matches it
    rule_pattern: str | None
    missing: tuple[str, ...]

    def __str__(self) -> str:
        if not self.alias:
            return f"org floor {self.floor_pattern!r}: needs {', '.join(self.missing)}"
        if self.rule_index is None:
            where = "no alias rule matches it"
        else:
            where = f"aliases[{self.rule_index}] (pattern {self.rule_pattern!r}) governs it"
        return (
            f"alias {self.alias!r} (org floor {self.floor_pattern!r}): {where}; "
            f"needs {', '.join(self.missing)}"
        )


class PolicyBelowFloor(PolicyError):  # noqa: N818 - named as PolicyDenied is
    """The policy is weaker than the org's floor; ``shortfalls`` lists every way it is."""

    def __init__(self, shortfalls: Sequence[Shortfall], source: str = "policy") -> None:
        self.shortfalls = tuple(shortfalls)
        first = str(self.shortfalls[0]) if self.shortfalls else "?"
        more = f" (and {len(self.shortfalls) - 1} more)" if len(self.shortfalls) > 1 else ""
        super().__init__(f"{source}: weaker than the org floor: {first}{more}")


# -- fnmatch patterns as automata ----------------------------------------------------------
# A pattern is a list of positions: None for ``*``, else the set of alias characters that
# position accepts (``?``: all; ``[...]``: what fnmatch itself says; a literal: itself). The
# bracket extent is read exactly as fnmatch.translate reads it; membership of each character
# is asked of fnmatch. tests/attest/test_policy_floor.py checks both against fnmatchcase.
_Token = frozenset[str] | None
_ALPHABET = frozenset(ALIAS_REST_CHARS)


def _tokens(pattern: str) -> tuple[_Token, ...]:
    out: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not out or out[-1] is not None:
                out.append(None)
        elif c == "?":
            out.append(_ALPHABET)
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(frozenset("[") & _ALPHABET)
            else:
                bracket = pattern[i - 1 : j + 1]
                out.append(frozenset(ch for ch in _ALPHABET if fnmatch.fnmatchcase(ch, bracket)))
                i = j + 1
        else:
            out.append(frozenset(c) & _ALPHABET)
    return tuple(out)


class _Glob:
    """A pattern as a nondeterministic automaton; states are positions in its token list."""

    def __init__(self, pattern: str) -> None:
        self.tokens = _tokens(pattern)
        self.start = self._closure({0})

    def _closure(self, states: set[int]) -> frozenset[int]:
        out = set(states)
        for i in sorted(states):
            while i < len(self.tokens) and self.tokens[i] is None:
                i += 1
                out.add(i)
        return frozenset(out)

    def step(self, states: frozenset[int], ch: str) -> frozenset[int]:
        nxt: set[int] = set()
        for i in states:
            if i == len(self.tokens):
                continue
            token = self.tokens[i]
            if token is None:
                nxt.add(i)
            elif ch in token:
                nxt.add(i + 1)
        return self._closure(nxt) if nxt else frozenset()

    def accepts(self, states: frozenset[int]) -> bool:
        return len(self.tokens) in states

    def matches(self, name: str) -> bool:
        states = self.start
        for ch in name:
            states = self.step(states, ch)
        return self.accepts(states)


def glob_matcher(pattern: str) -> _Glob:
    """The automaton the floor check uses for ``pattern`` (for differential tests against
    ``fnmatch.fnmatchcase`` over alias names)."""
    return _Glob(pattern)


def _representatives(chars: str, globs: Sequence[_Glob]) -> str:
    """One character per class of characters every position of every pattern treats alike."""
    sets = [t for g in globs for t in g.tokens if t is not None]
    seen: dict[tuple[bool, ...], str] = {}
    for ch in chars:
        seen.setdefault(tuple(ch in s for s in sets), ch)
    return "".join(seen.values())


_State = tuple[frozenset[int], tuple[frozenset[int], ...]]


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int) -> bool:
        self.left -= steps
        return self.left >= 0


def _governing(
    floor_glob: _Glob,
    rules: Sequence[_Glob],
    budget: _Budget,
) -> dict[int | None, str] | None:
    """For each rule index (None: no rule) that governs some alias name ``floor_glob``
    matches, the shortest such name; None when the walk runs out of ``budget``."""
    everything = [floor_glob, *rules]
    first = _representatives(ALIAS_FIRST_CHARS, everything)
    rest = _representatives(ALIAS_REST_CHARS, everything)
    start: _State = (floor_glob.start, tuple(r.start for r in rules))
    # the empty start is not an alias: a state equal to it after a character is a new one
    seen: set[_State] = set()
    queue: deque[tuple[_State, str]] = deque([(start, "")])
    found: dict[int | None, str] = {}
    while queue:
        (f_states, r_states), name = queue.popleft()
        if name and floor_glob.accepts(f_states):
            governing = next((i for i, r in enumerate(rules) if r.accepts(r_states[i])), None)
            found.setdefault(governing, name)  # breadth first: the first is the shortest
        if len(name) == ALIAS_MAX_CHARS:
            continue
        chars = first if not name else rest
        if not budget.spend(len(chars) * len(everything)):
            return None
        for ch in chars:
            f_next = floor_glob.step(f_states, ch)
            if not f_next:
                continue  # no name the floor pattern matches continues this way
            state: _State = (
                f_next,
                tuple(r.step(s, ch) for r, s in zip(rules, r_states, strict=True)),
            )
            if state not in seen:
                seen.add(state)
                queue.append((state, name + ch))
    return found


def floor_shortfalls(
    policy: Policy, floor: PolicyFloor, limits: FloorLimits = FloorLimits()
) -> list[Shortfall]:
    """Every way ``policy`` falls short of ``floor`` (empty: it meets it). See the module
    docstring for the rules; order: floor entries, then rule index (no rule last)."""
    rules = [_Glob(rule.pattern) for rule in policy.aliases]
    budget = _Budget(limits.max_steps)
    out: list[Shortfall] = []
    for entry in floor.aliases:
        governing = _governing(_Glob(entry.pattern), rules, budget)
        if governing is None:
            out.append(
                Shortfall(
                    entry.pattern,
                    "",
                    None,
                    None,
                    (
                        f"alias rules simple enough to check against the floor within "
                        f"{limits.max_steps} steps",
                    ),
                )
            )
            continue
        for index in sorted(governing, key=lambda i: (i is None, i or 0)):
            missing = _missing(entry, None if index is None else policy.aliases[index])
            if missing:
                pattern = None if index is None else policy.aliases[index].pattern
                out.append(Shortfall(entry.pattern, governing[index], index, pattern, missing))
    return out


def _missing(entry: FloorAlias, rule: AliasRule | None) -> tuple[str, ...]:
    if rule is None:
        return (
            f"an alias rule that matches it: protected: true, approvals: {entry.approvals} or more"
            + (", require_baseline: true" if entry.require_baseline else ""),
        )
    missing: list[str] = []
    if not rule.protected:
        missing.append("protected: true")
    if rule.approvals < entry.approvals:
        missing.append(f"approvals: {entry.approvals} or more (the rule has {rule.approvals})")
    if entry.require_baseline and not rule.require_baseline:
        missing.append("require_baseline: true")
    return tuple(missing)


def require_meets_floor(
    policy: Policy,
    floor: PolicyFloor | None,
    *,
    source: str = "policy",
    limits: FloorLimits = FloorLimits(),
) -> None:
    """Return when ``policy`` meets ``floor`` (no floor: always).

    Raises:
        PolicyBelowFloor: naming, for each shortfall, an example alias, the floor pattern,
            the rule that governs the alias (or none) and what that rule lacks.
    """
    if floor is None:
        return
    shortfalls = floor_shortfalls(policy, floor, limits)
    if shortfalls:
        raise PolicyBelowFloor(shortfalls, source)
