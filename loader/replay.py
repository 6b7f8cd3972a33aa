"""Deterministic replay (docs/loader.md#replay).

A requests file is JSONL, one captured request per line::

    {"id": "r1", "prompt": "hello", "max_tokens": 16, "seed": 7, "temperature": 0}
    {"id": "r2", "prompt_token_ids": [1, 2, 3], "max_tokens": 8}
    {"id": "t1", "prompt": "weather?", "tool_call_format": "hermes"}
    {"id": "s1", "prompt": "city:", "structured_output": {"json": {"type": "object"}}}

Requests are replayed ``runs`` times, ``concurrency`` at a time (one engine batch per
group). Each execution is compared with a reference: another engine's outputs, an expected
outputs file (the JSONL ``--capture`` writes: ``{"id", "token_ids", "sha256", "text"}``)
or, with neither, this engine's first run. Two things are compared, and reported apart:

- the output: the token ids (``token_hash``), a divergence names the first differing
  token index;
- the side-effect log (loader.side_effects) of a request that declares one: its tool calls
  and structured output, extracted from the completion text by the one extractor and
  compared canonically; a divergence names the JSON path that differs.

``ReplayTally`` takes executions run by run, in bounded memory (unique completions are kept
as hashes), and counts consecutive matches (executions matching in both, in order, until
the first divergence), divergences and unique completions per request.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import rfc8785

from modelward.attest._fileio import read_bounded
from modelward.loader.baseline import first_difference, token_hash
from modelward.loader.engine import Completion, GenerationRequest
from modelward.loader.errors import InputError
from modelward.loader.side_effects import (
    STRUCTURED_KINDS,
    TOOL_CALL_FORMATS,
    canonical_log,
    log_difference,
    side_effect_log,
)

__all__ = [
    "Completer",
    "ReplayDivergence",
    "ReplayReport",
    "ReplayRequest",
    "ReplayTally",
    "SideEffectDivergence",
    "load_expected",
    "load_requests",
    "load_requests_file",
    "replay_once",
    "run_replay",
    "summarize",
    "write_capture",
]

MAX_REPORTED_DIVERGENCES = 100
MAX_STRUCTURED_BYTES = 64 * 1024
MAX_FILE_BYTES = 1 << 30  # a requests or expected-outputs file
_FIELDS = frozenset(
    {
        "id",
        "prompt",
        "prompt_token_ids",
        "max_tokens",
        "seed",
        "temperature",
        "top_p",
        "top_k",
        "tool_call_format",
        "structured_output",
    }
)


class Completer(Protocol):
    def complete(self, requests: Sequence[GenerationRequest]) -> list[Completion]: ...


@dataclass(frozen=True)
class ReplayRequest:
    id: str
    request: GenerationRequest
    tool_call_format: str | None = None

    @property
    def has_side_effects(self) -> bool:
        return self.tool_call_format is not None or self.request.structured is not None

    def side_effects(self, text: str) -> dict[str, Any] | None:
        """This request's side-effect log of a completion ``text`` (loader.side_effects)."""
        kind = self.request.structured[0] if self.request.structured else None
        return side_effect_log(text, tool_call_format=self.tool_call_format, structured_kind=kind)


