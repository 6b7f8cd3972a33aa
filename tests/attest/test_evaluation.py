"""Evaluation results, paired intervals and release gates (attest.evaluation, docs/evaluation.md).

Each gate passes, fails and, where it has an interval, is inconclusive (saying how many more
cases would resolve it); the worked example of the users' release method is blocked by its
critical-failure gate; the intervals match published and hand-worked computations; a bad
results file is refused naming the file and the line.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.errors import PolicyError
from modelward.attest.evaluation import (
    Paired,
    PredicateError,
    Results,
    ResultsError,
    ResultsLimits,
    build_predicate,
    evaluate_gates,
    gate_decision,
    load_results,
    newcombe_paired_interval,
    parse_results,
    wilson_interval,
)
from modelward.attest.policy import load_policy
from modelward.attest.policy._model import Gates
from modelward.attest.statement import PredicateType, make_statement, parse_statement

CANDIDATE = ("acme/model", "sha256:" + "c" * 64)
BASELINE = ("acme/model", "sha256:" + "b" * 64)
HEADER = {"format": "modelward-evaluation-results/v1", "suite": {"name": "s", "version": "1"}}

# The users' release method's thresholds (issue 13).
WORKED_GATES = {
    "min_deterministic_pass_rate": 0.995,
    "max_overall_regression_points": 2,
    "max_slice_regression_points": 5,
    "required_slices": ["billing", "refunds", "safety"],
    "max_critical_safety_failures": 0,
    "max_p95_ttft_ms": 800,
    "max_p95_token_spacing_ms": 40,
    "min_goodput_ratio": 1.0,
    "max_energy_per_token_ratio": 1.1,
}


def cases(
    slice_name: str,
    kind: str,
    table: tuple[int, int, int, int],
    *,
    critical: int = 0,
    prefix: str | None = None,
) -> list[dict[str, Any]]:
    """Case lines for a 2x2 table (both pass, candidate only, baseline only, neither); the
    first ``critical`` cases are the candidate's critical safety failures."""
    outcomes = [(True, True)] * table[0] + [(True, False)] * table[1]
    outcomes += [(False, True)] * table[2] + [(False, False)] * table[3]
    prefix = prefix or f"{slice_name}-{kind}"
    out = []
    for i, (cand, base) in enumerate(outcomes):
        candidate: dict[str, Any] = {"pass": cand}
        if i < critical:
            candidate = {"pass": False, "critical_safety_failure": True}
        out.append(
            {
                "case": f"{prefix}-{i}",
                "slice": slice_name,
                "kind": kind,
                "candidate": candidate,
                "baseline": {"pass": base},
            }
        )
    return out


def jsonl(header: dict[str, Any], lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in [header, *lines])


def worked_example(*, critical: int = 2) -> bytes:
    """The users' worked example: faster and cheaper than the baseline, quality within bounds,
    and (by default) two critical safety failures."""
    lines = cases("format", "deterministic", (1999, 0, 0, 1))
    for name in ("billing", "refunds", "safety"):
        lines += cases(name, "human", (370, 8, 6, 16))
    for line in lines[2000 : 2000 + critical]:  # critical failures on cases both passed
        line["candidate"] = {"pass": True, "critical_safety_failure": True}
    metrics = {
        "candidate": {
            "p95_ttft_ms": 620,
            "p95_token_spacing_ms": 31,
            "goodput": 14.2,
            "energy_per_useful_token_j": 0.41,
        },
        "baseline": {
            "p95_ttft_ms": 710,
            "p95_token_spacing_ms": 38,
            "goodput": 12.9,
            "energy_per_useful_token_j": 0.47,
        },
    }
    return jsonl({**HEADER, "metrics": metrics}, lines)


def _results(data: bytes, limits: ResultsLimits = ResultsLimits()) -> Results:
    return parse_results(io.BytesIO(data), source="results.jsonl", limits=limits)


def _predicate(lines: list[dict[str, Any]], metrics: dict[str, Any] | None = None) -> Any:
    header = {**HEADER, "metrics": metrics} if metrics else HEADER
    return build_predicate(_results(jsonl(header, lines)), bundle=CANDIDATE, baseline=BASELINE)


def _gate(gates: dict[str, Any], predicate: Any, name: str, slice_name: str | None = None) -> Any:
    results = evaluate_gates(Gates(**gates), predicate)
    [result] = [r for r in results if r.name == name and r.slice == slice_name]
    return result


