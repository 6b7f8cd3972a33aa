"""Magic bytes of the formats the scanner must recognize to reject (docs/scanner.md#rules)."""

from __future__ import annotations

import ast
import bz2
import lzma
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from modelward.attest.scanner._io import read_at

NATIVE_MAGICS: tuple[tuple[bytes, str], ...] = (
    (b"\x7fELF", "ELF executable or shared object"),
    (b"\xfe\xed\xfa\xce", "Mach-O binary (32-bit)"),
    (b"\xce\xfa\xed\xfe", "Mach-O binary (32-bit, little-endian)"),
    (b"\xfe\xed\xfa\xcf", "Mach-O binary (64-bit)"),
    (b"\xcf\xfa\xed\xfe", "Mach-O binary (64-bit, little-endian)"),
    (b"\xca\xfe\xba\xbe", "Mach-O universal binary or Java class file"),
    (b"\xbe\xba\xfe\xca", "Mach-O universal binary (little-endian)"),
    (b"\xca\xfe\xba\xbf", "Mach-O universal binary (64-bit)"),
    (b"\xbf\xba\xfe\xca", "Mach-O universal binary (64-bit, little-endian)"),
    (b"\x00asm", "WebAssembly module"),
)
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
NPY_MAGIC = b"\x93NUMPY"
MAX_NPY_HEADER = 64 * 2**10


def native_kind(prefix: bytes) -> str | None:
    """Name the native-code format ``prefix`` starts with, or None."""
    for magic, name in NATIVE_MAGICS:
        if prefix.startswith(magic):
            return name
    if prefix.startswith(b"MZ"):
        if len(prefix) >= 64:
            pe_at = int.from_bytes(prefix[60:64], "little")
            if prefix[pe_at : pe_at + 4] == b"PE\x00\x00":
                return "PE executable or DLL"
        return "DOS/PE executable (MZ header)"
    return None


def is_bytecode(prefix: bytes) -> bool:
    """True for a CPython .pyc: a 2-byte version magic followed by ``\\r\\n``."""
    if len(prefix) < 8 or prefix[2:4] != b"\r\n":
        return False
    magic = int.from_bytes(prefix[:2], "little")
    return 2900 <= magic <= 4999 or 50823 <= magic <= 62211  # CPython 3.x, 2.0-2.7


def hdf5_offset(stream: BinaryIO, size: int) -> int | None:
    """Offset of an HDF5 superblock signature (0, 512, 1024, ... doubling), or None."""
    offset = 0
    while offset + 8 <= size:
        if read_at(stream, offset, 8) == HDF5_MAGIC:
            return offset
        offset = 512 if offset == 0 else offset * 2
    return None


def npy_descr(prefix: bytes) -> object:
    """The ``descr`` of a ``.npy`` header in ``prefix``; raises ValueError when malformed."""
    if not prefix.startswith(NPY_MAGIC) or len(prefix) < 10:
        raise ValueError("not a .npy header")
    major = prefix[6]
    if major == 1:
        length, start = int.from_bytes(prefix[8:10], "little"), 10
    elif major in (2, 3):
        length, start = int.from_bytes(prefix[8:12], "little"), 12
    else:
        raise ValueError(f"unknown .npy format version {major}")
    if length > MAX_NPY_HEADER or start + length > len(prefix):
        raise ValueError(f".npy header of {length} bytes is longer than we read")
    text = prefix[start : start + length].decode("latin-1")
    try:
        header = ast.literal_eval(text)  # literals only: no names, no calls
    except (ValueError, SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f".npy header is not a Python literal: {exc}") from None
    if not isinstance(header, dict) or "descr" not in header:
        raise ValueError(".npy header has no 'descr'")
    return header["descr"]


def descr_has_object(descr: object) -> bool:
    """True unless ``descr`` is a numeric numpy dtype description (string or structured list).

    An allow-list: numpy's own parser (``numpy.dtype``) reads more spellings of an object
    dtype than ``|O`` (``'object'``, ``'O8'``, ...), so anything but a plain number, bool,
    string or datetime type counts as one that may hold objects (pickles).
    """
    return not _numeric_descr(descr, 0)


NUMERIC_DESCR = re.compile(
    r"[<>|=]?(?:[?bBhHiIlLqQpPefdgFDG]|[biufc]\d+|[SUVa]\d+"
    r"|[Mm]8(?:\[\w+\])?)"
)


