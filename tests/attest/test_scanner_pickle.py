"""Pickles the scanner must see as CPython's unpicklers do (issue 15 item 1; docs/scanner.md).

One test per attack. Each attack is first shown to be live: a real loader (``pickle.load``,
``torch.load``, ``numpy.load``, ``gzip`` + ``pickle``) runs its payload, which opens a canary
file or calls ``os.getcwd``; then the scanner must refuse it and never run it.
"""

from __future__ import annotations

import _pickle
import contextlib
import gzip
import io
import json
import pickle
import pickletools
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from modelward.attest.scanner import ScanLimits, ScanReport, scan_blob, scan_tree
from modelward.attest.scanner._pickle import judge_pickle_bytes
from tests.attest.corpus import (
    canary_gzip_corrupt_tail,
    canary_pickle,
    canary_pickle_frame_split,
    canary_pickle_p0_hex,
    canary_pickle_then_npz,
    npy_with_descr,
    safetensors_bytes,
)

# The input the red team found, with a harmless payload: os.getcwd().
GETCWD_HEX = b"cos\ngetcwd\n(I0x0\n0tR."
CWD = str(Path.cwd())
PICKLE_RULES = {"scan.pickle", "scan.joblib"}


def _rules(data: bytes, name: str = "blob.dat", limits: ScanLimits = ScanLimits()) -> set[str]:
    return {f.rule for f in scan_blob(name, io.BytesIO(data), len(data), limits).findings}


def _reason(data: bytes, name: str = "blob.dat") -> str:
    return " | ".join(f.reason for f in scan_blob(name, io.BytesIO(data), len(data)).findings)


class _Refused(Exception):
    pass


class _RefusingUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    def find_class(self, module: str, name: str) -> object:
        raise _Refused(f"{module}.{name}")


def test_protocol0_pickle_the_opcode_walk_rejects_is_still_found() -> None:
    assert pickle.loads(GETCWD_HEX) == CWD  # _pickle runs it
    assert pickle._loads(GETCWD_HEX) == CWD  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="invalid literal"):
        list(pickletools.genops(GETCWD_HEX))  # what the old walk used: base 10
    for name in ("notes.txt", "vocab.txt", "blob.dat"):
        assert _rules(GETCWD_HEX, name) == {"scan.pickle"}
    assert "importing os.getcwd" in _reason(GETCWD_HEX)


def test_printable_pickle_named_pytorch_model_bin_is_not_text(tmp_path: Path) -> None:
    import torch

    canary = tmp_path / "canary"
    data = canary_pickle_p0_hex(canary)
    data.decode("ascii")  # printable: the old scanner admitted it as text
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for name in ("pytorch_model.bin", "training_args.bin"):
        (bundle / name).write_bytes(data)
    report = scan_tree(bundle)
    assert {(f.path, f.rule) for f in report.findings} == {
        ("pytorch_model.bin", "scan.pickle"),
        ("training_args.bin", "scan.pickle"),
    }
    assert all(r.kind == "pickle" for r in report.files)
    assert not canary.exists()
    with pytest.raises(RuntimeError, match="magic number"):  # after running the payload
        torch.load(bundle / "pytorch_model.bin", weights_only=False)
    assert canary.exists()


def test_integer_spelling_only_the_c_unpickler_reads_is_found() -> None:
    data = b"cos\ngetcwd\n(I010\n0tR."  # strtol: octal 8; int(b"010", 0) refuses
    assert _pickle.loads(data) == CWD
    with pytest.raises(ValueError):
        pickle._loads(data)  # type: ignore[attr-defined]
    assert _rules(data, "notes.txt") == {"scan.pickle"}


def test_float_spelling_only_the_python_unpickler_reads_is_found() -> None:
    """joblib unpickles with pickle.py; ``float(b"1_0")`` is 10.0 there, an error in C."""
    data = b"cos\ngetcwd\n(F1_0\n0tR."
    assert pickle._loads(data) == CWD  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        _pickle.loads(data)
    assert _rules(data, "notes.txt") == {"scan.pickle"}


