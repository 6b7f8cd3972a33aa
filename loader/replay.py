"""Deterministic replay (docs/loader.md#replay).

A requests file is JSONL, one captured request per line::

    {"id": "r1", "prompt": "hello", "max_tokens": 16, "seed": 7, "temperature": 0}
    {"id": "r2", "prompt_token_ids": [1, 2, 3], "max_tokens": 8}

Requests are replayed ``runs`` times, ``concurrency`` at a time (one engine batch per
group). Outputs are compared with a reference: another engine's outputs, an expected
outputs file (the JSONL ``--capture`` writes: ``{"id", "token_ids", "sha256"}``) or, with
neither, this engine's first run. The report counts executions (runs × requests),
consecutive matches (matching executions in order, until the first divergence),
divergences (run, request id, first differing token index) and unique completions per
request over all runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelward.loader.baseline import Generator, first_difference, token_hash
from modelward.loader.engine import GenerationRequest
from modelward.loader.errors import InputError

__all__ = [
    "ReplayDivergence",
    "ReplayReport",
    "ReplayRequest",
    "load_expected",
    "load_requests",
    "run_replay",
    "summarize",
    "write_capture",
]

MAX_REPORTED_DIVERGENCES = 100
_FIELDS = frozenset({"id", "prompt", "prompt_token_ids", "max_tokens", "seed", "temperature",
                     "top_p", "top_k"})


@dataclass(frozen=True)
class ReplayRequest:
    id: str
    request: GenerationRequest


def _parse_request(line_no: int, obj: Any, source: str) -> ReplayRequest:
    where = f"{source}:{line_no}"
    if not isinstance(obj, dict):
        raise InputError(f"{where}: each line must be a JSON object")
    unknown = set(obj) - _FIELDS
    if unknown:
        raise InputError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    rid = obj.get("id", str(line_no))
    if not isinstance(rid, str | int) or isinstance(rid, bool):
        raise InputError(f"{where}: 'id' must be a string")
    prompt = obj.get("prompt")
    ids = obj.get("prompt_token_ids")
    if (prompt is None) == (ids is None):
        raise InputError(f"{where}: give exactly one of 'prompt' and 'prompt_token_ids'")
    if prompt is not None and not isinstance(prompt, str):
        raise InputError(f"{where}: 'prompt' must be a string")
    if ids is not None and (not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)):
        raise InputError(f"{where}: 'prompt_token_ids' must be a list of token ids")
    try:
        request = GenerationRequest(
            prompt=prompt,
            prompt_token_ids=tuple(ids) if ids is not None else None,
            max_tokens=int(obj.get("max_tokens", 16)),
            temperature=float(obj.get("temperature", 0.0)),
            top_p=float(obj.get("top_p", 1.0)),
            top_k=int(obj.get("top_k", -1)),
            seed=None if obj.get("seed") is None else int(obj["seed"]),
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}") from None
    if request.max_tokens < 1:
        raise InputError(f"{where}: 'max_tokens' must be >= 1")
    return ReplayRequest(str(rid), request)


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    rows: list[tuple[int, Any]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((line_no, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{line_no}: not JSON: {exc.msg}") from None
    return rows


def load_requests(path: Path) -> list[ReplayRequest]:
    """Parse a requests JSONL file; ``InputError`` names the file, line and field."""
    requests = [_parse_request(n, obj, str(path)) for n, obj in _json_lines(path)]
    if not requests:
        raise InputError(f"{path}: no requests")
    seen: set[str] = set()
    for req in requests:
        if req.id in seen:
            raise InputError(f"{path}: duplicate request id {req.id!r}")
        seen.add(req.id)
    return requests


def load_expected(path: Path) -> dict[str, tuple[int, ...]]:
    """Parse an outputs JSONL file (as ``--capture`` writes); hashes must match the ids."""
    expected: dict[str, tuple[int, ...]] = {}
    for line_no, obj in _json_lines(path):
        where = f"{path}:{line_no}"
        if not isinstance(obj, dict) or not isinstance(obj.get("token_ids"), list):
            raise InputError(f"{where}: expected an object with 'id' and 'token_ids'")
        ids = tuple(int(t) for t in obj["token_ids"])
        if "sha256" in obj and obj["sha256"] != token_hash(ids):
            raise InputError(f"{where}: 'sha256' does not match 'token_ids'")
        expected[str(obj["id"])] = ids
    return expected


def write_capture(path: Path, requests: Sequence[ReplayRequest],
                  outputs: Sequence[tuple[int, ...]]) -> None:
    """Write one run's outputs as JSONL (atomically, or in place for a device: _fileio)."""
    from modelward.attest._fileio import write_output

    lines = (
        json.dumps({"id": req.id, "token_ids": list(ids), "sha256": token_hash(ids)}) + "\n"
        for req, ids in zip(requests, outputs, strict=True)
    )
    write_output(path, "".join(lines).encode("utf-8"))