def _numeric_descr(descr: object, depth: int) -> bool:
    if depth > 32:
        return False
    if isinstance(descr, str):
        return NUMERIC_DESCR.fullmatch(descr) is not None
    if isinstance(descr, tuple) and len(descr) == 2:  # a subarray: (base, shape)
        return _numeric_descr(descr[0], depth + 1)
    if isinstance(descr, list) and descr:  # structured: [(name, descr[, shape]), ...]
        return all(
            isinstance(field, (tuple, list))
            and len(field) in (2, 3)
            and _numeric_descr(field[1], depth + 1)
            for field in descr
        )
    return False


class _Decompressor(Protocol):
    def decompress(self, data: bytes, max_length: int = ..., /) -> bytes: ...

    @property
    def eof(self) -> bool: ...


def _gzip() -> _Decompressor:
    return zlib.decompressobj(zlib.MAX_WBITS | 16)


def _xz() -> _Decompressor:
    return lzma.LZMADecompressor()


COMPRESSED: tuple[tuple[bytes, str, Callable[[], _Decompressor] | None], ...] = (
    (b"\x1f\x8b", "gzip", _gzip),
    (b"BZh", "bzip2", bz2.BZ2Decompressor),
    (b"\xfd7zXZ\x00", "xz", _xz),
    (b"\x5d\x00\x00", "lzma", _xz),
    (b"ZF0x", "joblib zlib", zlib.decompressobj),
    (b"\x04\x22\x4d\x18", "lz4", None),
    (b"\x28\xb5\x2f\xfd", "zstandard", None),
    (b"7z\xbc\xaf\x27\x1c", "7-zip", None),
    (b"Rar!\x1a\x07", "rar", None),
)
INFLATE_STEP = 1024


@dataclass(frozen=True)
class Inflated:
    """The first bytes a compressed stream decompresses to; ``cut`` says why they may be
    only a prefix of it ("" when the stream ended inside the bytes read, nothing after it)."""

    method: str
    data: bytes
    cut: str


def compressed_kind(prefix: bytes, limit: int, *, whole: bool) -> Inflated | None:
    """Name the compression ``prefix`` starts with and up to ``limit`` decompressed bytes;
    ``whole``: ``prefix`` is all of the data (else more follows)."""
    for magic, name, make in COMPRESSED:
        if prefix.startswith(magic):
            body = prefix
            if name == "joblib zlib":  # joblib's ZF header, then a zlib stream
                at = prefix.find(b"\x78", 0, 32)
                body = prefix[at:] if at >= 0 else b""
            return _inflate(name, make, body, limit, whole=whole)
    if len(prefix) >= 2 and prefix[0] == 0x78 and (prefix[0] * 256 + prefix[1]) % 31 == 0:
        inflated = _inflate("zlib", zlib.decompressobj, prefix, limit, whole=whole)
        if inflated.data:
            return inflated
    return None


def _inflate(
    method: str, make: Callable[[], _Decompressor] | None, data: bytes, limit: int, *, whole: bool
) -> Inflated:
    """Decompress ``data`` in small steps, keeping what came out before any error: a
    streaming reader (gzip.open, joblib) hands those bytes to the unpickler before it
    reaches the corrupt part."""
    if make is None or not data:
        return Inflated(method, b"", cut="not decompressed")
    decompressor = make()
    out = bytearray()
    for start in range(0, len(data), INFLATE_STEP):
        pending = getattr(decompressor, "unconsumed_tail", b"") + data[start : start + INFLATE_STEP]
        try:
            out += decompressor.decompress(pending, limit - len(out))
        except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
            return Inflated(method, bytes(out), cut="")  # a reader fails here too: the end
        if len(out) >= limit:
            return Inflated(method, bytes(out), cut="probe_bytes decompressed")
        if decompressor.eof:
            # a second member (gzip, bz2, xz readers go on into it) is more data
            more = (
                not whole
                or bool(getattr(decompressor, "unused_data", b""))
                or start + INFLATE_STEP < len(data)
            )
            return Inflated(method, bytes(out), cut="a further stream follows" if more else "")
    return Inflated(method, bytes(out), cut="probe_bytes of compressed input")


def is_tar(prefix: bytes) -> bool:
    """True for a POSIX/GNU tar archive (``ustar`` at offset 257)."""
    return prefix[257:262] == b"ustar"
