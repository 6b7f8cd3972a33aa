"""Evaluation results, paired statistics, the evaluation predicate and release gates.

docs/evaluation.md is the reference. Pure: bytes in, numbers out; no network, no database.

1. ``parse_results`` reads a results file (JSONL, or one JSON document) of per-case outcomes
   for a candidate and a baseline on the same cases, within ``ResultsLimits``, and tallies
   them as it streams.
2. ``build_predicate`` turns the tally into the ``https://modelward.dev/evaluation/v1``
   predicate: counts, paired differences and their 95% intervals, computed here, never typed
   in by whoever ran the evaluation.
3. ``evaluate_gates`` judges a predicate against a policy's ``gates`` (attest.policy Gates):
   every gate passes, fails, or is *inconclusive* (its interval crosses the bound), and an
   inconclusive gate says how many more cases would resolve it at the observed rate.
   ``gate_decision`` says "promote" only when every gate passed.
4. ``judge_evaluations`` decides which verified evaluation statements count (signed by an
   evidence signer, about this bundle, against the expected baseline) and whether every one
   passes every gate: the one rule the registry (an alias move) and a serving worker (a pull
   of REPO@ALIAS under its own policy) both apply.

Statistics (docs/evaluation.md#statistics): a single pass rate gets the Wilson score
interval; the paired difference of two pass rates on the same cases gets Newcombe's hybrid
score interval for paired data (Newcombe 1998, *Statistics in Medicine* 17:2635, method 10),
both at 95%. Gates recompute every interval from the predicate's counts.

Errors::

    AttestError (attest.errors)
    └── EvaluationError          evaluation input is not acceptable
        ├── ResultsError         a results file is malformed or over a limit (file and line)
        └── PredicateError       an evaluation predicate is malformed (names the field)

Caller misuse (a malformed bundle digest, a negative count) is a plain ``ValueError``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Literal

from modelward.attest._json import reject_duplicates
from modelward.attest.errors import AttestError

if TYPE_CHECKING:
    from modelward.attest.policy._model import Gates
    from modelward.attest.trust import Signer, VerifiedStatement

__all__ = [
    "CONFIDENCE",
    "GATE_NAMES",
    "METRICS",
    "PREDICATE_TYPE",
    "RESULTS_FORMAT",
    "Evaluation",
    "EvaluationError",
    "EvidenceRule",
    "GateDecision",
    "GateResult",
    "GatesJudgement",
    "JudgedEvaluation",
    "NotCounted",
    "Paired",
    "PredicateError",
    "Results",
    "ResultsError",
    "ResultsLimits",
    "build_predicate",
    "evaluate_gates",
    "gate_decision",
    "gate_label",
    "judge_evaluations",
    "load_results",
    "more_cases_paired",
    "more_cases_rate",
    "newcombe_paired_interval",
    "parse_predicate",
    "parse_results",
    "wilson_interval",
]

PREDICATE_TYPE: Final = "https://modelward.dev/evaluation/v1"  # == PredicateType.EVALUATION
RESULTS_FORMAT: Final = "modelward-evaluation-results/v1"
CONFIDENCE: Final = 0.95
Z95: Final = 1.959963984540054  # the standard normal's 0.975 quantile
# The serving figures a results file may carry, for candidate and baseline alike.
METRICS: Final = ("p95_ttft_ms", "p95_token_spacing_ms", "goodput", "energy_per_useful_token_j")
KINDS: Final = ("deterministic", "human")
METHOD: Final = {
    "confidence": CONFIDENCE,
    "paired": "newcombe-1998-method-10",  # hybrid score interval, paired proportions
    "single": "wilson-score",
}
_MAX_SAFE_INT: Final = 2**53 - 1
_MAX_MORE_CASES: Final = 10**9  # beyond this, "no number of cases resolves it"
_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


class EvaluationError(AttestError):
    """Evaluation input (a results file, an evaluation predicate) is not acceptable."""


class ResultsError(EvaluationError):
    """A results file is malformed or over a limit; the message names the file and line."""


class PredicateError(EvaluationError):
    """An evaluation predicate is malformed; the message names the field."""


@dataclass(frozen=True)
class ResultsLimits:
    """Bounds on a results file, checked while it is read."""

    max_bytes: int = 256 * 2**20
    max_cases: int = 1_000_000
    max_line_bytes: int = 64 * 2**10
    max_slices: int = 10_000


# -- statistics -------------------------------------------------------------------------------
def wilson_interval(passed: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``passed`` of ``n`` (fractions; counts may be scaled)."""
    if n <= 0 or not 0 <= passed <= n:
        raise ValueError(f"need 0 <= passed <= n and n > 0, got {passed} of {n}")
    p = passed / n
    z2 = z * z
    centre = (passed + z2 / 2) / (n + z2)
    half = z * math.sqrt(passed * (n - passed) / n + z2 / 4) / (n + z2)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