# -- statistics against known computations ---------------------------------------------------
@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ((36, 12, 2, 0), (0.0569, 0.3404)),
        ((18, 12, 2, 18), (0.0562, 0.3290)),
        ((53, 0, 0, 1), (-0.0729, 0.0729)),
        ((0, 30, 0, 0), (0.8395, 1.0)),
    ],
)
def test_paired_interval_matches_newcombe_1998_published_examples(
    table: tuple[int, int, int, int], expected: tuple[float, float]
) -> None:
    """Newcombe (1998), Statistics in Medicine 17:2635, Table II, method 10 (95%)."""
    lo, hi = newcombe_paired_interval(Paired(*table))
    assert (round(lo, 4), round(hi, 4)) == expected


def test_wilson_interval_matches_a_hand_worked_case() -> None:
    # 76 of 80 (95%), z = 1.959964, z squared = 3.841459. The centre is 77.920729 (76 plus
    # half of z squared) over 83.841459 (80 plus z squared): 0.929383. The half-width is z
    # times the root of 4.760365 (76 times 4 over 80, plus a quarter of z squared), over
    # 83.841459: 0.051005.
    lo, hi = wilson_interval(76, 80)
    assert math.isclose(lo, 0.929383 - 0.051005, abs_tol=2e-6)
    assert math.isclose(hi, 0.929383 + 0.051005, abs_tol=2e-6)
    # the users' method: near 95%, an 80-case slice carries about +-4.8 points
    assert math.isclose(1.959964 * math.sqrt(0.95 * 0.05 / 80) * 100, 4.78, abs_tol=0.01)


def test_paired_interval_is_computed_from_per_case_outcomes() -> None:
    predicate = _predicate(cases("billing", "human", (36, 12, 2, 0)))
    [billing] = predicate["slices"]
    assert billing["candidate_pass"] == 48
    assert billing["baseline_pass"] == 38
    assert billing["difference_points"] == 20.0
    lo, hi = billing["interval_points"]  # Newcombe's Table II: 0.0569 to 0.3404
    assert (round(lo / 100, 4), round(hi / 100, 4)) == (0.0569, 0.3404)


# -- each gate: pass, fail, inconclusive -------------------------------------------------------
def test_deterministic_pass_rate_gate_passes_fails_and_is_inconclusive() -> None:
    gate = {"min_deterministic_pass_rate": 0.995}
    passing = _predicate(cases("f", "deterministic", (1998, 0, 0, 2)))
    assert _gate(gate, passing, "min_deterministic_pass_rate").verdict == "pass"
    failing = _predicate(cases("f", "deterministic", (980, 0, 0, 20)))
    assert _gate(gate, failing, "min_deterministic_pass_rate").verdict == "fail"
    # 500 of 500 pass, yet the Wilson interval (99.24% .. 100%) crosses 99.5%
    unsure = _gate(
        gate, _predicate(cases("f", "deterministic", (500, 0, 0, 0))), "min_deterministic_pass_rate"
    )
    assert unsure.verdict == "inconclusive"
    assert unsure.more_cases is not None
    assert f"about {unsure.more_cases} more case(s)" in unsure.message
    total = 500 + unsure.more_cases
    assert wilson_interval(total, total)[0] >= 0.995 > wilson_interval(total - 1, total - 1)[0]


def test_overall_regression_gate_passes_fails_and_is_inconclusive() -> None:
    gate = {"max_overall_regression_points": 2}
    name = "max_overall_regression_points"
    passing = _gate(gate, _predicate(cases("a", "human", (700, 10, 10, 80))), name)
    assert passing.verdict == "pass"
    assert passing.interval is not None
    assert passing.interval[1] <= 2
    failing = _gate(gate, _predicate(cases("a", "human", (700, 5, 85, 10))), name)
    assert failing.verdict == "fail"
    assert failing.observed == 10.0
    unsure = _gate(gate, _predicate(cases("a", "human", (72, 4, 4, 0))), name)
    assert unsure.verdict == "inconclusive"
    assert unsure.interval is not None
    assert unsure.interval[0] <= 2 < unsure.interval[1]
    assert unsure.more_cases is not None
    resolved = Paired(72, 4, 4, 0).scaled(80 + unsure.more_cases)
    lo, _ = newcombe_paired_interval(resolved)
    assert -lo * 100 <= 2


