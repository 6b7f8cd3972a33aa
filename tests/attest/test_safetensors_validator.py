"""The strict safetensors validator: one test per attack, and property tests (hypothesis)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from modelward.attest.scanner import FileReport, ScanLimits, scan_blob, scan_tree
from tests.attest.corpus import safetensors_bytes

DTYPES = [
    "BOOL",
    "F4",
    "F6_E2M3",
    "F6_E3M2",
    "U8",
    "I8",
    "F8_E5M2",
    "F8_E4M3",
    "F8_E8M0",
    "F8_E4M3FNUZ",
    "F8_E5M2FNUZ",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "C64",
    "F64",
    "I64",
    "U64",
]
BITS = {
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
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


def scan(
    data: bytes, name: str = "model.safetensors", limits: ScanLimits = ScanLimits()
) -> FileReport:
    return scan_blob(name, io.BytesIO(data), len(data), limits)


def reasons(data: bytes) -> str:
    report = scan(data)
    assert report.findings, report
    assert {f.rule for f in report.findings} == {"scan.safetensors"}, report
    return " | ".join(f.reason for f in report.findings)


def test_numpy_written_file_passes(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_file(
        {
            "a": np.zeros((3, 5), np.float32),
            "b": np.arange(7, dtype=np.int64),
            "c": np.zeros((0, 4), np.float16),
        },
        str(path),
        metadata={"format": "np"},
    )
    data = path.read_bytes()
    report = scan(data)
    assert report.kind == "safetensors"
    assert report.findings == ()


def test_every_dtype_the_format_defines_passes() -> None:
    header: dict[str, object] = {}
    offset = 0
    for i, dtype in enumerate(DTYPES):
        size = 8 * BITS.get(dtype, 8) // 8  # 8 elements: whole bytes for every width
        header[f"t{i}"] = {"dtype": dtype, "shape": [2, 4], "data_offsets": [offset, offset + size]}
        offset += size
    data = safetensors_bytes(header, offset)
    assert scan(data).findings == ()
    # the library agrees
    safetensors.deserialize(data)  # type: ignore[no-untyped-call]


def test_header_length_bomb() -> None:
    assert "header length 1152921504606846976 exceeds the limit" in reasons(
        struct.pack("<Q", 2**60) + b"{}"
    )


def test_header_longer_than_the_file() -> None:
    assert "exceeds the 10 bytes after the length field" in reasons(
        struct.pack("<Q", 1000) + b"{}" + b" " * 8
    )


def test_header_over_a_custom_limit() -> None:
    data = safetensors_bytes({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, 1)
    report = scan(data, limits=ScanLimits(max_safetensors_header=16))
    assert "limit of 16 bytes" in report.findings[0].reason


def test_header_not_utf8() -> None:
    assert "not valid UTF-8" in reasons(struct.pack("<Q", 4) + b"{\xff}}")


def test_header_not_an_object() -> None:
    assert "does not start with '{'" in reasons(struct.pack("<Q", 2) + b"[]")


def test_duplicate_tensor_names() -> None:
    raw = (
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    )
    assert "duplicate key 'a'" in reasons(struct.pack("<Q", len(raw)) + raw + b"\0")


def test_deeply_nested_header() -> None:
    raw = b"{" + b'"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert "nested too deeply" in reasons(struct.pack("<Q", len(raw)) + raw)


@pytest.mark.parametrize(
    ("entry", "data_len", "words"),
    [
        ({"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}, 1, "unknown dtype 'Q8'"),
        ({"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}, 1, "not a list of non-negative"),
        ({"dtype": "U8", "shape": [True], "data_offsets": [0, 1]}, 1, "not a list of non-negative"),
        ({"dtype": "U8", "shape": [1.0], "data_offsets": [0, 1]}, 1, "not a list of non-negative"),
        ({"dtype": "U8", "shape": [1], "data_offsets": [0]}, 1, "not two non-negative"),
        ({"dtype": "U8", "shape": [1], "data_offsets": [1, 0]}, 1, "end before they begin"),
        ({"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1}, 1, "unexpected ['x']"),
        ({"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}, 2, "not a whole number of bytes"),
        ({"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 4]}, 4, "needs more than"),
        ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}, 16, "needs 24 bytes"),
    ],
)
def test_bad_tensor_entry(entry: dict[str, object], data_len: int, words: str) -> None:
    assert words in reasons(safetensors_bytes({"w": entry}, data_len))


def test_overlapping_offsets_name_both_tensors() -> None:
    text = reasons(
        safetensors_bytes(
            {
                "w": {"dtype": "U8", "shape": [10], "data_offsets": [0, 10]},
                "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]},
            },
            12,
        )
    )
    assert "tensor 'b': data_offsets [4, 12] overlap tensor 'w' [0, 10]" in text


def test_out_of_range_offsets() -> None:
    assert "run past the data section (8 bytes)" in reasons(
        safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 8)
    )


def test_gap_between_tensors() -> None:
    assert "bytes [4, 8) belong to no tensor" in reasons(
        safetensors_bytes(
            {
                "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
            },
            12,
        )
    )


def test_trailing_bytes_after_the_last_tensor() -> None:
    assert "4 trailing bytes" in reasons(
        safetensors_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, 8)
    )


def test_metadata_must_map_strings_to_strings() -> None:
    assert "__metadata__['n'] is a int" in reasons(
        safetensors_bytes(
            {"__metadata__": {"n": 1}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
            1,
        )
    )


def test_nan_in_header_is_rejected() -> None:
    raw = b'{"__metadata__": {"a": NaN}}'
    assert "non-standard JSON constant NaN" in reasons(struct.pack("<Q", len(raw)) + raw)


def test_huge_sparse_file_is_checked_by_header_alone(tmp_path: Path) -> None:
    """A 128 GiB tensor: only the header is read, the data section checked by size."""
    size = 2**37
    root = tmp_path / "bundle"
    root.mkdir()
    head = safetensors_bytes({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}, 0)
    path = root / "model.safetensors"
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(len(head) + size)
    report = scan_tree(root)
    assert report.findings == ()
    with path.open("r+b") as handle:  # one byte short: the data section no longer matches
        handle.truncate(len(head) + size - 1)
    report = scan_tree(root)
    assert "run past the data section" in report.findings[0].reason
    path.unlink()


# --- property tests ----------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**66), 2**66),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
tensor_entries = st.fixed_dictionaries(
    {
        "dtype": st.one_of(st.sampled_from(DTYPES), st.text(max_size=5)),
        "shape": st.lists(st.integers(-2, 2**33), max_size=4),
        "data_offsets": st.lists(st.integers(-1, 80), min_size=1, max_size=3),
    }
)
headers = st.dictionaries(st.text(max_size=6), st.one_of(tensor_entries, json_values), max_size=6)


def _assert_scan_is_total(data: bytes) -> None:
    report = scan(data)
    assert all(f.rule.startswith(("scan.", "tree.")) for f in report.findings)
    if report.kind == "safetensors" and not report.findings:
        # what we admit, the library accepts
        safetensors.deserialize(data)  # type: ignore[no-untyped-call]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_random_bytes_never_crash(data: bytes) -> None:
    _assert_scan_is_total(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers, st.integers(0, 96), st.one_of(st.none(), st.integers(0, 2**64 - 1)))
def test_random_headers_never_crash(
    header: dict[str, object], data_len: int, length: int | None
) -> None:
    raw = json.dumps(header).encode()
    _assert_scan_is_total(
        safetensors_bytes(header, data_len, length=length)
        if length is None or length > len(raw)
        else struct.pack("<Q", length) + raw + b"\0" * data_len
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 5), max_size=3)), max_size=6
    )
)
def test_valid_layouts_pass_and_the_library_agrees(tensors: list[tuple[str, list[int]]]) -> None:
    header: dict[str, object] = {}
    offset = 0
    for i, (dtype, shape) in enumerate(tensors):
        count = int(np.prod(shape)) if shape else 1
        nbits = count * BITS.get(dtype, 8)
        if nbits % 8:
            shape, nbits = [*shape, 8], nbits * 8
        header[f"t{i}"] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + nbits // 8],
        }
        offset += nbits // 8
    data = safetensors_bytes(header, offset)
    assert scan(data).findings == ()
    safetensors.deserialize(data)  # type: ignore[no-untyped-call]