def test_frame_the_unpicklers_read_three_ways_is_a_pickle(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    data = canary_pickle_frame_split(canary)
    for load in (_pickle.loads, pickle._loads):  # type: ignore[attr-defined]
        with pytest.raises((pickle.UnpicklingError, ValueError)):
            load(data)
    assert not canary.exists()
    assert _rules(data, "extra/state.dat", ScanLimits(allow_globs=("extra/*",))) == {"scan.pickle"}
    assert "FRAME" in _reason(data)
    pickle.load(io.BytesIO(data)).close()  # what torch does with a zip's data.pkl
    assert canary.exists()


def test_compressed_pickle_with_a_corrupt_tail_is_found(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    data = canary_gzip_corrupt_tail(canary)
    assert _rules(data, "extra/opt.gz", ScanLimits(allow_globs=("extra/*",))) == {"scan.pickle"}
    assert not canary.exists()
    (tmp_path / "opt.gz").write_bytes(data)
    with gzip.open(tmp_path / "opt.gz") as stream:
        pickle.load(stream).close()
    assert canary.exists()


@pytest.mark.parametrize(
    "descr", ["object", "object_", "O8", "=O", [("a", "<f4"), ("b", "object")]]
)
def test_numpy_object_dtype_in_any_spelling_is_found(tmp_path: Path, descr: object) -> None:
    canary = tmp_path / "canary"
    data = npy_with_descr(descr, canary_pickle(canary, 2))
    assert _rules(data, "emb/table.npy", ScanLimits(allow_globs=("emb/*",))) == {
        "scan.numpy-object"
    }
    (tmp_path / "a.npy").write_bytes(data)
    with contextlib.suppress(ValueError, TypeError):  # the payload ran before numpy looked
        np.load(tmp_path / "a.npy", allow_pickle=True)
    assert canary.exists()


def test_numeric_npy_stays_unknown() -> None:
    for descr in ("<f4", "|b1", "<U5", "|S3", "<M8[ns]", [("a", "<f4"), ("b", "<i8", (2,))]):
        assert _rules(npy_with_descr(descr, b"\0" * 16), "a.npy") == {"scan.unknown"}, descr


def test_pickle_with_a_zip_appended_is_a_pickle(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    data = canary_pickle_then_npz(canary)
    assert "scan.pickle" in _rules(data, "x.npz", ScanLimits(allow_globs=("*",)))
    assert not canary.exists()
    pickle.load(io.BytesIO(data)).close()
    assert canary.exists()


ST = safetensors_bytes({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, 4)


@pytest.mark.parametrize(
    "name",
    [
        "pytorch_model.bin",
        "training_args.bin",
        "optimizer.pt",
        "rng_state.pth",
        "last.ckpt",
        "model.pkl",
        "emb.npy",
        "model.joblib",
        "sub/checkpoint.pth.tar",
    ],
)
@pytest.mark.parametrize("content", [b"hello world\n", b'{"a": 1}', ST])
def test_allow_listed_content_under_a_pickle_loaded_name_is_refused(
    name: str, content: bytes
) -> None:
    report = scan_blob(name, io.BytesIO(content), len(content))
    assert [f.rule for f in report.findings] == ["scan.pickle"], report
    assert "unpickle" in report.findings[0].reason
    # the same content under its own name is admitted
    own = (
        "notes.txt"
        if content.endswith(b"\n")
        else "a.json"
        if content[:1] == b"{"
        else "model.safetensors"
    )
    assert scan_blob(own, io.BytesIO(content), len(content)).findings == ()


def test_empty_file_under_a_pickle_loaded_name_is_admitted() -> None:
    assert scan_blob("training_args.bin", io.BytesIO(b""), 0).findings == ()


def test_persistent_id_then_a_call_is_a_pickle() -> None:
    data = b"Pstorage\n)R."  # calls whatever the loader's persistent_load returned
    assert _rules(data, "notes.txt") == {"scan.pickle"}
    assert "persistent_load" in _reason(data)


def test_text_the_unpickler_reads_as_an_import_is_a_pickle() -> None:
    """``pickle.load`` of a file starting ``cat\\ndog\\n`` imports a module named ``at``."""
    with pytest.raises(_Refused, match=r"at\.dog"):
        _RefusingUnpickler(io.BytesIO(b"cat\ndog\n")).load()
    assert _rules(b"cat\ndog\n", "vocab.txt") == {"scan.pickle"}


@pytest.mark.parametrize(
    "text",
    [
        b"[PAD]\n[unused0]\n[UNK]\n",
        b"#version: 0.2\n\xc4\xa0 t\n",
        b"Note that this is text.\n",
        b"Victor\nPaul\n",
        b"Model card\n",
        b"N",
        b"(c) 2024\n",
        b"---\nlicense: mit\n---\n",
        b"a" * 1000,
        b"Please read\nthe docs\n",
        b"call me\nmaybe\n",
        b"cos\r\nsystem\r\n",
    ],
)
def test_ordinary_text_stays_text(text: bytes) -> None:
    report = scan_blob("notes.txt", io.BytesIO(text), len(text))
    assert report.findings == (), report


def test_valid_safetensors_that_is_also_a_complete_pickle_stays_safetensors() -> None:
    """A header length of 0x2e4e bytes starts the file with ``N.``: a pickle of None. It
    imports and calls nothing, so only a name pickle loaders read refuses it."""
    header = {"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}
    raw = json.dumps(header).encode()
    data = struct.pack("<Q", 0x2E4E) + raw + b" " * (0x2E4E - len(raw)) + b"\0" * 4
    assert pickle.loads(data) is None
    report = scan_blob("model.safetensors", io.BytesIO(data), len(data))
    assert (report.kind, report.findings) == ("safetensors", ())
    assert _rules(data, "pytorch_model.bin") == {"scan.pickle"}


def _nested_tuple_key(depth: int) -> bytes:
    """{T: None} where T nests ``depth`` tuples of 4 shared references: 4**depth to hash."""
    body = b"K\x01q\x000"
    for level in range(depth):
        body += b"(" + (b"h" + bytes([level])) * 4 + b"tq" + bytes([level + 1])
        body += b"0" if level < depth - 1 else b""
    return b"}" + body + b"Ns."


@pytest.mark.parametrize(
    "data",
    [
        _nested_tuple_key(20),  # hours to hash in either unpickler
        b"Np20000000\n0N.",  # _pickle allocates a 160 MB memo for these 15 bytes
        b"\x96" + struct.pack("<Q", 2**40) + b"x.",  # pickle.py allocates a 1 TiB bytearray
    ],
    ids=["tuple-hash", "memo-index", "bytearray8"],
)
def test_what_stalls_the_real_unpicklers_does_not_stall_the_scanner(data: bytes) -> None:
    start = time.monotonic()
    judge_pickle_bytes(data, cut="", max_bytes=2**20, max_ops=10_000)
    scan_blob("blob.dat", io.BytesIO(data), len(data))
    assert time.monotonic() - start < 5


def test_stream_still_unpickling_at_max_pickle_ops_is_refused() -> None:
    data = b"(" + b"N" * 5000 + b"t."
    limited = scan_blob("notes.txt", io.BytesIO(data), len(data), ScanLimits(max_pickle_ops=100))
    assert [f.rule for f in limited.findings] == ["scan.pickle"]
    assert "100 opcodes (max_pickle_ops)" in limited.findings[0].reason
    assert "STOP" in _reason(data)


def test_scanning_the_attacks_runs_none_of_them(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    for data in (
        canary_pickle_p0_hex(canary),
        canary_pickle_frame_split(canary),
        canary_gzip_corrupt_tail(canary),
        canary_pickle_then_npz(canary),
    ):
        report: ScanReport = scan_tree(_bundle(tmp_path, data))
        assert report.findings
    assert not canary.exists()


def _bundle(tmp_path: Path, data: bytes) -> Path:
    root = tmp_path / f"b{len(list(tmp_path.iterdir()))}"
    root.mkdir()
    (root / "weights.dat").write_bytes(data)
    return root