@dataclass(frozen=True)
class Paired:
    """A 2x2 table of paired pass/fail outcomes on the same cases.

    ``both``: both passed; ``candidate_only``/``baseline_only``: only that side passed;
    ``neither``: both failed. Counts may be scaled (floats) for ``more_cases``.
    """

    both: float = 0
    candidate_only: float = 0
    baseline_only: float = 0
    neither: float = 0

    @property
    def n(self) -> float:
        return self.both + self.candidate_only + self.baseline_only + self.neither

    @property
    def candidate_pass(self) -> float:
        return self.both + self.candidate_only

    @property
    def baseline_pass(self) -> float:
        return self.both + self.baseline_only

    @property
    def difference(self) -> float:
        """Candidate pass rate minus baseline pass rate (a fraction)."""
        return (self.candidate_only - self.baseline_only) / self.n

    def scaled(self, n: float) -> Paired:
        k = n / self.n
        return Paired(
            self.both * k, self.candidate_only * k, self.baseline_only * k, self.neither * k
        )

    def add(self, candidate: bool, baseline: bool) -> Paired:
        return Paired(
            self.both + (candidate and baseline),
            self.candidate_only + (candidate and not baseline),
            self.baseline_only + (baseline and not candidate),
            self.neither + (not candidate and not baseline),
        )