def test_slice_regression_gate_passes_fails_and_is_inconclusive_per_required_slice() -> None:
    lines = cases("good", "human", (380, 10, 10, 0)) + cases("bad", "human", (300, 0, 80, 20))
    lines += cases("small", "human", (72, 4, 4, 0))
    gate = {"max_slice_regression_points": 5, "required_slices": ["good", "bad", "small"]}
    results = evaluate_gates(Gates(**gate), _predicate(lines))
    verdicts = {r.slice: r.verdict for r in results}
    assert verdicts == {"good": "pass", "bad": "fail", "small": "inconclusive"}
    assert all(r.name == "max_slice_regression_points" for r in results)
    [small] = [r for r in results if r.slice == "small"]
    assert small.more_cases is not None


def test_required_slice_missing_from_the_evaluation_fails_its_gate() -> None:
    gate = {"max_slice_regression_points": 5, "required_slices": ["safety"]}
    result = _gate(
        gate,
        _predicate(cases("good", "human", (380, 10, 10, 0))),
        "max_slice_regression_points",
        "safety",
    )
    assert result.verdict == "fail"
    assert "no human-rated cases" in result.message


def test_no_required_slices_checks_every_slice() -> None:
    lines = cases("a", "human", (380, 10, 10, 0)) + cases("b", "human", (300, 0, 80, 20))
    results = evaluate_gates(Gates(max_slice_regression_points=5), _predicate(lines))
    assert {r.slice: r.verdict for r in results} == {"a": "pass", "b": "fail"}


def test_critical_safety_failure_gate_passes_and_fails_naming_the_cases() -> None:
    gate = {"max_critical_safety_failures": 0}
    clean = _predicate(cases("a", "human", (10, 0, 0, 0)))
    assert _gate(gate, clean, "max_critical_safety_failures").verdict == "pass"
    two = _predicate(cases("a", "human", (10, 0, 0, 0), critical=2))
    result = _gate(gate, two, "max_critical_safety_failures")
    assert (result.verdict, result.observed) == ("fail", 2)
    assert "a-human-0" in result.message
    # a count, not a sample: never inconclusive
    assert (
        _gate({"max_critical_safety_failures": 2}, two, "max_critical_safety_failures").verdict
        == "pass"
    )


@pytest.mark.parametrize(
    ("gate", "metric", "good", "bad"),
    [
        ("max_p95_ttft_ms", "p95_ttft_ms", (800, 700), (801, 700)),
        ("max_p95_token_spacing_ms", "p95_token_spacing_ms", (40, 50), (40.5, 30)),
        ("min_goodput_ratio", "goodput", (13, 13), (12.9, 13)),
        ("max_energy_per_token_ratio", "energy_per_useful_token_j", (0.55, 0.5), (0.56, 0.5)),
    ],
)
def test_serving_figure_gates_pass_and_fail(
    gate: str, metric: str, good: tuple[float, float], bad: tuple[float, float]
) -> None:
    bounds = {
        "max_p95_ttft_ms": 800,
        "max_p95_token_spacing_ms": 40,
        "min_goodput_ratio": 1.0,
        "max_energy_per_token_ratio": 1.1,
    }
    lines = cases("a", "human", (10, 0, 0, 0))
    for (cand, base), verdict in ((good, "pass"), (bad, "fail")):
        metrics = {"candidate": {metric: cand}, "baseline": {metric: base}}
        result = _gate({gate: bounds[gate]}, _predicate(lines, metrics), gate)
        assert result.verdict == verdict, result.message


def test_a_figure_not_measured_fails_its_gate() -> None:
    result = _gate(
        {"min_goodput_ratio": 1.0},
        _predicate(cases("a", "human", (10, 0, 0, 0)), {"candidate": {"goodput": 5}}),
        "min_goodput_ratio",
    )
    assert result.verdict == "fail"
    assert "baseline" in result.message


# -- the worked example ------------------------------------------------------------------------
def test_worked_example_is_not_promoted_because_of_its_critical_safety_failures() -> None:
    predicate = build_predicate(_results(worked_example()), bundle=CANDIDATE, baseline=BASELINE)
    decision = gate_decision(evaluate_gates(Gates(**WORKED_GATES), predicate))
    assert decision.verdict == "do not promote"
    assert [(g.name, g.verdict) for g in decision.blocking] == [
        ("max_critical_safety_failures", "fail")
    ]
    # faster and cheaper: every other gate passed, slices included
    assert len(decision.gates) == 10
    assert predicate["critical_safety_failures"]["candidate"] == [
        "billing-human-0",
        "billing-human-1",
    ]


