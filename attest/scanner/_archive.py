"""Zip archives (torch checkpoints, ``.npz``, Keras): list members, never extract or load.

A zip is found by its local-header magic at offset 0 or by an end-of-central-directory
record in the last 64 KiB (so a zip appended to another file is found too). The central
directory is bounded before ``zipfile`` reads it. Each member is judged as the unpicklers
would read it (``_pickle.judge_pickle``, up to ``ScanLimits.max_pickle_walk`` bytes: it
stops at the first byte neither unpickler accepts), then its first ``ScanLimits.probe_bytes``
decompressed bytes go through the magic checks.
"""

from __future__ import annotations

import lzma
import zipfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from modelward.attest.scanner._io import read_at
from modelward.attest.scanner._magic import (
    HDF5_MAGIC,
    NPY_MAGIC,
    compressed_kind,
    descr_has_object,
    is_bytecode,
    native_kind,
    npy_descr,
)
from modelward.attest.scanner._model import Finding, ScanLimits
from modelward.attest.scanner._pickle import judge_pickle, judge_pickle_bytes

EOCD = b"PK\x05\x06"
ZIP64_RECORD = b"PK\x06\x06"
LOCAL_HEADER = b"PK\x03\x04"
MAX_MEMBER_FINDINGS = 10
PICKLE_NAMES = (".pkl", ".pickle", ".joblib", ".pt", ".pth")
PYTHON_NAMES = (".py", ".pyw", ".pyc", ".pyo", ".so", ".dll", ".dylib", ".exe")


@dataclass(frozen=True)
class ZipScan:
    """The kind of archive and the findings about it."""

    kind: str
    findings: tuple[Finding, ...]


def _directory_bounds(stream: BinaryIO, size: int) -> tuple[int, int] | None:
    """(central directory bytes, member count) from the last EOCD record, or None."""
    tail_len = min(size, 65_557)
    tail = read_at(stream, size - tail_len, tail_len)
    at = tail.rfind(EOCD)
    if at < 0 or at + 22 > len(tail):
        return None
    entries = int.from_bytes(tail[at + 10 : at + 12], "little")
    cd_size = int.from_bytes(tail[at + 12 : at + 16], "little")
    record = at - 20 - 56
    if record >= 0 and tail[record : record + 4] == ZIP64_RECORD:
        entries = max(entries, int.from_bytes(tail[record + 32 : record + 40], "little"))
        cd_size = max(cd_size, int.from_bytes(tail[record + 40 : record + 48], "little"))
    return cd_size, entries


def scan_zip(
    path: str, stream: BinaryIO, size: int, prefix: bytes, limits: ScanLimits
) -> ZipScan | None:
    """Inspect ``stream`` as a zip; None when it is not one."""
    starts_zip = prefix.startswith((LOCAL_HEADER, EOCD))
    bounds = _directory_bounds(stream, size)
    if bounds is None:
        if starts_zip:
            return ZipScan(
                "zip", (Finding(path, "scan.unknown", "zip archive without a central directory"),)
            )
        return None
    cd_size, entries = bounds
    if cd_size > limits.max_zip_directory or entries > limits.max_zip_members:
        return ZipScan(
            "zip",
            (
                Finding(
                    path,
                    "scan.too-large",
                    f"zip central directory of {cd_size} bytes and "
                    f"{entries} members exceeds the limits",
                ),
            ),
        )
    try:
        stream.seek(0)
        archive = zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
        if starts_zip:
            return ZipScan("zip", (Finding(path, "scan.unknown", f"malformed zip archive: {exc}"),))
        return None
    with archive:
        members = archive.infolist()[: limits.max_zip_members]
        findings: list[Finding] = []
        for info in members:
            problem = _member_problem(archive, info, limits)
            if problem is not None:
                findings.append(
                    Finding(path, problem[0], f"member {info.filename!r}: {problem[1]}")
                )
    names = [info.filename for info in members]
    if not names and not starts_zip:
        return None  # stray end-of-directory bytes inside other data: nothing to load
    kind = _archive_kind(names)
    if len(findings) > MAX_MEMBER_FINDINGS:
        extra = len(findings) - MAX_MEMBER_FINDINGS
        findings = findings[:MAX_MEMBER_FINDINGS]
        findings.append(Finding(path, findings[0].rule, f"... and {extra} more members"))
    if not findings:
        findings.append(
            Finding(path, "scan.unknown", f"{kind} ({len(names)} members) is not on the allow-list")
        )
    return ZipScan(kind, tuple(findings))


def _archive_kind(names: list[str]) -> str:
    if any(name.endswith("data.pkl") for name in names):
        return "pytorch zip checkpoint"
    if any(name.endswith(".h5") for name in names) or "metadata.json" in names:
        return "Keras archive"
    if names and all(name.endswith(".npy") for name in names):
        return "numpy .npz archive"
    return "zip archive"


MEMBER_ERRORS = (
    zipfile.BadZipFile,
    RuntimeError,
    NotImplementedError,
    OSError,
    EOFError,
    ValueError,
    zlib.error,
    lzma.LZMAError,
)


def _member_problem(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, limits: ScanLimits
) -> tuple[str, str] | None:
    """(rule, reason) for a dangerous or unreadable member, None for an inert one."""
    name = info.filename.lower()
    if info.filename.endswith("/"):
        return None
    try:
        with archive.open(info) as member:
            probe = judge_pickle(
                member,
                info.file_size,
                max_bytes=limits.max_pickle_walk,
                max_ops=limits.max_pickle_ops,
            )
        if probe is not None:
            return "scan.zip-pickle", probe.describe()
        with archive.open(info) as member:
            data = member.read(limits.probe_bytes)
    except MEMBER_ERRORS as exc:
        return "scan.unknown", f"cannot be read: {exc}"
    verdict = member_verdict(data, truncated=info.file_size > len(data), limits=limits)
    if verdict is not None:
        return verdict
    if name.endswith(PICKLE_NAMES):
        return "scan.zip-pickle", "named like a pickle"
    if name.endswith(PYTHON_NAMES):
        return "scan.python", "named like Python code or a native library"
    return None


def member_verdict(data: bytes, *, truncated: bool, limits: ScanLimits) -> tuple[str, str] | None:
    """Magic-only checks of an archive member's first bytes (the member itself was judged
    as a pickle already)."""
    native = native_kind(data)
    if native:
        return "scan.native", native
    if is_bytecode(data):
        return "scan.bytecode", "Python bytecode (.pyc)"
    if data.startswith(HDF5_MAGIC):
        return "scan.hdf5", "HDF5 file"
    if data.startswith(NPY_MAGIC):
        try:
            if descr_has_object(npy_descr(data)):
                return "scan.numpy-object", "numpy array with object dtype (holds pickles)"
        except ValueError as exc:
            return "scan.numpy-object", f"numpy array with an unreadable header: {exc}"
        return None
    if data.startswith((LOCAL_HEADER, EOCD)):
        return "scan.unknown", "nested zip archive"
    packed = compressed_kind(data, limits.probe_bytes, whole=not truncated)
    if packed is not None:
        inner = (
            judge_pickle_bytes(
                packed.data,
                cut=packed.cut,
                max_bytes=limits.max_pickle_walk,
                max_ops=limits.max_pickle_ops,
            )
            if packed.data
            else None
        )
        if inner is not None:
            return "scan.zip-pickle", f"{packed.method}-compressed {inner.describe()}"
        return "scan.unknown", f"{packed.method}-compressed data"
    return None
