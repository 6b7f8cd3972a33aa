"""Side-effect logs (tool calls, structured outputs) and how replay compares them, over real
completion texts; the vLLM end of it is in test_boot_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelward.loader.engine import Completion
from modelward.loader.errors import InputError
from modelward.loader.hardening import KvCacheChoice
from modelward.loader.replay import (
    ReplayTally,
    load_expected,
    load_requests,
    write_capture,
)
from modelward.loader.replay_run import GIB, second_engine_fits
from modelward.loader.side_effects import (
    canonical_log,
    first_difference_path,
    log_difference,
    side_effect_log,
)

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}</tool_call>'


def _hermes(text: str) -> Any:
    return side_effect_log(text, tool_call_format="hermes", structured_kind=None)


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_hermes_tool_calls_are_extracted_with_arguments_parsed() -> None:
    log = _hermes("Let me check. " + CALL + " and " + CALL.replace("Paris", "Oslo"))
    assert log == {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
            {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}},
        ]
    }


def test_key_order_spacing_and_string_arguments_compare_equal() -> None:
    reordered = (
        '<tool_call>{"arguments":{"days":2,"city":"Paris"},"name":"get_weather"}</tool_call>'
    )
    wire = (
        '<tool_call>{"name": "get_weather", '
        '"arguments": "{\\"city\\": \\"Paris\\", \\"days\\": 2}"}</tool_call>'
    )
    assert canonical_log(_hermes(CALL)) == canonical_log(_hermes(reordered))
    assert canonical_log(_hermes(CALL)) == canonical_log(_hermes(wire))


def test_changed_argument_is_named_by_its_path() -> None:
    ours, theirs = _hermes(CALL), _hermes(CALL.replace('"days": 2', '"days": 3'))
    assert canonical_log(ours) != canonical_log(theirs)
    assert first_difference_path(ours, theirs) == "tool_calls[0].arguments.days"
    extra = _hermes(CALL + CALL)
    assert first_difference_path(ours, extra) == "tool_calls[1]"


def test_json_and_mistral_formats() -> None:
    call = {"name": "f", "parameters": {"x": 1}}
    assert side_effect_log(
        "<|python_tag|>" + json.dumps(call), tool_call_format="json", structured_kind=None
    ) == {"tool_calls": [{"name": "f", "arguments": {"x": 1}}]}
    assert side_effect_log(
        "[TOOL_CALLS] " + json.dumps([call, call]), tool_call_format="mistral", structured_kind=None
    )["tool_calls"][1]["arguments"] == {"x": 1}
    assert side_effect_log("no calls here", tool_call_format="mistral", structured_kind=None) == {
        "tool_calls": []
    }


def test_unparsable_calls_and_outputs_are_kept_and_compared() -> None:
    broken = _hermes('<tool_call>{"name": "f", "arguments": {"x": </tool_call>')
    assert broken == {"tool_calls": [{"unparsed": '{"name": "f", "arguments": {"x": '}]}
    nan = side_effect_log('{"x": NaN}', tool_call_format=None, structured_kind="json")
    assert nan == {"unparsed_structured_output": '{"x": NaN}'}
    # a JSON text that looks like the unparsed marker is not confused with one
    lookalike = side_effect_log(
        '{"unparsed": "{\\"x\\": NaN}"}', tool_call_format=None, structured_kind="json"
    )
    assert canonical_log(lookalike) != canonical_log(nan)


def test_a_changed_tool_call_is_named_before_the_structured_text_around_it() -> None:
    ours = side_effect_log(CALL, tool_call_format="hermes", structured_kind="regex")
    theirs = side_effect_log(
        CALL.replace("Paris", "Pisa"), tool_call_format="hermes", structured_kind="regex"
    )
    assert log_difference(ours, theirs) == "tool_calls[0].arguments.city"
    assert log_difference(ours, ours) is None
    assert log_difference(ours, None) == ""


def test_structured_output_compares_values_not_spacing() -> None:
    a = side_effect_log('{"a": 1, "b": [1, 2]}', tool_call_format=None, structured_kind="json")
    b = side_effect_log('{"b":[1,2],"a":1}', tool_call_format=None, structured_kind="json")
    c = side_effect_log('{"b":[1,3],"a":1}', tool_call_format=None, structured_kind="json")
    assert canonical_log(a) == canonical_log(b)
    assert first_difference_path(a, c) == "structured_output.b[1]"


def test_request_fields_are_checked_and_named(tmp_path: Path) -> None:
    cases = [
        ({"tool_call_format": "xml"}, "'tool_call_format' must be one of hermes, json, mistral"),
        ({"structured_output": {"json": 3}}, "structured_output.json' must be a JSON schema"),
        ({"structured_output": {"regex": ""}}, "structured_output.regex' must be a non-empty"),
        ({"structured_output": {"json": {}, "regex": "x"}}, "exactly one of json, regex, choice"),
        ({"structured_output": {"choice": [1]}}, "'structured_output.choice' must be a list"),
    ]
    for extra, message in cases:
        path = _write(
            tmp_path / "r.jsonl", [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y", **extra}]
        )
        with pytest.raises(
            InputError,
            match=r"r\.jsonl:2: .*"
            + message.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)"),
        ):
            load_requests(path)


def _tool_requests(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "r.jsonl",
        [
            {"id": "plain", "prompt": "x"},
            {"id": "tool", "prompt": "y", "tool_call_format": "hermes"},
            {"id": "form", "prompt": "z", "structured_output": {"json": {"type": "object"}}},
        ],
    )


def test_tally_reports_side_effect_divergence_while_tokens_match(tmp_path: Path) -> None:
    requests = load_requests(_tool_requests(tmp_path))
    ref = [Completion((1,), "a"), Completion((2,), CALL), Completion((3,), '{"k": 1}')]
    changed = [
        Completion((1,), "a"),
        Completion((2,), CALL.replace("Paris", "Parma")),
        Completion((3,), '{"k":1}'),
    ]
    tally = ReplayTally(requests, None)
    tally.add_run(ref)
    tally.add_run(ref)
    tally.add_run(changed)
    report = tally.report()
    assert report.output_divergence_count == 0
    assert report.side_effect_divergence_count == 1
    assert report.divergence_count == 1
    assert report.consecutive_matches == 7
    divergence = report.side_effect_divergences[0]
    assert (divergence.run, divergence.request_id, divergence.path) == (
        3,
        "tool",
        "tool_calls[0].arguments.city",
    )
    assert report.side_effect_requests == 2
    predicate = report.to_predicate()
    assert predicate["side_effect_divergences"] == [
        {"run": 3, "request": "tool", "path": "tool_calls[0].arguments.city"}
    ]


def test_tally_against_a_per_run_reference(tmp_path: Path) -> None:
    requests = load_requests(_tool_requests(tmp_path))
    run = [Completion((1,), "a"), Completion((2,), CALL), Completion((3,), "{}")]
    other = [Completion((1, 5), "a!"), Completion((2,), CALL), Completion((3,), "{}")]
    tally = ReplayTally(requests, {r.id: c for r, c in zip(requests, run, strict=True)}, "ref")
    tally.add_run(run, {r.id: c for r, c in zip(requests, other, strict=True)})
    report = tally.report()
    assert report.output_divergence_count == 1
    assert report.divergences[0].index == 1
    assert report.reference == "ref"


def test_missing_text_fails_closed(tmp_path: Path) -> None:
    requests = load_requests(_tool_requests(tmp_path))
    tally = ReplayTally(requests, None)
    tally.add_run([Completion((1,), "a"), Completion((2,), CALL), Completion((3,), "{}")])
    tally.add_run([Completion((1,), "a"), Completion((2,), None), Completion((3,), "{}")])
    assert [d.path for d in tally.report().side_effect_divergences] == [""]


def test_expected_file_round_trip_and_its_checks(tmp_path: Path) -> None:
    requests = load_requests(_tool_requests(tmp_path))
    run = [Completion((1,), "a"), Completion((2,), CALL), Completion((3,), '{"k": 1}')]
    out = tmp_path / "out.jsonl"
    write_capture(out, requests, run)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[1]["side_effects"]["tool_calls"][0]["arguments"]["city"] == "Paris"
    assert load_expected(out, requests)["tool"] == run[1]
    rows[1]["side_effects"]["tool_calls"][0]["arguments"]["city"] = "Rome"
    with pytest.raises(InputError, match=r"out2\.jsonl:2: 'side_effects' does not match 'text'"):
        load_expected(_write(tmp_path / "out2.jsonl", rows), requests)
    del rows[1]["text"], rows[1]["side_effects"]
    with pytest.raises(InputError, match=r"out3\.jsonl:2: request 'tool' declares a side-effect"):
        load_expected(_write(tmp_path / "out3.jsonl", rows), requests)


def test_second_engine_fits_only_on_cpu_with_memory(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\0" * 1024)
    kv = KvCacheChoice(gib=1, source="env")
    dirs = [tmp_path / "m", tmp_path / "m"]
    assert second_engine_fits(10 * GIB, kv, dirs)[0] is True
    fits, why = second_engine_fits(5 * GIB, kv, dirs)
    assert not fits
    assert "two engines need about 6.0 GiB and 5.0 GiB is available" in why
    assert second_engine_fits(10 * GIB, None, dirs) == (
        False,
        "not on a CPU: one engine claims the accelerator's memory",
    )
    assert second_engine_fits(None, kv, dirs)[0] is False


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"token_ids": [1]}, "'id' must be a string"),
        ({"id": "a", "token_ids": [-5, 1]}, "'token_ids' must be a list of token ids"),
        ({"id": "a", "token_ids": [1.7]}, "'token_ids' must be a list of token ids"),
        ({"id": "a", "token_ids": [True]}, "'token_ids' must be a list of token ids"),
        ({"id": "a", "token_ids": ["a"]}, "'token_ids' must be a list of token ids"),
        ({"id": "a", "token_ids": [1], "text": "x\ud800"}, "'text' must be a string of Unicode"),
    ],
)
def test_malformed_expected_lines_are_named(
    tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError, match=rf"out\.jsonl:1: {message}"):
        load_expected(path)


def test_expected_side_effects_beyond_canonical_json_are_compared_not_crashed(
    tmp_path: Path,
) -> None:
    requests = load_requests(_tool_requests(tmp_path))
    out = tmp_path / "out.jsonl"
    out.write_text(
        json.dumps(
            {"id": "tool", "token_ids": [2], "text": CALL, "side_effects": {"a": 9007199254740993}}
        )
        + "\n"
    )
    with pytest.raises(InputError, match="'side_effects' does not match 'text'"):
        load_expected(out, requests)


def test_non_finite_numbers_in_requests_are_named(tmp_path: Path) -> None:
    for line, message in (
        ('{"id": "a", "prompt": "x", "seed": Infinity}', "not JSON"),
        ('{"id": "a", "prompt": "x", "max_tokens": 1e400}', "r.jsonl:1: "),
        ('{"id": "a", "prompt": "x", "temperature": 1e400}', "finite"),
    ):
        (tmp_path / "r.jsonl").write_text(line + "\n")
        with pytest.raises(InputError, match=message):
            load_requests(tmp_path / "r.jsonl")


def test_a_lone_surrogate_in_a_completion_is_compared_not_crashed(tmp_path: Path) -> None:
    requests = load_requests(_tool_requests(tmp_path))
    odd = "<tool_call>\ud800</tool_call>"
    tally = ReplayTally(requests, None)
    tally.add_run([Completion((1,), "a"), Completion((2,), odd), Completion((3,), "\ud800")])
    tally.add_run([Completion((1,), "a"), Completion((2,), odd), Completion((3,), "\ud800")])
    tally.add_run(
        [
            Completion((1,), "a"),
            Completion((2,), "<tool_call>\ud801</tool_call>"),
            Completion((3,), "{}"),
        ]
    )
    report = tally.report()
    assert report.consecutive_matches == 7  # run 3's "plain" still matches
    assert [d.path for d in report.side_effect_divergences] == [
        "tool_calls[0].unparsed",
        "structured_output",
    ]


def test_the_digest_names_the_bytes_parsed(tmp_path: Path) -> None:
    import hashlib

    from modelward.loader.replay import load_requests_file

    path = _tool_requests(tmp_path)
    requests, digest = load_requests_file(path)
    assert digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert [r.id for r in requests] == ["plain", "tool", "form"]


def test_available_memory_is_capped_by_the_cgroup_limit(tmp_path: Path) -> None:
    from modelward.loader.engine import _cgroup_available, available_memory

    assert available_memory(tmp_path / "none") is not None  # no cgroup: the host's figure
    assert _cgroup_available(tmp_path / "none") is None
    (tmp_path / "memory.max").write_text(f"{3 * GIB}\n")
    (tmp_path / "memory.current").write_text(f"{1 * GIB}\n")
    assert _cgroup_available(tmp_path) == 2 * GIB
    limited = available_memory(tmp_path)
    assert limited is not None
    assert limited <= 2 * GIB
    (tmp_path / "memory.max").write_text("max\n")
    assert _cgroup_available(tmp_path) is None
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{GIB}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{2 * GIB}\n")
    assert available_memory(tmp_path / "v1") == 0
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1: no limit
    assert _cgroup_available(tmp_path / "v1") is None