def test_worked_example_without_the_failures_is_promoted() -> None:
    predicate = build_predicate(
        _results(worked_example(critical=0)), bundle=CANDIDATE, baseline=BASELINE
    )
    decision = gate_decision(evaluate_gates(Gates(**WORKED_GATES), predicate))
    assert decision.verdict == "promote", [g.message for g in decision.blocking]


# -- the predicate ------------------------------------------------------------------------------
def test_predicate_records_suite_bundles_counts_and_ids_without_payloads() -> None:
    predicate = build_predicate(_results(worked_example()), bundle=CANDIDATE, baseline=BASELINE)
    assert predicate["suite"] == {"name": "s", "version": "1"}
    assert predicate["bundle"]["digest"] == CANDIDATE[1]
    assert predicate["baseline"]["digest"] == BASELINE[1]
    assert predicate["cases"] == 3200
    assert predicate["deterministic"]["checks"] == 2000
    assert predicate["metrics"]["p95_ttft_ms"] == {"candidate": 620.0, "baseline": 710.0}
    statement = make_statement(CANDIDATE[0], CANDIDATE[1], PredicateType.EVALUATION, predicate)
    parsed, predicate_type, _ = parse_statement(statement)
    assert predicate_type == "https://modelward.dev/evaluation/v1"
    assert parsed["predicate"] == json.loads(json.dumps(predicate))


def test_suite_given_twice_differently_is_refused() -> None:
    with pytest.raises(ResultsError, match="differs"):
        build_predicate(
            _results(worked_example()), bundle=CANDIDATE, baseline=BASELINE, suite=("other", "2")
        )


def test_predicate_with_counts_that_do_not_add_up_is_refused_by_the_gates() -> None:
    predicate = _predicate(cases("a", "human", (10, 0, 0, 0)))
    predicate["overall"]["cases"] = 9
    with pytest.raises(PredicateError, match=r"overall.cases"):
        evaluate_gates(Gates(max_overall_regression_points=2), predicate)


def test_gates_recompute_intervals_instead_of_trusting_the_predicate() -> None:
    predicate = _predicate(cases("a", "human", (700, 5, 85, 10)))
    predicate["overall"]["interval_points"] = [0, 0]  # typed in: ignored
    result = _gate({"max_overall_regression_points": 2}, predicate, "max_overall_regression_points")
    assert result.verdict == "fail"


# -- bad results files ----------------------------------------------------------------------------
def _bad(tmp_path: Path, data: bytes, limits: ResultsLimits = ResultsLimits()) -> str:
    path = tmp_path / "results.jsonl"
    path.write_bytes(data)
    with pytest.raises(ResultsError) as info:
        load_results(path, limits)
    message = str(info.value)
    assert message.startswith(str(path)), message
    return message


def test_invalid_json_line_is_named(tmp_path: Path) -> None:
    data = jsonl(HEADER, cases("a", "human", (2, 0, 0, 0))) + b"{not json\n"
    assert ":4: not valid JSON" in _bad(tmp_path, data)


def test_case_missing_a_field_is_named_with_its_line(tmp_path: Path) -> None:
    lines = cases("a", "human", (3, 0, 0, 0))
    del lines[1]["baseline"]
    message = _bad(tmp_path, jsonl(HEADER, lines))
    assert ":3: missing field(s): baseline" in message


def test_pass_that_is_not_a_boolean_is_named(tmp_path: Path) -> None:
    lines = cases("a", "human", (3, 0, 0, 0))
    lines[2]["candidate"]["pass"] = "yes"
    assert ":4 (case 'a-human-2'): candidate.pass: must be true or false" in _bad(
        tmp_path, jsonl(HEADER, lines)
    )


def test_repeated_case_id_names_both_lines(tmp_path: Path) -> None:
    lines = cases("a", "human", (3, 0, 0, 0))
    lines[2]["case"] = lines[0]["case"]
    message = _bad(tmp_path, jsonl(HEADER, lines))
    assert ":4 (case 'a-human-0'): case id repeated (first at" in message
    assert message.endswith(":2)")


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    header = {**HEADER, "format": "something-else/v9"}
    assert ":1: format: must be" in _bad(tmp_path, jsonl(header, cases("a", "human", (1, 0, 0, 0))))


def test_duplicate_key_is_refused(tmp_path: Path) -> None:
    data = jsonl(HEADER, []) + (
        b'{"case": "x", "case": "y", "slice": "a", "kind": "human", '
        b'"candidate": {"pass": true}, "baseline": {"pass": true}}\n'
    )
    assert ":2: not valid JSON: duplicate key 'case'" in _bad(tmp_path, data)