def run_replay(engine: Generator, requests: Sequence[ReplayRequest], *, runs: int,
               concurrency: int) -> list[list[tuple[int, ...]]]:
    """Replay every request ``runs`` times, ``concurrency`` per engine batch; return the
    outputs as ``[run][request index] -> token ids``."""
    if runs < 1 or concurrency < 1:
        raise ValueError("runs and concurrency must be >= 1")
    results: list[list[tuple[int, ...]]] = []
    for _ in range(runs):
        outputs: list[tuple[int, ...]] = []
        for start in range(0, len(requests), concurrency):
            group = requests[start:start + concurrency]
            outputs.extend(engine.generate([r.request for r in group]))
        results.append(outputs)
    return results


@dataclass(frozen=True)
class ReplayDivergence:
    run: int
    request_id: str
    index: int


@dataclass(frozen=True)
class ReplayReport:
    runs: int
    requests: int
    executions: int
    consecutive_matches: int
    matches: int
    divergences: tuple[ReplayDivergence, ...]
    divergence_count: int
    unique_completions: Mapping[str, int]
    reference: str

    @property
    def passed(self) -> bool:
        return self.divergence_count == 0

    def to_predicate(self) -> dict[str, Any]:
        return {
            "runs": self.runs, "requests": self.requests, "executions": self.executions,
            "consecutive_matches": self.consecutive_matches, "matches": self.matches,
            "divergence_count": self.divergence_count,
            "divergences": [{"run": d.run, "request": d.request_id, "index": d.index}
                            for d in self.divergences],
            "unique_completions": dict(self.unique_completions),
            "max_unique_completions": max(self.unique_completions.values(), default=0),
            "reference": self.reference,
        }


def summarize(requests: Sequence[ReplayRequest], outputs: Sequence[Sequence[tuple[int, ...]]],
              reference: Mapping[str, tuple[int, ...]] | None, *,
              reference_name: str) -> ReplayReport:
    """Compare every execution with ``reference`` (by request id; None: run 1's outputs).

    A request missing from the reference counts as a divergence at index 0.
    """
    if reference is None:
        reference = {req.id: ids for req, ids in zip(requests, outputs[0], strict=True)}
        reference_name = reference_name or "first run"
    consecutive = 0
    streak_open = True
    matches = 0
    divergences: list[ReplayDivergence] = []
    count = 0
    unique: dict[str, set[tuple[int, ...]]] = {req.id: set() for req in requests}
    for run_index, run in enumerate(outputs, start=1):
        for req, ids in zip(requests, run, strict=True):
            unique[req.id].add(ids)
            want = reference.get(req.id)
            index = 0 if want is None else first_difference(want, ids)
            if index is None:
                matches += 1
                if streak_open:
                    consecutive += 1
                continue
            streak_open = False
            count += 1
            if len(divergences) < MAX_REPORTED_DIVERGENCES:
                divergences.append(ReplayDivergence(run_index, req.id, index))
    return ReplayReport(
        runs=len(outputs), requests=len(requests), executions=len(outputs) * len(requests),
        consecutive_matches=consecutive, matches=matches, divergences=tuple(divergences),
        divergence_count=count, unique_completions={k: len(v) for k, v in unique.items()},
        reference=reference_name,
    )
