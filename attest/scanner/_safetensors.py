"""Strict, bounded validation of a safetensors file (docs/scanner.md#safetensors).

Only the 8-byte length and the JSON header are read; the data section is checked by size
alone, so a 100 GB file costs one header read. The checks, in order:

1. the file holds the 8-byte little-endian header length;
2. the length is at most ``ScanLimits.max_safetensors_header`` and fits in the file;
3. the header is UTF-8, starts with ``{`` and is one JSON object without duplicate keys;
4. ``__metadata__``, when present, maps strings to strings;
5. each tensor entry has exactly ``dtype``, ``shape`` and ``data_offsets``; the dtype is one
   the safetensors format defines; shape entries are non-negative integers; the offsets are
   two integers ``begin <= end`` inside the data section; the element count times the dtype
   width is a whole number of bytes equal to ``end - begin``;
6. sorted by offset, the tensors cover the data section exactly: no overlap, no gap, nothing
   after the last tensor.
"""

from __future__ import annotations

import json
from typing import BinaryIO

from modelward.attest._json import reject_duplicates
from modelward.attest.scanner._io import read_at
from modelward.attest.scanner._model import Finding, ScanLimits

RULE = "scan.safetensors"
MAX_FINDINGS = 20

# Width in bits of one element of every dtype the safetensors format (0.8) defines.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
TENSOR_KEYS = frozenset({"dtype", "shape", "data_offsets"})
U64_MAX = 2**64 - 1


class _HeaderError(ValueError):
    """The header cannot be validated further; the message is the reason."""


def check_safetensors(path: str, stream: BinaryIO, size: int, limits: ScanLimits) -> list[Finding]:
    """Validate the safetensors file in ``stream`` (``size`` bytes); return every finding."""
    reasons: list[str] = []
    try:
        header = _read_header(stream, size, limits)
        data_len = size - 8 - header[1]
        tensors = _check_entries(header[0], data_len, reasons)
        _check_coverage(tensors, data_len, reasons)
    except _HeaderError as exc:
        reasons.append(str(exc))
    findings = [Finding(path, RULE, reason) for reason in reasons[:MAX_FINDINGS]]
    if len(reasons) > MAX_FINDINGS:
        findings.append(Finding(path, RULE, f"... and {len(reasons) - MAX_FINDINGS} more"))
    return findings