def _structured(value: Any, where: str) -> tuple[str, str] | None:
    """``structured_output``: one of ``{"json": SCHEMA}``, ``{"regex": STR}``,
    ``{"choice": [STR, ...]}``, kept as (kind, canonical JSON)."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in STRUCTURED_KINDS:
        raise InputError(
            f"{where}: 'structured_output' must be an object with exactly one of "
            f"{', '.join(STRUCTURED_KINDS)}"
        )
    kind, spec = next(iter(value.items()))
    if kind == "json" and not isinstance(spec, dict):
        raise InputError(f"{where}: 'structured_output.json' must be a JSON schema object")
    if kind == "regex" and not (isinstance(spec, str) and spec):
        raise InputError(f"{where}: 'structured_output.regex' must be a non-empty string")
    if kind == "choice" and not (
        isinstance(spec, list) and spec and all(isinstance(c, str) for c in spec)
    ):
        raise InputError(f"{where}: 'structured_output.choice' must be a list of strings")
    try:
        canonical = rfc8785.dumps(spec)
    except rfc8785.CanonicalizationError as exc:
        raise InputError(f"{where}: 'structured_output': {exc}") from None
    if len(canonical) > MAX_STRUCTURED_BYTES:
        raise InputError(
            f"{where}: 'structured_output' is larger than {MAX_STRUCTURED_BYTES} bytes"
        )
    return kind, canonical.decode("utf-8")


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
    if ids is not None and (
        not isinstance(ids, list)
        or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)
    ):
        raise InputError(f"{where}: 'prompt_token_ids' must be a list of token ids")
    tool_format = obj.get("tool_call_format")
    if tool_format is not None and tool_format not in TOOL_CALL_FORMATS:
        raise InputError(
            f"{where}: 'tool_call_format' must be one of {', '.join(TOOL_CALL_FORMATS)}"
        )
    try:
        request = GenerationRequest(
            prompt=prompt,
            prompt_token_ids=tuple(ids) if ids is not None else None,
            max_tokens=int(obj.get("max_tokens", 16)),
            temperature=float(obj.get("temperature", 0.0)),
            top_p=float(obj.get("top_p", 1.0)),
            top_k=int(obj.get("top_k", -1)),
            seed=None if obj.get("seed") is None else int(obj["seed"]),
            structured=_structured(obj.get("structured_output"), where),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(f"{where}: {exc}") from None
    if not (math.isfinite(request.temperature) and math.isfinite(request.top_p)):
        raise InputError(f"{where}: 'temperature' and 'top_p' must be finite numbers")
    if request.max_tokens < 1:
        raise InputError(f"{where}: 'max_tokens' must be >= 1")
    return ReplayRequest(str(rid), request, tool_format)


def _read(path: Path) -> bytes:
    """The file's bytes, read once, at most ``MAX_FILE_BYTES``."""
    return read_bounded(path, MAX_FILE_BYTES, what=str(path), error=InputError)


