"""A valid safetensors file is judged by its header, not by guessing at its tensor bytes
(issue 30, item 8).

The false positive: a header length whose low byte is ``p`` (PUT, a line argument) makes the
pickle reading run from the length field through the header into U8 tensor data made of
repeated hash bytes (no newline), still "unpickling" after 64 MiB: refused as "content is
pickle". In a file named ``.safetensors`` whose header proves it, the walk now ends where the
tensor data begins. Every real pickle stays refused: under a name pickle loaders read, under
a name that does not promise safetensors, and with bytes no tensor accounts for.
"""

from __future__ import annotations

import hashlib
import io
import struct

import numpy as np
from safetensors.numpy import save

from modelward.attest.scanner import scan_blob


class _Counting(io.BytesIO):
    """Counts the bytes the scanner reads."""

    read_bytes = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.read_bytes += len(data)
        return data


def _hash_bytes_safetensors(size: int = 70 * 2**20) -> bytes:
    """A valid safetensors file: one U8 tensor of repeated sha256 bytes (no newline), its
    header padded until the length field starts with ``p`` (pickle's PUT, a line)."""
    digest = bytes(b for b in hashlib.sha256(b"weights").digest() if b != 0x0A)
    tensor = np.frombuffer((digest * (size // len(digest) + 1))[:size], dtype=np.uint8)
    for pad in range(512):
        blob = save({"w": tensor}, metadata={"pad": "x" * pad})
        if blob[:1] == b"p":
            return blob
    raise AssertionError("no padding makes the header length start with 'p'")


def test_repeated_hash_bytes_in_a_u8_tensor_are_not_a_pickle() -> None:
    blob = _hash_bytes_safetensors()
    stream = _Counting(blob)
    report = scan_blob("model.safetensors", stream, len(blob))
    assert (report.kind, report.findings) == ("safetensors", ())
    # the walk is bounded by the header: the 70 MiB of tensor data are not read
    assert stream.read_bytes < 2**20, stream.read_bytes


def test_the_same_bytes_under_a_name_pickle_loaders_read_are_refused() -> None:
    blob = _hash_bytes_safetensors()
    report = scan_blob("pytorch_model.bin", io.BytesIO(blob), len(blob))
    assert "scan.pickle" in {f.rule for f in report.findings}, report


def test_the_same_bytes_under_a_name_that_promises_no_safetensors_are_walked_whole() -> None:
    """Only a ``.safetensors`` name (read by the safetensors library, never an unpickler)
    lets the header stand for the data; elsewhere an undecided walk is still refused."""
    blob = _hash_bytes_safetensors()
    report = scan_blob("weights.dat", io.BytesIO(blob), len(blob))
    assert report.kind == "pickle", report
    assert "max_pickle_walk" in report.findings[0].reason


def test_a_pickle_in_bytes_no_tensor_accounts_for_is_still_refused() -> None:
    """Bytes after the tensor data: the header does not prove the file, so the pickle
    reading runs over every byte, as before."""
    blob = _hash_bytes_safetensors(4 * 2**20)
    payload = b"cos\nsystem\n(S'true'\ntR."
    data = blob + b"\n" + payload
    report = scan_blob("model.safetensors", io.BytesIO(data), len(data))
    rules = {f.rule for f in report.findings}
    assert "scan.safetensors" in rules, report


def test_an_import_right_after_the_header_is_refused_unless_the_header_proves_it() -> None:
    """A header that claims less data than the file holds, with a pickle after the
    declared tensor: refused (trailing bytes), never admitted by the bounded walk."""
    header = b'{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}'
    payload = b"\ncos\nsystem\n(S'true'\ntR."
    data = struct.pack("<Q", len(header)) + header + b"abcd" + payload
    report = scan_blob("model.safetensors", io.BytesIO(data), len(data))
    assert report.findings, report