def _read_header(stream: BinaryIO, size: int, limits: ScanLimits) -> tuple[dict[str, object], int]:
    # (1): the 8-byte header length
    if size < 8:
        raise _HeaderError(
            f"file is {size} bytes; a safetensors file starts with an 8-byte header length"
        )
    length = int.from_bytes(read_at(stream, 0, 8), "little")
    # (2): bounded by the limit and by the file
    if length > limits.max_safetensors_header:
        raise _HeaderError(
            f"header length {length} exceeds the limit of {limits.max_safetensors_header} bytes"
        )
    if length > size - 8:
        raise _HeaderError(
            f"header length {length} exceeds the {size - 8} bytes after the length field"
        )
    if length < 2:
        raise _HeaderError(f"header length {length} is too small to hold a JSON object")
    raw = read_at(stream, 8, length)
    if len(raw) != length:
        raise _HeaderError(f"file ended after {len(raw)} of {length} header bytes")
    # (3): UTF-8 JSON object, no duplicate keys, no NaN/Infinity
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _HeaderError(f"header is not valid UTF-8 (byte {exc.start})") from None
    if not text.startswith("{"):
        raise _HeaderError("header does not start with '{'")
    try:
        parsed = json.loads(
            text, object_pairs_hook=reject_duplicates, parse_constant=_reject_constant
        )
    except RecursionError:
        raise _HeaderError("header JSON is nested too deeply") from None
    except ValueError as exc:
        raise _HeaderError(f"header is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise _HeaderError("header is not a JSON object")
    return parsed, length


def _reject_constant(name: str) -> object:
    raise ValueError(f"non-standard JSON constant {name}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_entries(
    header: dict[str, object], data_len: int, reasons: list[str]
) -> list[tuple[int, int, str]]:
    """Check every entry; return ``(begin, end, name)`` of tensors with usable offsets."""
    tensors: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        # (4): __metadata__ maps strings to strings
        if name == "__metadata__":
            if not isinstance(entry, dict):
                reasons.append("__metadata__ is not an object")
                continue
            for key, value in entry.items():
                if not isinstance(value, str):
                    reasons.append(
                        f"__metadata__[{key!r}] is a {type(value).__name__}, not a string"
                    )
            continue
        # (5): one tensor entry
        where = f"tensor {name!r}"
        if not isinstance(entry, dict):
            reasons.append(f"{where}: entry is not an object")
            continue
        keys = set(entry)
        if keys != TENSOR_KEYS:
            missing = sorted(TENSOR_KEYS - keys)
            extra = sorted(keys - TENSOR_KEYS)
            reasons.append(
                f"{where}: entry must hold exactly dtype, shape and data_offsets"
                f" (missing {missing}, unexpected {extra})"
            )
            continue
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        bits = DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
        if bits is None:
            reasons.append(f"{where}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_int(d) and 0 <= d <= U64_MAX for d in shape):
            reasons.append(f"{where}: shape {shape!r} is not a list of non-negative integers")
            shape = None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_int(o) and 0 <= o <= U64_MAX for o in offsets)
        ):
            reasons.append(f"{where}: data_offsets {offsets!r} is not two non-negative integers")
            continue
        begin, end = offsets
        if begin > end:
            reasons.append(f"{where}: data_offsets [{begin}, {end}] end before they begin")
            continue
        if end > data_len:
            reasons.append(
                f"{where}: data_offsets [{begin}, {end}] run past the data "
                f"section ({data_len} bytes)"
            )
            continue
        tensors.append((begin, end, name))
        if bits is None or shape is None:
            continue
        count = _elements(shape, cap=(end - begin) * 8)
        if count is None:
            reasons.append(
                f"{where}: shape {shape} of {dtype} needs more than the "
                f"{end - begin} bytes data_offsets [{begin}, {end}] hold"
            )
            continue
        nbits = count * bits
        if nbits % 8:
            reasons.append(
                f"{where}: shape {shape} of {dtype} is {nbits} bits, not a whole number of bytes"
            )
        elif nbits // 8 != end - begin:
            reasons.append(
                f"{where}: shape {shape} of {dtype} needs {nbits // 8} bytes "
                f"but data_offsets [{begin}, {end}] hold {end - begin}"
            )
    return tensors


def _elements(shape: list[int], cap: int) -> int | None:
    """The element count of ``shape``, or None above ``cap`` (no huge products)."""
    if 0 in shape:
        return 0
    count = 1
    for dim in shape:
        count *= dim
        if count > cap:
            return None
    return count


def _check_coverage(tensors: list[tuple[int, int, str]], data_len: int, reasons: list[str]) -> None:
    # (6): sorted by offset, the tensors tile the data section exactly
    cursor = 0
    last: tuple[int, int, str] | None = None
    for begin, end, name in sorted(tensors):
        if begin < cursor and last is not None:
            reasons.append(
                f"tensor {name!r}: data_offsets [{begin}, {end}] overlap tensor "
                f"{last[2]!r} [{last[0]}, {last[1]}]"
            )
        elif begin > cursor:
            reasons.append(
                f"data section bytes [{cursor}, {begin}) belong to no tensor "
                f"(gap before tensor {name!r})"
            )
        if end >= cursor:
            cursor = end
            last = (begin, end, name)
    if cursor < data_len:
        reasons.append(
            f"data section is {data_len} bytes but the tensors end at {cursor}: "
            f"{data_len - cursor} trailing bytes belong to no tensor"
        )
