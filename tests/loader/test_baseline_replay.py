"""Baseline and replay logic over real token sequences (the engine is a plain table)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from modelward.loader.baseline import (
    Baseline,
    compare_baselines,
    first_difference,
    record_baseline,
    token_hash,
)
from modelward.loader.engine import GenerationRequest
from modelward.loader.errors import InputError
from modelward.loader.fingerprint import Fingerprint, fingerprint_id
from modelward.loader.probes import BUILTIN_PROBES, resolve_probes
from modelward.loader.replay import load_expected, load_requests, summarize, write_capture

FP = Fingerprint({"dtype": "float32"}, fingerprint_id({"dtype": "float32"}))


class TableEngine:
    """Outputs a fixed function of the prompt; ``batched_shift`` alters batched outputs."""

    def __init__(self, *, batched_shift: int = 0, perturb: str | None = None) -> None:
        self.batched_shift = batched_shift
        self.perturb = perturb

    def generate(self, requests: Sequence[GenerationRequest]) -> list[tuple[int, ...]]:
        out = []
        for req in requests:
            text = req.prompt or ""
            ids = [ord(c) % 50 for c in text][: req.max_tokens]
            if len(requests) > 1 and self.batched_shift and len(ids) > 2:
                ids[2] += self.batched_shift
            if self.perturb is not None and text == self.perturb:
                ids[3] += 1
            out.append(tuple(ids))
        return out


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_token_hash_is_canonical() -> None:
    assert token_hash([1, 2, 3]) == token_hash((1, 2, 3))
    assert token_hash([1, 2, 3]) != token_hash([1, 2, 4])


def test_baseline_round_trips_and_matches_itself() -> None:
    b = record_baseline(
        TableEngine(), resolve_probes(), bundle_digest="sha256:" + "0" * 64, fingerprint=FP
    )
    again = Baseline.from_predicate(json.loads(json.dumps(b.to_predicate())))
    assert again == b
    assert compare_baselines(b, again).matched
    assert b.batch_invariant
    assert len(b.probes) == len(BUILTIN_PROBES)


def test_divergence_names_probe_and_token_index() -> None:
    probes = resolve_probes()
    b1 = record_baseline(TableEngine(), probes, bundle_digest="sha256:" + "0" * 64, fingerprint=FP)
    b2 = record_baseline(
        TableEngine(perturb=probes[1].prompt),
        probes,
        bundle_digest="sha256:" + "0" * 64,
        fingerprint=FP,
    )
    comparison = compare_baselines(b1, b2)
    assert not comparison.matched
    assert [(d.probe_id, d.index) for d in comparison.divergences] == [("p01", 3)]
    assert "p01: first differing token index 3" in comparison.describe()


def test_batched_mismatch_is_reported_as_not_batch_invariant() -> None:
    b = record_baseline(
        TableEngine(batched_shift=1),
        resolve_probes(),
        bundle_digest="sha256:" + "0" * 64,
        fingerprint=FP,
    )
    assert not b.batch_invariant
    assert all(d.index == 2 for d in b.batch_divergences)


def test_tampered_baseline_predicate_is_refused() -> None:
    b = record_baseline(
        TableEngine(), resolve_probes(), bundle_digest="sha256:" + "0" * 64, fingerprint=FP
    )
    predicate = b.to_predicate()
    predicate["probes"][0]["token_ids"][0] += 1
    with pytest.raises(ValueError, match="hash does not match"):
        Baseline.from_predicate(predicate)


def test_spec_probes_replace_builtin_ones() -> None:
    assert [p.prompt for p in resolve_probes(["a", "b"])] == ["a", "b"]
    with pytest.raises(ValueError):
        resolve_probes(["a", ""])


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_requests_file_errors_name_the_line(tmp_path: Path) -> None:
    bad = _write(
        tmp_path / "r.jsonl", [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y", "bogus": 1}]
    )
    with pytest.raises(InputError, match=r"r\.jsonl:2: unknown field\(s\) bogus"):
        load_requests(bad)
    both = _write(tmp_path / "b.jsonl", [{"id": "a", "prompt": "x", "prompt_token_ids": [1]}])
    with pytest.raises(InputError, match="exactly one"):
        load_requests(both)
    dup = _write(tmp_path / "d.jsonl", [{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}])
    with pytest.raises(InputError, match="duplicate"):
        load_requests(dup)
    (tmp_path / "n.jsonl").write_text("{not json\n")
    with pytest.raises(InputError, match=r"n\.jsonl:1: not JSON"):
        load_requests(tmp_path / "n.jsonl")


def test_summarize_counts_consecutive_matches_and_unique_completions(tmp_path: Path) -> None:
    reqs = load_requests(
        _write(
            tmp_path / "r.jsonl",
            [{"id": "a", "prompt": "x"}, {"id": "b", "prompt_token_ids": [1, 2]}],
        )
    )
    runs = [[(1, 2), (3, 4)], [(1, 2), (3, 4)], [(1, 2), (3, 5)], [(1, 2), (3, 4)]]
    report = summarize(reqs, runs, None, reference_name="")
    assert report.executions == 8
    assert report.consecutive_matches == 5  # run 3's request b is the first divergence
    assert report.matches == 7
    assert report.divergence_count == 1
    assert (
        report.divergences[0].run,
        report.divergences[0].request_id,
        report.divergences[0].index,
    ) == (3, "b", 1)
    assert report.unique_completions == {"a": 1, "b": 2}


def test_capture_then_expected_round_trip(tmp_path: Path) -> None:
    reqs = load_requests(_write(tmp_path / "r.jsonl", [{"id": "a", "prompt": "x"}]))
    write_capture(tmp_path / "out.jsonl", reqs, [(5, 6, 7)])
    assert load_expected(tmp_path / "out.jsonl")["a"].token_ids == (5, 6, 7)
    report = summarize(
        reqs, [[(5, 6, 8)]], load_expected(tmp_path / "out.jsonl"), reference_name="out"
    )
    assert report.divergences[0].index == 2
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    rows[0]["token_ids"] = [5, 6, 9]
    _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(InputError, match="sha256"):
        load_expected(tmp_path / "bad.jsonl")