def newcombe_paired_interval(table: Paired, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) for candidate minus baseline pass
    rate on paired cases: the two Wilson intervals combined with the correlation of the pair
    (its numerator continuity-corrected by n/2 when positive, as Newcombe specifies)."""
    e, f, g, h = table.both, table.candidate_only, table.baseline_only, table.neither
    n = table.n
    if n <= 0:
        raise ValueError("a paired interval needs at least one case")
    # (1): the Wilson interval of each side's pass rate.
    p1, p2 = (e + f) / n, (e + g) / n
    l1, u1 = wilson_interval(e + f, n, z)
    l2, u2 = wilson_interval(e + g, n, z)
    # (2): phi, the correlation of the 2x2 table (0 when a margin is empty).
    margins = (e + f) * (g + h) * (e + g) * (f + h)
    if margins == 0:
        phi = 0.0
    else:
        cross = e * h - f * g
        numerator = max(cross - n / 2, 0.0) if cross > 0 else cross
        phi = numerator / math.sqrt(margins)
    # (3): combine: D - delta, D + epsilon.
    d = p1 - p2
    delta = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    return max(-1.0, d - delta), min(1.0, d + epsilon)


def _more_cases(resolved: Callable[[float], bool], n: int) -> int | None:
    """The fewest cases beyond ``n`` for which ``resolved(total)`` holds (observed rates kept);
    None when no number up to ``_MAX_MORE_CASES`` resolves it."""
    low, high = n, max(2 * n, n + 1)
    while not resolved(high):
        if high > _MAX_MORE_CASES:
            return None
        low, high = high, 2 * high
    while high - low > 1:  # bisect: low unresolved, high resolved
        middle = (low + high) // 2
        if resolved(middle):
            high = middle
        else:
            low = middle
    return high - n


def more_cases_paired(table: Paired, max_regression_points: float) -> int | None:
    """How many more paired cases, at the observed rates, put the regression's interval wholly
    on one side of ``max_regression_points``; None when the estimate sits on the bound."""

    def resolved(total: float) -> bool:
        lo, hi = newcombe_paired_interval(table.scaled(total))
        regression_lo, regression_hi = -hi * 100, -lo * 100
        return regression_hi <= max_regression_points or regression_lo > max_regression_points

    return _more_cases(resolved, int(table.n))


def more_cases_rate(passed: int, n: int, min_rate: float) -> int | None:
    """How many more cases, at the observed pass rate, put its Wilson interval wholly on one
    side of ``min_rate``; None when the rate sits on the bound."""

    def resolved(total: float) -> bool:
        lo, hi = wilson_interval(passed * total / n, total)
        return lo >= min_rate or hi < min_rate

    return _more_cases(resolved, n)


# -- results files ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Suite:
    name: str
    version: str


@dataclass
class Results:
    """A results file, tallied: what ``build_predicate`` needs (no per-case payloads)."""

    source: str
    suite: Suite | None = None
    metrics: dict[str, dict[str, float | None]] = field(
        default_factory=lambda: {"candidate": {}, "baseline": {}}
    )
    cases: int = 0
    deterministic: Paired = field(default_factory=Paired)
    human: Paired = field(default_factory=Paired)
    slices: dict[str, Paired] = field(default_factory=dict)  # human-rated cases by slice
    critical_candidate: list[str] = field(default_factory=list)
    critical_baseline: list[str] = field(default_factory=list)


def _fail(where: str, message: str) -> ResultsError:
    return ResultsError(f"{where}: {message}")


def _object(value: Any, where: str, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, "must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise _fail(where, f"unknown field(s): {', '.join(unknown)}")
    missing = sorted(required - set(value))
    if missing:
        raise _fail(where, f"missing field(s): {', '.join(missing)}")
    return value


def _name(value: Any, where: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SAFE_INT:
        value = str(value)
    if not isinstance(value, str) or _NAME.fullmatch(value) is None:
        raise _fail(where, "must be a string of 1 to 200 characters without control characters")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, "must be true or false")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, "must be a number")
    if not math.isfinite(value) or value < 0:
        raise _fail(where, "must be a finite number >= 0")
    return float(value)


def _header(value: Any, where: str, results: Results) -> None:
    header = _object(value, where, {"format", "suite", "metrics", "cases"}, {"format"})
    if header["format"] != RESULTS_FORMAT:
        raise _fail(f"{where}: format", f"must be {RESULTS_FORMAT!r}, got {header['format']!r}")
    if "suite" in header:
        suite = _object(
            header["suite"], f"{where}: suite", {"name", "version"}, {"name", "version"}
        )
        results.suite = Suite(
            _name(suite["name"], f"{where}: suite.name"),
            _name(suite["version"], f"{where}: suite.version"),
        )
    if "metrics" in header:
        metrics = _object(header["metrics"], f"{where}: metrics", {"candidate", "baseline"}, set())
        for side, figures in metrics.items():
            got = _object(figures, f"{where}: metrics.{side}", set(METRICS), set())
            results.metrics[side] = {
                k: _number(v, f"{where}: metrics.{side}.{k}") for k, v in got.items()
            }


def _case(value: Any, where: str, results: Results, seen: dict[str, str]) -> None:
    case = _object(
        value,
        where,
        {"case", "slice", "kind", "candidate", "baseline"},
        {"case", "slice", "kind", "candidate", "baseline"},
    )
    case_id = _name(case["case"], f"{where}: case")
    if case_id in seen:
        raise _fail(f"{where} (case {case_id!r})", f"case id repeated (first at {seen[case_id]})")
    seen[case_id] = where
    where = f"{where} (case {case_id!r})"
    slice_name = _name(case["slice"], f"{where}: slice")
    if case["kind"] not in KINDS:
        raise _fail(f"{where}: kind", f"must be one of {', '.join(KINDS)}, got {case['kind']!r}")
    outcomes: dict[str, tuple[bool, bool]] = {}
    for side in ("candidate", "baseline"):
        outcome = _object(
            case[side], f"{where}: {side}", {"pass", "critical_safety_failure"}, {"pass"}
        )
        outcomes[side] = (
            _bool(outcome["pass"], f"{where}: {side}.pass"),
            _bool(
                outcome.get("critical_safety_failure", False),
                f"{where}: {side}.critical_safety_failure",
            ),
        )
    (cand, cand_critical), (base, base_critical) = outcomes["candidate"], outcomes["baseline"]
    results.cases += 1
    if case["kind"] == "deterministic":
        results.deterministic = results.deterministic.add(cand, base)
    else:
        results.human = results.human.add(cand, base)
        results.slices[slice_name] = results.slices.get(slice_name, Paired()).add(cand, base)
    if cand_critical:
        results.critical_candidate.append(case_id)
    if base_critical:
        results.critical_baseline.append(case_id)


def _loads(data: bytes, where: str) -> Any:
    try:
        return json.loads(
            data.decode("utf-8"), object_pairs_hook=reject_duplicates, parse_constant=_no_constant
        )
    except UnicodeDecodeError:
        raise _fail(where, "not UTF-8") from None
    except (ValueError, RecursionError) as exc:  # DuplicateKeyError is a ValueError
        raise _fail(where, f"not valid JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not JSON")


def _lines(stream: IO[bytes], source: str, limits: ResultsLimits) -> Iterator[tuple[int, bytes]]:
    total = 0
    number = 0
    while True:
        line = stream.readline(limits.max_line_bytes + 2)
        if not line:
            return
        number += 1
        total += len(line)
        if total > limits.max_bytes:
            raise _fail(f"{source}:{number}", f"file exceeds {limits.max_bytes} bytes")
        if len(line.rstrip(b"\r\n")) > limits.max_line_bytes:
            raise _fail(f"{source}:{number}", f"line exceeds {limits.max_line_bytes} bytes")
        yield number, line


def parse_results(
    stream: IO[bytes], *, source: str, limits: ResultsLimits = ResultsLimits()
) -> Results:
    """Read a results file (docs/evaluation.md#results) and tally it.

    JSONL: a header object on the first line, then one case per line (blank lines allowed).
    JSON: one object, the header's fields plus ``cases``, a list. Raises ResultsError naming
    ``source`` and the line (JSONL) or the case's index (JSON).
    """
    results = Results(source=source)
    seen: dict[str, str] = {}
    first = stream.readline(limits.max_line_bytes + 2)
    if not first.strip():
        raise _fail(
            f"{source}:1",
            "empty: the first line must be the header object "
            f'{{"format": "{RESULTS_FORMAT}", ...}}',
        )
    header: Any = None
    if len(first) <= limits.max_line_bytes + 1:
        try:
            header = _loads(first, f"{source}:1")
        except ResultsError:
            header = None  # a JSON document spread over lines: read as one below
    if isinstance(header, dict) and "cases" not in header:
        # (1) JSONL: the header, then one case per line.
        _header(header, f"{source}:1", results)
        for number, line in _lines(stream, source, limits):
            number += 1  # the header was line 1
            if not line.strip():
                continue
            if results.cases >= limits.max_cases:
                raise _fail(f"{source}:{number}", f"more than {limits.max_cases} cases")
            _case(_loads(line, f"{source}:{number}"), f"{source}:{number}", results, seen)
            if len(results.slices) > limits.max_slices:
                raise _fail(f"{source}:{number}", f"more than {limits.max_slices} slices")
    else:
        # (2) JSON: one document, read whole within max_bytes.
        rest = stream.read(limits.max_bytes + 1 - len(first))
        data = first + rest
        if len(data) > limits.max_bytes:
            raise _fail(source, f"file exceeds {limits.max_bytes} bytes")
        document = _loads(data, source)
        _header(document, source, results)
        cases = document.get("cases")
        if not isinstance(cases, list):
            raise _fail(f"{source}: cases", "must be a list (or write JSONL: docs/evaluation.md)")
        if len(cases) > limits.max_cases:
            raise _fail(f"{source}: cases", f"more than {limits.max_cases} cases")
        for index, value in enumerate(cases):
            _case(value, f"{source}: cases[{index}]", results, seen)
            if len(results.slices) > limits.max_slices:
                raise _fail(f"{source}: cases[{index}]", f"more than {limits.max_slices} slices")
    if results.cases == 0:
        raise _fail(source, "no cases")
    return results


def load_results(path: Path, limits: ResultsLimits = ResultsLimits()) -> Results:
    """``parse_results`` of a file. Raises ResultsError (also when it cannot be read)."""
    try:
        with path.open("rb") as stream:
            return parse_results(stream, source=str(path), limits=limits)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None


# -- the predicate ------------------------------------------------------------------------------
def _points(fraction: float) -> float:
    return round(fraction * 100, 4)


def _paired_json(table: Paired) -> dict[str, Any]:
    lo, hi = newcombe_paired_interval(table)
    return {
        "cases": int(table.n),
        "both_pass": int(table.both),
        "candidate_only": int(table.candidate_only),
        "baseline_only": int(table.baseline_only),
        "neither": int(table.neither),
        "candidate_pass": int(table.candidate_pass),
        "baseline_pass": int(table.baseline_pass),
        "difference_points": _points(table.difference),
        "interval_points": [_points(lo), _points(hi)],
    }


def _bundle_ref(name: str, digest: str) -> dict[str, str]:
    if re.fullmatch(r"sha256:[0-9a-f]{64}", digest) is None:
        raise ValueError(f"bundle digest must be 'sha256:<64 lowercase hex>', got {digest!r}")
    if not name:
        raise ValueError("a bundle reference needs a name")
    return {"name": name, "digest": digest}


def build_predicate(
    results: Results,
    *,
    bundle: tuple[str, str],
    baseline: tuple[str, str] | None,
    suite: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The evaluation/v1 predicate (docs/evaluation.md#predicate) of ``results``.

    ``bundle``/``baseline``: (name, digest) of the candidate and of the baseline bundle.
    ``suite``: (name, version), overriding none: it must agree with the file's when both say.
    Raises ResultsError (no suite at all, or two different ones), ValueError (a bad digest).
    """
    named = results.suite
    if suite is not None:
        given = Suite(_name(suite[0], "--suite"), _name(suite[1], "--suite-version"))
        if named is not None and named != given:
            raise ResultsError(
                f"{results.source}: suite {named.name} {named.version} differs from the one "
                f"given ({given.name} {given.version})"
            )
        named = given
    if named is None:
        raise ResultsError(
            f"{results.source}: no suite: give it in the header (suite: "
            "{name, version}) or as --suite NAME --suite-version V"
        )
    det = results.deterministic
    deterministic: dict[str, Any] | None = None
    if det.n:
        lo, hi = wilson_interval(det.candidate_pass, det.n)
        deterministic = {
            "checks": int(det.n),
            "candidate_pass": int(det.candidate_pass),
            "baseline_pass": int(det.baseline_pass),
            "pass_rate": round(det.candidate_pass / det.n, 6),
            "baseline_pass_rate": round(det.baseline_pass / det.n, 6),
            "interval": [round(lo, 6), round(hi, 6)],
        }
    return {
        "suite": {"name": named.name, "version": named.version},
        "bundle": _bundle_ref(*bundle),
        "baseline": _bundle_ref(*baseline) if baseline is not None else None,
        "method": dict(METHOD),
        "cases": results.cases,
        "deterministic": deterministic,
        "overall": _paired_json(results.human) if results.human.n else None,
        "slices": [
            {"slice": name, **_paired_json(table)} for name, table in sorted(results.slices.items())
        ],
        "critical_safety_failures": {
            "candidate": sorted(results.critical_candidate),
            "baseline": sorted(results.critical_baseline),
        },
        "metrics": {
            name: {
                "candidate": results.metrics.get("candidate", {}).get(name),
                "baseline": results.metrics.get("baseline", {}).get(name),
            }
            for name in METRICS
        },
    }


# -- reading a predicate back (from a verified statement) ---------------------------------------
def _p_fail(where: str, message: str) -> PredicateError:
    return PredicateError(f"evaluation predicate: {where}: {message}")


def _p_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_SAFE_INT:
        raise _p_fail(where, "must be a non-negative integer")
    return value


def _p_table(value: Any, where: str) -> Paired:
    if not isinstance(value, dict):
        raise _p_fail(where, "must be an object")
    table = Paired(
        *(
            _p_count(value.get(k), f"{where}.{k}")
            for k in ("both_pass", "candidate_only", "baseline_only", "neither")
        )
    )
    if table.n == 0 or value.get("cases") != table.n:
        raise _p_fail(f"{where}.cases", "must be the sum of the four cells, at least 1")
    return table


def _p_metric(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _p_fail(where, "must be a number or null")
    if value < 0:
        raise _p_fail(where, "must be >= 0")
    return float(value)


@dataclass(frozen=True)
class Evaluation:
    """The parts of an evaluation predicate the gates read, checked."""

    suite: str
    bundle: str
    baseline: str | None
    deterministic: tuple[int, int] | None  # (candidate passes, checks)
    overall: Paired | None
    slices: Mapping[str, Paired]
    critical: tuple[str, ...]
    metrics: Mapping[str, tuple[float | None, float | None]]  # name: (candidate, baseline)


def parse_predicate(predicate: Mapping[str, Any]) -> Evaluation:
    """Check an evaluation predicate's fields the gates read. Raises PredicateError."""
    suite = predicate.get("suite")
    if not isinstance(suite, dict) or not all(
        isinstance(suite.get(k), str) for k in ("name", "version")
    ):
        raise _p_fail("suite", "must be {name, version}")
    refs: dict[str, str | None] = {}
    for key in ("bundle", "baseline"):
        ref = predicate.get(key)
        if ref is None and key == "baseline":
            refs[key] = None
            continue
        digest = ref.get("digest") if isinstance(ref, dict) else None
        if not isinstance(digest, str) or re.fullmatch(r"sha256:[0-9a-f]{64}", digest) is None:
            raise _p_fail(f"{key}.digest", "must be sha256:<64 hex>")
        refs[key] = digest
    det = predicate.get("deterministic")
    deterministic = None
    if det is not None:
        if not isinstance(det, dict):
            raise _p_fail("deterministic", "must be an object or null")
        checks = _p_count(det.get("checks"), "deterministic.checks")
        passed = _p_count(det.get("candidate_pass"), "deterministic.candidate_pass")
        if checks == 0 or passed > checks:
            raise _p_fail("deterministic", "needs 0 <= candidate_pass <= checks, checks >= 1")
        deterministic = (passed, checks)
    overall = predicate.get("overall")
    raw_slices = predicate.get("slices")
    if not isinstance(raw_slices, list):
        raise _p_fail("slices", "must be a list")
    slices: dict[str, Paired] = {}
    for i, item in enumerate(raw_slices):
        name = item.get("slice") if isinstance(item, dict) else None
        if not isinstance(name, str) or name in slices:
            raise _p_fail(f"slices[{i}].slice", "must be a string, each slice once")
        slices[name] = _p_table(item, f"slices[{i}]")
    critical = predicate.get("critical_safety_failures")
    ids = critical.get("candidate") if isinstance(critical, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _p_fail("critical_safety_failures.candidate", "must be a list of case ids")
    raw_metrics = predicate.get("metrics")
    if not isinstance(raw_metrics, dict):
        raise _p_fail("metrics", "must be an object")
    metrics: dict[str, tuple[float | None, float | None]] = {}
    for name in METRICS:
        pair = raw_metrics.get(name)
        if pair is None:
            metrics[name] = (None, None)
            continue
        if not isinstance(pair, dict):
            raise _p_fail(f"metrics.{name}", "must be {candidate, baseline}")
        metrics[name] = (
            _p_metric(pair.get("candidate"), f"metrics.{name}.candidate"),
            _p_metric(pair.get("baseline"), f"metrics.{name}.baseline"),
        )
    return Evaluation(
        suite=f"{suite['name']} {suite['version']}",
        bundle=str(refs["bundle"]),
        baseline=refs["baseline"],
        deterministic=deterministic,
        overall=None if overall is None else _p_table(overall, "overall"),
        slices=slices,
        critical=tuple(ids),
        metrics=metrics,
    )


# -- gates --------------------------------------------------------------------------------------
Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict. ``observed``/``bound`` in the gate's unit (points, ms, a ratio...);
    ``interval`` the observed value's 95% interval when it has one; ``more_cases``, for an
    inconclusive gate, how many more cases at the observed rate would resolve it (None: none
    would, or the gate has no interval)."""

    name: str
    verdict: Verdict
    observed: float | None
    bound: float
    message: str
    more_cases: int | None = None
    interval: tuple[float, float] | None = None
    slice: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "observed": self.observed,
            "bound": self.bound,
            "interval": list(self.interval) if self.interval is not None else None,
            "slice": self.slice,
            "message": self.message,
            "more_cases": self.more_cases,
        }


@dataclass(frozen=True)
class GateDecision:
    """Every gate's result; ``promote`` only when each one passed."""

    gates: tuple[GateResult, ...]

    @property
    def blocking(self) -> tuple[GateResult, ...]:
        return tuple(g for g in self.gates if g.verdict != "pass")

    @property
    def promote(self) -> bool:
        return bool(self.gates) and not self.blocking

    @property
    def verdict(self) -> str:
        return "promote" if self.promote else "do not promote"


def gate_decision(results: Sequence[GateResult]) -> GateDecision:
    return GateDecision(tuple(results))


def _f(value: float) -> str:
    return f"{round(value, 2) + 0.0:.2f}".rstrip("0").rstrip(".")  # + 0.0: never "-0"


def _resolve_hint(more: int | None) -> str:
    if more is None:
        return "; the observed rate sits on the bound: no number of cases resolves it"
    return f"; about {more} more case(s) at the observed rate would resolve it"


def _regression_gate(
    name: str, table: Paired | None, bound: float, what: str, slice_name: str | None = None
) -> GateResult:
    if table is None:
        return GateResult(
            name, "fail", None, bound, f"{what}: no human-rated cases", slice=slice_name
        )
    lo, hi = newcombe_paired_interval(table)
    regression = _points(-table.difference)
    interval = (_points(-hi), _points(-lo))
    text = (
        f"{what}: regression {_f(regression)} points (95% interval {_f(interval[0])} to "
        f"{_f(interval[1])}) on {int(table.n)} paired cases; at most {_f(bound)} allowed"
    )
    if interval[1] <= bound:
        return GateResult(
            name, "pass", regression, bound, text, interval=interval, slice=slice_name
        )
    if interval[0] > bound:
        return GateResult(
            name, "fail", regression, bound, text, interval=interval, slice=slice_name
        )
    more = more_cases_paired(table, bound)
    return GateResult(
        name,
        "inconclusive",
        regression,
        bound,
        text + ": the interval crosses the bound" + _resolve_hint(more),
        more_cases=more,
        interval=interval,
        slice=slice_name,
    )


def _deterministic_gate(evaluation: Evaluation, bound: float) -> GateResult:
    name = "min_deterministic_pass_rate"
    if evaluation.deterministic is None:
        return GateResult(name, "fail", None, bound, "no deterministic checks in the evaluation")
    passed, checks = evaluation.deterministic
    rate = passed / checks
    lo, hi = wilson_interval(passed, checks)
    interval = (round(lo, 6), round(hi, 6))
    text = (
        f"{passed} of {checks} deterministic checks pass ({_f(rate * 100)}%, 95% interval "
        f"{_f(lo * 100)}% to {_f(hi * 100)}%); at least {_f(bound * 100)}% required"
    )
    if lo >= bound:
        return GateResult(name, "pass", round(rate, 6), bound, text, interval=interval)
    if hi < bound:
        return GateResult(name, "fail", round(rate, 6), bound, text, interval=interval)
    more = more_cases_rate(passed, checks, bound)
    return GateResult(
        name,
        "inconclusive",
        round(rate, 6),
        bound,
        text + ": the interval crosses the bound" + _resolve_hint(more),
        more_cases=more,
        interval=interval,
    )


def _metric_gate(
    name: str, evaluation: Evaluation, metric: str, bound: float, *, ratio: bool, upper: bool
) -> GateResult:
    candidate, baseline = evaluation.metrics[metric]
    if candidate is None:
        return GateResult(name, "fail", None, bound, f"{metric}: not measured for the candidate")
    observed = candidate
    label = f"{metric} {_f(candidate)}"
    if baseline is not None:
        label += f" (baseline {_f(baseline)})"
    if ratio:
        if not baseline:
            return GateResult(
                name, "fail", None, bound, f"{label}: no baseline figure above 0 to compare with"
            )
        observed = round(candidate / baseline, 6)
        label += f", ratio {_f(observed)}"
    ok = observed <= bound if upper else observed >= bound
    limit = f"at most {_f(bound)} allowed" if upper else f"at least {_f(bound)} required"
    text = f"{label}; {limit}"
    return GateResult(name, "pass" if ok else "fail", observed, bound, text)


def evaluate_gates(gates: Gates, predicate: Mapping[str, Any]) -> list[GateResult]:
    """Judge one evaluation predicate against ``gates`` (docs/evaluation.md#gates): every gate
    the policy sets, in a fixed order, each pass, fail or inconclusive. Intervals are
    recomputed from the predicate's counts. Raises PredicateError (malformed predicate)."""
    ev = parse_predicate(predicate)
    out: list[GateResult] = []
    # (1): deterministic checks, a single rate with its Wilson interval.
    if gates.min_deterministic_pass_rate is not None:
        out.append(_deterministic_gate(ev, gates.min_deterministic_pass_rate))
    # (2): the overall human-rated regression, paired with the baseline.
    if gates.max_overall_regression_points is not None:
        out.append(
            _regression_gate(
                "max_overall_regression_points",
                ev.overall,
                gates.max_overall_regression_points,
                "overall",
            )
        )
    # (3): each required slice's regression (every slice of the evaluation when none named).
    if gates.max_slice_regression_points is not None:
        names = list(gates.required_slices) or sorted(ev.slices)
        if not names:
            out.append(
                GateResult(
                    "max_slice_regression_points",
                    "fail",
                    None,
                    gates.max_slice_regression_points,
                    "the evaluation has no human-rated slices",
                )
            )
        for slice_name in names:
            out.append(
                _regression_gate(
                    "max_slice_regression_points",
                    ev.slices.get(slice_name),
                    gates.max_slice_regression_points,
                    f"slice {slice_name!r}",
                    slice_name,
                )
            )
    # (4): critical safety failures: an exact count, no sampling interval.
    if gates.max_critical_safety_failures is not None:
        bound = gates.max_critical_safety_failures
        count = len(ev.critical)
        shown = ", ".join(ev.critical[:20]) + (", ..." if count > 20 else "")
        text = f"{count} critical safety failure(s)" + (f" ({shown})" if count else "")
        out.append(
            GateResult(
                "max_critical_safety_failures",
                "pass" if count <= bound else "fail",
                count,
                bound,
                f"{text}; at most {bound} allowed",
            )
        )
    # (5): serving figures, measured once each: pass or fail.
    for name, metric, ratio, upper in (
        ("max_p95_ttft_ms", "p95_ttft_ms", False, True),
        ("max_p95_token_spacing_ms", "p95_token_spacing_ms", False, True),
        ("min_goodput_ratio", "goodput", True, False),
        ("max_energy_per_token_ratio", "energy_per_useful_token_j", True, True),
    ):
        bound_value = getattr(gates, name)
        if bound_value is not None:
            out.append(_metric_gate(name, ev, metric, bound_value, ratio=ratio, upper=upper))
    return out


# -- which evaluations count, and do they pass ---------------------------------------------------
GATE_NAMES: Final = (
    "min_deterministic_pass_rate",
    "max_overall_regression_points",
    "max_slice_regression_points",
    "max_critical_safety_failures",
    "max_p95_ttft_ms",
    "max_p95_token_spacing_ms",
    "min_goodput_ratio",
    "max_energy_per_token_ratio",
)

# Why a signer does not count for evidence, or None when it does: the registry's
# EvidenceSigners.reason_against, or the worker policy's evidence.signers.
EvidenceRule = Callable[["Signer"], "str | None"]


@dataclass(frozen=True)
class NotCounted:
    """An evaluation's signer (or signers) whose evaluation does not count, and why."""

    signer: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"signer": self.signer, "reason": self.reason}


@dataclass(frozen=True)
class JudgedEvaluation:
    """One counting evaluation and every gate's result on it."""

    signers: tuple[str, ...]
    suite: Mapping[str, Any] | None
    baseline: str | None
    gates: tuple[GateResult, ...]

    @property
    def decision(self) -> GateDecision:
        return gate_decision(self.gates)

    def to_json(self) -> dict[str, Any]:
        return {
            "signers": list(self.signers),
            "suite": dict(self.suite) if self.suite is not None else None,
            "baseline": self.baseline,
            "verdict": self.decision.verdict,
            "gates": [g.to_json() for g in self.gates],
        }


@dataclass(frozen=True)
class GatesJudgement:
    """What ``judge_evaluations`` found: ``gates`` are the results to show (the first blocking
    evaluation's; with no counting evaluation, every gate failing for want of one; when every
    evaluation passed, the first one's), ``evaluations`` every counting one, ``not_counted``
    the evaluations set aside with their reasons."""

    gates: tuple[GateResult, ...]
    evaluations: tuple[JudgedEvaluation, ...]
    not_counted: tuple[NotCounted, ...]

    @property
    def promote(self) -> bool:
        """True only when at least one evaluation counted and every one passed every gate."""
        return bool(self.evaluations) and all(e.decision.promote for e in self.evaluations)

    @property
    def verdict(self) -> str:
        return "promote" if self.promote else "do not promote"


def gate_label(result: GateResult) -> str:
    """``name`` or ``name[slice]``: how a gate is named in messages."""
    return f"{result.name}[{result.slice}]" if result.slice else result.name


def _predicate_digest(predicate: Any, key: str) -> str | None:
    ref = predicate.get(key) if isinstance(predicate, Mapping) else None
    digest = ref.get("digest") if isinstance(ref, Mapping) else None
    return digest if isinstance(digest, str) else None


def judge_evaluations(
    gates: Gates,
    statements: Sequence[VerifiedStatement],
    *,
    digest: str,
    baseline: str | None,
    evidence: EvidenceRule,
    missing: str,
) -> GatesJudgement:
    """Which evaluation statements count for ``gates`` and whether they pass: the one rule the
    registry (at an alias move) and a worker (pulling REPO@ALIAS) both apply
    (docs/evaluation.md#gates). No I/O; never raises for a bad predicate (it fails its gates).

    ``statements`` were verified against the caller's trust set; ``digest`` is the bundle
    judged; ``baseline`` the bundle every evaluation must be compared with (None: any, or
    none); ``evidence`` says why a signer does not count (None when it does); ``missing``
    is the message of every gate when no evaluation counts. In order:

      (1) only evaluation/v1 statements with at least one signer ``evidence`` admits count;
          the others' signers are listed in ``not_counted`` with their reasons;
      (2) only those about ``digest`` (the predicate's ``bundle.digest``) and, when
          ``baseline`` is given, compared with it (``baseline.digest``);
      (3) none counts: every gate fails for want of evidence;
      (4) each counting evaluation is judged by ``evaluate_gates`` (intervals recomputed from
          its counts); every one must pass every gate: a failing run is not outvoted by a
          luckier one.
    """
    not_counted: list[NotCounted] = []
    counted: list[VerifiedStatement] = []
    for stmt in statements:
        if stmt.predicate_type != PREDICATE_TYPE:
            continue
        # (1): vouched for by an evidence signer.
        reasons = [(s.name, evidence(s)) for s in stmt.signers]
        if not any(reason is None for _, reason in reasons):
            not_counted += [NotCounted(n, r) for n, r in reasons if r is not None]
            continue
        # (2): about this bundle, against the expected baseline.
        predicate = stmt.statement.get("predicate", {})
        about = _predicate_digest(predicate, "bundle")
        compared = _predicate_digest(predicate, "baseline")
        signers = ", ".join(s.name for s in stmt.signers)
        if about != digest:
            not_counted.append(NotCounted(signers, f"evaluates {about}, not {digest}"))
        elif baseline is not None and compared != baseline:
            not_counted.append(
                NotCounted(
                    signers,
                    f"its baseline is {compared}, not {baseline}, the bundle on the alias now",
                )
            )
        else:
            counted.append(stmt)
    # (3): no evidence at all: every gate fails for want of it.
    if not counted:
        wanting = tuple(
            GateResult(name, "fail", None, value, missing)
            for name in GATE_NAMES
            if (value := getattr(gates, name)) is not None
        )
        return GatesJudgement(wanting, (), tuple(not_counted))
    # (4): judge each counting evaluation.
    judged: list[JudgedEvaluation] = []
    for stmt in counted:
        predicate = stmt.statement.get("predicate", {})
        try:
            results = evaluate_gates(gates, predicate)
        except EvaluationError as exc:
            results = [GateResult("evaluation", "fail", None, 0, str(exc))]
        suite = predicate.get("suite") if isinstance(predicate, Mapping) else None
        judged.append(
            JudgedEvaluation(
                signers=tuple(s.name for s in stmt.signers),
                suite=suite if isinstance(suite, Mapping) else None,
                baseline=_predicate_digest(predicate, "baseline"),
                gates=tuple(results),
            )
        )
    blocking = next((j for j in judged if not j.decision.promote), judged[0])
    return GatesJudgement(blocking.gates, tuple(judged), tuple(not_counted))