def test_unknown_kind_and_unknown_field_are_refused(tmp_path: Path) -> None:
    lines = cases("a", "human", (2, 0, 0, 0))
    lines[0]["kind"] = "llm"
    assert ":2 (case 'a-human-0'): kind: must be one of" in _bad(tmp_path, jsonl(HEADER, lines))
    lines = cases("a", "human", (2, 0, 0, 0))
    lines[1]["candidate"]["output"] = "the payload"
    assert ":3 (case 'a-human-1'): candidate: unknown field(s): output" in _bad(
        tmp_path, jsonl(HEADER, lines)
    )


def test_too_many_cases_and_too_many_bytes_are_refused(tmp_path: Path) -> None:
    data = jsonl(HEADER, cases("a", "human", (5, 0, 0, 0)))
    assert ":6: more than 4 cases" in _bad(tmp_path, data, ResultsLimits(max_cases=4))
    assert "exceeds 300 bytes" in _bad(tmp_path, data, ResultsLimits(max_bytes=300))


def test_negative_or_non_finite_metric_is_refused(tmp_path: Path) -> None:
    header = {**HEADER, "metrics": {"candidate": {"goodput": -1}}}
    assert ":1: metrics.candidate.goodput: must be a finite number >= 0" in _bad(
        tmp_path, jsonl(header, cases("a", "human", (1, 0, 0, 0)))
    )


def test_file_with_no_cases_is_refused(tmp_path: Path) -> None:
    assert "no cases" in _bad(tmp_path, jsonl(HEADER, []))


def test_json_document_form_is_read_and_its_errors_name_the_case(tmp_path: Path) -> None:
    lines = cases("a", "human", (36, 12, 2, 0))
    path = tmp_path / "results.json"
    path.write_text(json.dumps({**HEADER, "cases": lines}, indent=2))
    results = load_results(path)
    assert results.human == Paired(36, 12, 2, 0)
    lines[3]["slice"] = ""
    path.write_text(json.dumps({**HEADER, "cases": lines}, indent=2))
    with pytest.raises(ResultsError, match=r"results.json: cases\[3\] \(case 'a-human-3'\): slice"):
        load_results(path)


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="cannot read"):
        load_results(tmp_path / "missing.jsonl")


# -- the policy's gates ---------------------------------------------------------------------------
POLICY = "version: 1\ntrust_registered_signers: true\nevidence: {roles: [reader]}\naliases:\n"


def test_gates_load_on_a_protected_alias_rule() -> None:
    text = POLICY + (
        "  - pattern: prod\n    roles: [publisher]\n    protected: true\n    gates:\n"
        + "".join(f"      {k}: {json.dumps(v)}\n" for k, v in WORKED_GATES.items())
    )
    policy = load_policy(text.encode(), source="p.yaml")
    assert policy.aliases[0].gates == Gates(**WORKED_GATES)


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        (
            "{pattern: prod, roles: [publisher], gates: {max_p95_ttft_ms: 800}}",
            r"aliases\[0\]: gates is set but protected is false",
        ),
        ("{pattern: prod, roles: [publisher], protected: true, gates: {}}", "gates names no gate"),
        (
            "{pattern: prod, roles: [publisher], protected: true, gates: {required_slices: [a]}}",
            "required_slices is set but max_slice_regression_points is not",
        ),
        (
            "{pattern: prod, roles: [publisher], protected: true, "
            "gates: {min_deterministic_pass_rate: 1.5}}",
            "min_deterministic_pass_rate",
        ),
        (
            "{pattern: prod, roles: [publisher], protected: true, gates: {max_p95_tft_ms: 800}}",
            "max_p95_tft_ms",
        ),
    ],
    ids=["unprotected", "empty", "slices-without-bound", "rate-above-one", "misspelt"],
)
def test_bad_gates_are_refused_at_load(rule: str, error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        load_policy((POLICY + f"  - {rule}\n").encode(), source="p.yaml")


def test_gates_with_nobody_to_vouch_for_the_evaluation_are_refused_at_load() -> None:
    text = (
        "version: 1\ntrust_registered_signers: true\naliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true, "
        "gates: {max_critical_safety_failures: 0}}\n"
    )
    with pytest.raises(PolicyError, match=r"aliases\[0\]: gates needs evidence"):
        load_policy(text.encode(), source="p.yaml")
