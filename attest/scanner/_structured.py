"""Text-like formats: JSON configs, the bundle spec, sentencepiece protos, text and code.

Nothing here renders, imports or evaluates what it reads: JSON is parsed as data, YAML with
a safe loader (libyaml's where available: linear in depth, nesting capped) after an event
pass that refuses anchors and aliases, protobuf by its wire format alone, and code is
recognized by heuristics to be rejected.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from modelward.attest._json import reject_duplicates
from modelward.attest._yaml import StrictYAMLError, load_strict_yaml
from modelward.attest.scanner._model import Finding

# Keys that make transformers import code shipped with (or referenced by) the model.
REMOTE_CODE_KEYS = frozenset({"auto_map", "custom_pipelines"})
CROSS_REPO = re.compile(r"^[\w.-]+/[\w.-]+--[\w.]+$")
PY_LINE = re.compile(
    r"^(?:import [\w.]+|from [\w.]+ import |def \w+\s*\(|async def \w+|class \w+\s*[(:]"
    r"|if __name__ ?==|@\w[\w.]*(?:\(.*)?$|exec\(|eval\(|__import__\()"
)
SHEBANG_PYTHON = re.compile(rb"^#![^\n]*python")
TIKTOKEN_LINE = re.compile(r"^[A-Za-z0-9+/]+=* \d+$")
MAX_WALK = 20_000_000
MAX_REFS = 10
CODE_WINDOW = 256 * 2**10


# --- JSON -------------------------------------------------------------------------------


def parse_json(text: str) -> object:
    """Parse JSON strictly: duplicate keys and excessive nesting raise ValueError."""
    try:
        return json.loads(text, object_pairs_hook=reject_duplicates)
    except RecursionError:
        raise ValueError("JSON is nested too deeply") from None


def remote_code_refs(document: object) -> list[str]:
    """Reasons the JSON ``document`` makes a loader run custom or cross-repository code."""
    reasons: list[str] = []
    reported: list[str] = []
    for where, value in _walk(document):
        key = where.rsplit(".", 1)[-1]
        if any(where.startswith(done) for done in reported):
            continue
        if key in REMOTE_CODE_KEYS and not isinstance(value, (int, float)):
            targets = [s for _w, s in _walk(value) if isinstance(s, str)]
            cross = [t for t in targets if CROSS_REPO.match(t)]
            text = f"{where} maps classes to custom code"
            if targets:
                text += f" ({', '.join(targets[:4])}{', ...' if len(targets) > 4 else ''})"
            if cross:
                text += f"; cross-repository reference {cross[0]!r}"
            reasons.append(text)
            reported.append(where)
        elif key == "trust_remote_code" and value is True:
            reasons.append(f"{where} is set to true")
        elif isinstance(value, str) and CROSS_REPO.match(value):
            reasons.append(f"{where} is a cross-repository code reference {value!r}")
        if len(reasons) >= MAX_REFS:
            break
    return reasons


def _walk(document: object) -> Iterator[tuple[str, object]]:
    """Yield (path, value) for every value below a parsed JSON document, e.g. ``a.b[0]``."""
    stack: list[tuple[str, object]] = [("", document)]
    seen = 0
    while stack and seen < MAX_WALK:
        where, node = stack.pop()
        if isinstance(node, dict):
            items = [(f"{where}.{k}" if where else str(k), v) for k, v in node.items()]
        elif isinstance(node, list):
            items = [(f"{where}[{i}]", v) for i, v in enumerate(node)]
        else:
            continue
        for path, value in items:
            seen += 1
            yield path, value
            if isinstance(value, (dict, list)):
                stack.append((path, value))


# --- modelward.yaml ---------------------------------------------------------------------


def check_yaml(path: str, text: str) -> list[Finding]:
    """A bundle spec parses strictly (attest._yaml) into a mapping."""
    try:
        document = load_strict_yaml(text)
    except StrictYAMLError as exc:
        return [Finding(path, "scan.yaml", f"not safe YAML: {exc}")]
    if not isinstance(document, dict):
        return [Finding(path, "scan.yaml", "bundle spec is not a YAML mapping")]
    return []


# --- sentencepiece ----------------------------------------------------------------------


class _WireError(ValueError):
    """Malformed protobuf wire format."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _WireError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """Yield (field number, wire type, payload) of one protobuf message, strictly."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise _WireError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield field, wire, value
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(buf):
                raise _WireError("truncated fixed-width field")
            yield field, wire, buf[pos : pos + width]
            pos += width
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise _WireError(f"field {field} runs past the end of its message")
            yield field, wire, buf[pos : pos + length]
            pos += length
        else:
            raise _WireError(f"unsupported wire type {wire}")


def sentencepiece_problem(data: bytes) -> str | None:
    """Why ``data`` is not a sentencepiece ModelProto, or None when it is one."""
    pieces = 0
    try:
        for field, wire, payload in _fields(data):
            if field not in range(1, 6) or wire != 2 or not isinstance(payload, bytes):
                return f"unexpected top-level field {field} (wire type {wire})"
            if field == 1:
                _check_piece(payload)
                pieces += 1
            else:
                for _ in _fields(payload):  # well-formed nested message
                    pass
    except _WireError as exc:
        return f"malformed protobuf: {exc}"
    except UnicodeDecodeError:
        return "a piece is not valid UTF-8"
    if pieces == 0:
        return "model holds no pieces"
    return None


def _check_piece(payload: bytes) -> None:
    for field, wire, value in _fields(payload):
        if field == 1 and wire == 2 and isinstance(value, bytes):
            value.decode("utf-8")
        elif (field, wire) not in {(2, 5), (3, 0)}:
            raise _WireError(f"unexpected piece field {field} (wire type {wire})")


# --- text and code ----------------------------------------------------------------------


def code_problem(prefix: bytes, text: str) -> tuple[str, str] | None:
    """(rule, reason) when text is a script or Python source, else None."""
    if prefix.startswith(b"#!"):
        line = prefix.split(b"\n", 1)[0].decode("utf-8", "replace")
        if SHEBANG_PYTHON.match(prefix):
            return "scan.python", f"Python script ({line})"
        return "scan.script", f"script with interpreter line {line!r}"
    fenced = False
    first: str | None = None
    hits = 0
    for raw in text[:CODE_WINDOW].splitlines()[:2000]:
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or not raw.strip() or raw.startswith("#"):
            continue
        matched = bool(PY_LINE.match(raw))
        if first is None:
            first = raw
            if matched:
                return "scan.python", f"Python source (starts with {raw.strip()[:60]!r})"
        hits += matched
    if hits >= 3:
        return "scan.python", f"Python source ({hits} top-level import/def/class lines)"
    return None


def text_kind(path: str, text: str) -> str:
    """A display name for admitted text."""
    name = path.rsplit("/", 1)[-1].lower()
    if name.endswith((".md", ".markdown")):
        return "markdown"
    if name.endswith((".jinja", ".jinja2", ".j2")):
        return "jinja template"
    head = text[:4096].splitlines()
    if head and head[0].startswith("#version"):
        return "bpe merges"
    if head and all(TIKTOKEN_LINE.match(line) for line in head[:-1] or head):
        return "tiktoken vocab"
    return "text"


BINARY_CONTROLS = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f]")


def has_binary_controls(text: str) -> bool:
    """True when decoded text holds NUL or other control characters a text file lacks."""
    return BINARY_CONTROLS.search(text) is not None
