"""Magic bytes of the formats the scanner must recognize to reject (docs/scanner.md#rules)."""

from __future__ import annotations

import ast
import bz2
import lzma
import zlib
from collections.abc import Callable
from typing import BinaryIO

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
            if prefix[pe_at:pe_at + 4] == b"PE\x00\x00":
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
    text = prefix[start:start + length].decode("latin-1")
    try:
        header = ast.literal_eval(text)  # literals only: no names, no calls
    except (ValueError, SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f".npy header is not a Python literal: {exc}") from None
    if not isinstance(header, dict) or "descr" not in header:
        raise ValueError(".npy header has no 'descr'")
    return header["descr"]


def descr_has_object(descr: object) -> bool:
    """True when a numpy ``descr`` (string or structured list) holds an object field."""
    if isinstance(descr, str):
        return descr.lstrip("<>|=").startswith("O")
    if isinstance(descr, (list, tuple)):
        return any(descr_has_object(item) for item in descr)
    return True  # anything else is not a descr numpy writes: treat as the worst case


def _gzip(data: bytes, limit: int) -> bytes:
    return zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(data, limit)


def _zlib(data: bytes, limit: int) -> bytes:
    return zlib.decompressobj().decompress(data, limit)


def _bz2(data: bytes, limit: int) -> bytes:
    return bz2.BZ2Decompressor().decompress(data, max_length=limit)


def _xz(data: bytes, limit: int) -> bytes:
    return lzma.LZMADecompressor().decompress(data, max_length=limit)


def _joblib_zlib(data: bytes, limit: int) -> bytes:
    return _zlib(data[data.index(b"\x78"):], limit) if b"\x78" in data[:32] else b""


COMPRESSED: tuple[tuple[bytes, str, Callable[[bytes, int], bytes] | None], ...] = (
    (b"\x1f\x8b", "gzip", _gzip),
    (b"BZh", "bzip2", _bz2),
    (b"\xfd7zXZ\x00", "xz", _xz),
    (b"\x5d\x00\x00", "lzma", _xz),
    (b"ZF0x", "joblib zlib", _joblib_zlib),
    (b"\x04\x22\x4d\x18", "lz4", None),
    (b"\x28\xb5\x2f\xfd", "zstandard", None),
    (b"7z\xbc\xaf\x27\x1c", "7-zip", None),
    (b"Rar!\x1a\x07", "rar", None),
)


def compressed_kind(prefix: bytes, limit: int) -> tuple[str, bytes] | None:
    """Name the compression ``prefix`` starts with and up to ``limit`` decompressed bytes."""
    for magic, name, inflate in COMPRESSED:
        if prefix.startswith(magic):
            return name, _inflate(inflate, prefix, limit)
    if len(prefix) >= 2 and prefix[0] == 0x78 and (prefix[0] * 256 + prefix[1]) % 31 == 0:
        data = _inflate(_zlib, prefix, limit)
        if data:
            return "zlib", data
    return None


def _inflate(inflate: Callable[[bytes, int], bytes] | None, data: bytes, limit: int) -> bytes:
    if inflate is None:
        return b""
    try:
        return inflate(data, limit)
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return b""


def is_tar(prefix: bytes) -> bool:
    """True for a POSIX/GNU tar archive (``ustar`` at offset 257)."""
    return prefix[257:262] == b"ustar"
