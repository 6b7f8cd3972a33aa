"""Side-effect logs of a completion: its tool calls and its structured output
(docs/loader.md#side-effect-logs).

A replayed request may say how its completion acts on the world:

- ``tool_call_format``: how tool calls are written in the completion text, one of
  ``hermes`` (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks),
  ``json`` (the whole completion is one call object or a list of them; a leading
  ``<|python_tag|>`` is dropped) and ``mistral`` (``[TOOL_CALLS]`` then a JSON list);
- ``structured_output``: the constraint the completion was generated under (``json``
  schema, ``regex`` or ``choice``); the completion *is* the structured output.

``side_effect_log`` is the one extractor: the replayed completions and an expected
outputs file's text go through it alike, so two parsers never disagree about what a
completion did. Arguments given as a JSON string (the OpenAI wire form) are parsed, and
the log is compared in canonical JSON (RFC 8785), so key order and spacing never count
as a divergence while any changed name, argument or value does. A call that cannot be
parsed is kept as ``{"unparsed": <text>}`` (``unparsed_arguments``,
``unparsed_structured_output``) and compared like any other entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785

__all__ = [
    "STRUCTURED_KINDS",
    "TOOL_CALL_FORMATS",
    "canonical_log",
    "first_difference_path",
    "log_difference",
    "side_effect_log",
]

TOOL_CALL_FORMATS = ("hermes", "json", "mistral")
#: the sections of a log, in the order a divergence is named: the calls a completion makes
#: say more than the text it is constrained to
SECTIONS = ("tool_calls", "structured_output", "unparsed_structured_output")
STRUCTURED_KINDS = ("json", "regex", "choice")

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL_TAG = "[TOOL_CALLS]"


_UNPARSED = object()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(text: str) -> Any:
    """``text`` parsed as JSON, or ``_UNPARSED`` when it is not JSON or has no canonical
    form (NaN, integers past 2**53, lone surrogates)."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
        rfc8785.dumps(value)
    except (ValueError, rfc8785.CanonicalizationError):
        return _UNPARSED
    return value


def _call(value: Any, raw: str) -> dict[str, Any]:
    """One tool call as ``{"name", "arguments"}``; anything else as ``{"unparsed": raw}``."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return {"unparsed": raw}
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # the OpenAI wire form: a JSON text
        parsed = _parse(arguments)
        if parsed is _UNPARSED:
            return {"name": value["name"], "unparsed_arguments": arguments}
        arguments = parsed
    return {"name": value["name"], "arguments": arguments}


def _tool_calls(text: str, fmt: str) -> list[dict[str, Any]]:
    if fmt == "hermes":
        return [_call(_parse(body.strip()), body) for body in _HERMES.findall(text)]
    body = text.strip()
    if fmt == "json":
        body = body.removeprefix(_PYTHON_TAG).strip()
    else:  # mistral
        if not body.startswith(_MISTRAL_TAG):
            return []
        body = body[len(_MISTRAL_TAG) :].strip()
    if not body:
        return []
    parsed = _parse(body)
    if parsed is _UNPARSED:
        return [{"unparsed": body}]
    calls = parsed if isinstance(parsed, list) else [parsed]
    return [_call(c, json.dumps(c)) for c in calls]


def side_effect_log(
    text: str, *, tool_call_format: str | None, structured_kind: str | None
) -> dict[str, Any] | None:
    """The side-effect log of ``text``, or None when the request declares none."""
    log: dict[str, Any] = {}
    if tool_call_format is not None:
        if tool_call_format not in TOOL_CALL_FORMATS:
            raise ValueError(f"unknown tool call format {tool_call_format!r}")
        log["tool_calls"] = _tool_calls(text, tool_call_format)
    if structured_kind is not None:
        if structured_kind not in STRUCTURED_KINDS:
            raise ValueError(f"unknown structured output kind {structured_kind!r}")
        value = _parse(text) if structured_kind == "json" else text
        if value is _UNPARSED:
            log["unparsed_structured_output"] = text
        else:
            log["structured_output"] = value
    return log or None


def canonical_log(log: Any) -> bytes:
    """The canonical JSON bytes of a log (RFC 8785); ``b"null"`` for none. A value RFC 8785
    cannot spell (a lone surrogate in a completion's text, a number past 2**53 in a file) is
    written as sorted, ASCII-escaped JSON instead: still one spelling per value, and never
    equal to another value's RFC 8785 bytes (equal JSON bytes parse to equal values)."""
    try:
        return bytes(rfc8785.dumps(log))
    except rfc8785.CanonicalizationError:
        return json.dumps(
            log, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=False
        ).encode("ascii")


def first_difference_path(a: Any, b: Any, path: str = "") -> str:
    """The JSON path of the first place ``a`` and ``b`` differ (``""`` at the top); call it
    only for values whose canonical forms differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b or canonical_log(a[key]) != canonical_log(b[key]):
                child = f"{path}.{key}" if path else str(key)
                if key in a and key in b:
                    return first_difference_path(a[key], b[key], child)
                return child
        return path
    if (
        isinstance(a, Sequence)
        and isinstance(b, Sequence)
        and not isinstance(a, str)
        and not isinstance(b, str)
    ):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if canonical_log(x) != canonical_log(y):
                return first_difference_path(x, y, f"{path}[{i}]")
        return f"{path}[{min(len(a), len(b))}]"
    return path


def log_difference(ours: Mapping[str, Any] | None, theirs: Mapping[str, Any] | None) -> str | None:
    """None when two logs are canonically equal, else the path of the first difference,
    looking at the sections in ``SECTIONS`` order (``""``: one log is missing)."""
    if canonical_log(ours) == canonical_log(theirs):
        return None
    if ours is None or theirs is None:
        return ""
    for section in SECTIONS:
        a, b = ours.get(section), theirs.get(section)
        if canonical_log(a) != canonical_log(b):
            if section in ours and section in theirs:
                return first_difference_path(a, b, section)
            return section
    return first_difference_path(ours, theirs)