def _json_lines(path: Path, data: bytes) -> list[tuple[int, Any]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    rows: list[tuple[int, Any]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((line_no, json.loads(line, parse_constant=_no_constant)))
        except (json.JSONDecodeError, ValueError) as exc:
            raise InputError(
                f"{path}:{line_no}: not JSON: {getattr(exc, 'msg', None) or exc}"
            ) from None
    return rows


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_requests(path: Path) -> list[ReplayRequest]:
    """Parse a requests JSONL file; ``InputError`` names the file, line and field."""
    return load_requests_file(path)[0]


def load_requests_file(path: Path) -> tuple[list[ReplayRequest], str]:
    """``load_requests``, and the ``sha256:`` digest of the very bytes parsed (read once:
    the digest a signed result names is the file that was replayed)."""
    data = _read(path)
    requests = [_parse_request(n, obj, str(path)) for n, obj in _json_lines(path, data)]
    if not requests:
        raise InputError(f"{path}: no requests")
    seen: set[str] = set()
    for req in requests:
        if req.id in seen:
            raise InputError(f"{path}: duplicate request id {req.id!r}")
        seen.add(req.id)
    return requests, "sha256:" + hashlib.sha256(data).hexdigest()


def load_expected(path: Path, requests: Sequence[ReplayRequest] = ()) -> dict[str, Completion]:
    """Parse an outputs JSONL file (as ``--capture`` writes). ``sha256`` must match the
    token ids and a recorded ``side_effects`` the log of ``text``; a request of
    ``requests`` that declares a side-effect log needs its expected ``text``."""
    by_id = {req.id: req for req in requests}
    expected: dict[str, Completion] = {}
    for line_no, obj in _json_lines(path, _read(path)):
        where = f"{path}:{line_no}"
        if not isinstance(obj, dict) or not isinstance(obj.get("token_ids"), list):
            raise InputError(f"{where}: expected an object with 'id' and 'token_ids'")
        rid = obj.get("id")
        if not isinstance(rid, str | int) or isinstance(rid, bool):
            raise InputError(f"{where}: 'id' must be a string")
        if not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in obj["token_ids"]
        ):
            raise InputError(f"{where}: 'token_ids' must be a list of token ids")
        ids = tuple(obj["token_ids"])
        if "sha256" in obj and obj["sha256"] != token_hash(ids):
            raise InputError(f"{where}: 'sha256' does not match 'token_ids'")
        text = obj.get("text")
        if text is not None and not (isinstance(text, str) and _is_utf8(text)):
            raise InputError(f"{where}: 'text' must be a string of Unicode text")
        req = by_id.get(str(rid))
        if req is not None and req.has_side_effects:
            if text is None:
                raise InputError(
                    f"{where}: request {str(rid)!r} declares a side-effect log; "
                    "its expected 'text' is needed (capture it again)"
                )
            if "side_effects" in obj and canonical_log(obj["side_effects"]) != canonical_log(
                req.side_effects(text)
            ):
                raise InputError(f"{where}: 'side_effects' does not match 'text'")
        expected[str(rid)] = Completion(ids, text)
    return expected


def _is_utf8(text: str) -> bool:
    """Whether ``text`` is Unicode text (no lone surrogates, which JSON can spell)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def write_capture(
    path: Path, requests: Sequence[ReplayRequest], outputs: Sequence[Completion | tuple[int, ...]]
) -> None:
    """Write one run's outputs as JSONL (atomically, or in place for a device: _fileio)."""
    from modelward.attest._fileio import write_output

    lines = []
    for req, out in zip(requests, outputs, strict=True):
        done = _as_completion(out)
        row: dict[str, Any] = {
            "id": req.id,
            "token_ids": list(done.token_ids),
            "sha256": token_hash(done.token_ids),
        }
        if done.text is not None:
            row["text"] = done.text
            if req.has_side_effects:
                row["side_effects"] = req.side_effects(done.text)
        lines.append(json.dumps(row) + "\n")
    write_output(path, "".join(lines).encode("utf-8"))


def replay_once(
    engine: Completer, requests: Sequence[ReplayRequest], *, concurrency: int
) -> list[Completion]:
    """One run of every request, ``concurrency`` per engine batch."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    outputs: list[Completion] = []
    for start in range(0, len(requests), concurrency):
        outputs.extend(engine.complete([r.request for r in requests[start : start + concurrency]]))
    return outputs


def run_replay(
    engine: Completer, requests: Sequence[ReplayRequest], *, runs: int, concurrency: int
) -> list[list[tuple[int, ...]]]:
    """Replay every request ``runs`` times (``replay_once``); return the output token ids as
    ``[run][request index]``."""
    if runs < 1:
        raise ValueError("runs must be >= 1")
    return [
        [c.token_ids for c in replay_once(engine, requests, concurrency=concurrency)]
        for _ in range(runs)
    ]


@dataclass(frozen=True)
class ReplayDivergence:
    """An output divergence: the first differing token index."""

    run: int
    request_id: str
    index: int


@dataclass(frozen=True)
class SideEffectDivergence:
    """A side-effect log divergence: the JSON path that differs (``""``: the whole log)."""

    run: int
    request_id: str
    path: str


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
    output_divergence_count: int = 0
    side_effect_divergences: tuple[SideEffectDivergence, ...] = ()
    side_effect_divergence_count: int = 0
    side_effect_requests: int = 0

    @property
    def passed(self) -> bool:
        return self.divergence_count == 0

    def to_predicate(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "requests": self.requests,
            "executions": self.executions,
            "consecutive_matches": self.consecutive_matches,
            "matches": self.matches,
            "divergence_count": self.divergence_count,
            "output_divergence_count": self.output_divergence_count,
            "divergences": [
                {"run": d.run, "request": d.request_id, "index": d.index} for d in self.divergences
            ],
            "side_effect_requests": self.side_effect_requests,
            "side_effect_divergence_count": self.side_effect_divergence_count,
            "side_effect_divergences": [
                {"run": d.run, "request": d.request_id, "path": d.path}
                for d in self.side_effect_divergences
            ],
            "unique_completions": dict(self.unique_completions),
            "max_unique_completions": max(self.unique_completions.values(), default=0),
            "reference": self.reference,
        }


def _as_completion(value: Completion | Sequence[int]) -> Completion:
    return value if isinstance(value, Completion) else Completion(tuple(value))


def _completion_hash(token_ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(json.dumps(list(token_ids)).encode("ascii"), digest_size=16).digest()


@dataclass
class ReplayTally:
    """Executions compared with a reference, run by run (module docstring).

    ``reference`` maps request ids to completions; None takes the first run added. A run
    added with its own ``reference`` (an interleaved engine's same run) is compared with
    that instead. A request missing from the reference diverges at token index 0.
    """

    requests: Sequence[ReplayRequest]
    reference: Mapping[str, Completion] | None
    reference_name: str = ""
    runs: int = 0
    consecutive_matches: int = 0
    matches: int = 0
    output_divergence_count: int = 0
    side_effect_divergence_count: int = 0
    divergence_count: int = 0
    divergences: list[ReplayDivergence] = field(default_factory=list)
    side_effect_divergences: list[SideEffectDivergence] = field(default_factory=list)
    _unique: dict[str, set[bytes]] = field(default_factory=dict)
    _streak_open: bool = True

    def add_run(
        self,
        run: Sequence[Completion | Sequence[int]],
        reference: Mapping[str, Completion] | None = None,
    ) -> None:
        done = [_as_completion(c) for c in run]
        if self.reference is None:
            self.reference = {req.id: out for req, out in zip(self.requests, done, strict=True)}
            self.reference_name = self.reference_name or "first run"
        want_run = reference if reference is not None else self.reference
        self.runs += 1
        for req, got in zip(self.requests, done, strict=True):
            self._unique.setdefault(req.id, set()).add(_completion_hash(got.token_ids))
            want = want_run.get(req.id)
            index = 0 if want is None else first_difference(want.token_ids, got.token_ids)
            path = self._side_effect_difference(req, want, got)
            if index is None and path is None:
                self.matches += 1
                if self._streak_open:
                    self.consecutive_matches += 1
                continue
            self._streak_open = False
            self.divergence_count += 1
            if index is not None:
                self.output_divergence_count += 1
                if len(self.divergences) < MAX_REPORTED_DIVERGENCES:
                    self.divergences.append(ReplayDivergence(self.runs, req.id, index))
            if path is not None:
                self.side_effect_divergence_count += 1
                if len(self.side_effect_divergences) < MAX_REPORTED_DIVERGENCES:
                    self.side_effect_divergences.append(
                        SideEffectDivergence(self.runs, req.id, path)
                    )

    @staticmethod
    def _side_effect_difference(
        req: ReplayRequest, want: Completion | None, got: Completion
    ) -> str | None:
        """The path where the side-effect logs differ, or None when they match (or the
        request declares none). Fails closed: a missing text diverges."""
        if not req.has_side_effects:
            return None
        if want is None or want.text is None or got.text is None:
            return ""
        return log_difference(req.side_effects(want.text), req.side_effects(got.text))

    def report(self) -> ReplayReport:
        return ReplayReport(
            runs=self.runs,
            requests=len(self.requests),
            executions=self.runs * len(self.requests),
            consecutive_matches=self.consecutive_matches,
            matches=self.matches,
            divergences=tuple(self.divergences),
            divergence_count=self.divergence_count,
            unique_completions={req.id: len(self._unique.get(req.id, ())) for req in self.requests},
            reference=self.reference_name,
            output_divergence_count=self.output_divergence_count,
            side_effect_divergences=tuple(self.side_effect_divergences),
            side_effect_divergence_count=self.side_effect_divergence_count,
            side_effect_requests=sum(1 for req in self.requests if req.has_side_effects),
        )


def summarize(
    requests: Sequence[ReplayRequest],
    outputs: Sequence[Sequence[Completion | Sequence[int]]],
    reference: Mapping[str, Completion | Sequence[int]] | None,
    *,
    reference_name: str,
) -> ReplayReport:
    """Compare every execution of ``outputs`` (``[run][request index]``) with ``reference``
    (by request id; None: run 1's outputs): a ``ReplayTally`` over all runs at once."""
    ref = None if reference is None else {k: _as_completion(v) for k, v in reference.items()}
    tally = ReplayTally(requests, ref, reference_name)
    for run in outputs:
        tally.add_run(run)
    return tally.report()
