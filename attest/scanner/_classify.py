"""Classify one file by its content against the allow-list (docs/scanner.md).

``scan_blob`` is the one place that decides whether a file may enter a bundle. It reads a
bounded prefix, then, in this order:

1. rejects names that only code has (``.py``, ``.sh``, ``.so`` ...), whatever the content;
2. recognizes the content: first as CPython's unpicklers would read it from its first byte
   (``_pickle.judge_pickle``: a pickle is a pickle whatever else it also is), then zip
   (torch checkpoints, .npz, Keras), native code, bytecode, HDF5, numpy, safetensors,
   compressed streams (their content judged as a pickle too), sentencepiece, and text
   (scripts and Python rejected; JSON, the bundle spec and plain text admitted);
3. flags a name that promises a format the content is not (``model.safetensors`` that
   holds a zip, ``config.json`` that is not JSON), and admits nothing from the allow-list
   under a name pickle loaders read (``pytorch_model.bin`` holding text);
4. lets ``ScanLimits.allow_globs`` admit files whose only findings are ``scan.unknown``.
"""

from __future__ import annotations

import fnmatch
from typing import BinaryIO

from modelward.attest.scanner import _structured as structured
from modelward.attest.scanner._archive import scan_zip
from modelward.attest.scanner._io import read_at
from modelward.attest.scanner._magic import (
    NPY_MAGIC,
    compressed_kind,
    descr_has_object,
    hdf5_offset,
    is_bytecode,
    is_tar,
    native_kind,
    npy_descr,
)
from modelward.attest.scanner._model import FileReport, Finding, ScanLimits
from modelward.attest.scanner._pickle import (
    STOP,
    PickleProbe,
    judge_pickle,
    judge_pickle_bytes,
)
from modelward.attest.scanner._safetensors import check_safetensors

SPEC_NAME = "modelward.yaml"
CODE_SUFFIXES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    ((".py", ".pyw"), "scan.python", "Python source file"),
    ((".pyc", ".pyo"), "scan.bytecode", "Python bytecode file"),
    (
        (".sh", ".bash", ".zsh", ".ksh", ".csh", ".fish", ".ps1", ".bat", ".cmd", ".command"),
        "scan.script",
        "shell or batch script",
    ),
    ((".so", ".dylib", ".dll", ".exe"), "scan.native", "native library or executable"),
)
# A name that promises a format: (suffix or exact name, kind required, rule).
PROMISES: tuple[tuple[str, str, str], ...] = (
    (".safetensors", "safetensors", "scan.safetensors"),
    (".json", "json", "scan.json"),
    (".model", "sentencepiece", "scan.sentencepiece"),
)
# Names that torch.load, pickle.load, numpy.load(allow_pickle=True) or joblib.load read: a
# text (or any allow-listed) file under one of them is unpickled by whoever loads it.
PICKLE_LOADED = (
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".pkl",
    ".pickle",
    ".joblib",
    ".dill",
    ".sav",
    ".npy",
    ".npz",
    ".tar",
    ".pdparams",
    ".pdopt",
)

Verdict = tuple[str, list[Finding]]


def scan_blob(
    path: str, stream: BinaryIO, size: int, limits: ScanLimits = ScanLimits()
) -> FileReport:
    """Classify the ``size`` bytes of ``stream`` (a seekable binary stream) named ``path``.

    Returns the file's kind and every finding; no findings means the file is admitted.
    Never loads, renders or executes the content. Raises ``ValueError`` if the stream is
    not seekable, ``OSError`` if it cannot be read.
    """
    if not stream.seekable():
        raise ValueError("scan_blob needs a seekable stream")
    name = path.rsplit("/", 1)[-1]
    lower = name.lower()
    # (1): names only code has
    findings = [
        Finding(path, rule, f"{reason} ({name!r})")
        for suffixes, rule, reason in CODE_SUFFIXES
        if lower.endswith(suffixes)
    ]
    if ".so." in lower:
        findings.append(Finding(path, "scan.native", f"versioned shared library ({name!r})"))
    # (2): the content
    prefix = read_at(stream, 0, min(size, limits.probe_bytes))
    kind, found = _content(path, stream, size, prefix, limits)
    findings.extend(f for f in found if f not in findings)
    # (3): a name that promises another format; a name pickle loaders read
    for suffix, wanted, rule in PROMISES:
        if lower.endswith(suffix) and kind != wanted and not any(f.rule == rule for f in findings):
            findings.append(Finding(path, rule, f"named {suffix} but the content is {kind}"))
    loaded = next((s for s in PICKLE_LOADED if lower.endswith(s)), None)
    if loaded is not None and not findings and kind != "empty":
        findings.append(
            Finding(
                path,
                "scan.pickle",
                f"named {loaded}, which torch.load, "
                "pickle.load, numpy.load and joblib.load unpickle; "
                f"{kind} is admitted only under its own names",
            )
        )
    # (4): allow_globs admit unknown content only
    if (
        findings
        and all(f.rule == "scan.unknown" for f in findings)
        and any(fnmatch.fnmatchcase(path, glob) for glob in limits.allow_globs)
    ):
        return FileReport(path, f"{kind} (admitted by allow_globs)", ())
    return FileReport(path, kind, tuple(findings))


def _content(path: str, stream: BinaryIO, size: int, prefix: bytes, limits: ScanLimits) -> Verdict:
    truncated = size > len(prefix)
    if size == 0:
        return "empty", []
    # what CPython's unpicklers make of the bytes comes first: a stream they would import,
    # call or finish is a pickle, whatever else it also is (text, a zip appended to it).
    # Tensor data is judged by its safetensors header, never by guessing at its bytes: in a
    # file whose name promises safetensors and whose header proves it, the walk ends where
    # the tensor data begins (docs/scanner.md#safetensors-and-pickle)
    readable = _pickle_readable(path, stream, size, prefix, limits)
    stream.seek(0)
    probe = judge_pickle(
        stream, readable, max_bytes=limits.max_pickle_walk, max_ops=limits.max_pickle_ops
    )
    archive = scan_zip(path, stream, size, prefix, limits)
    if archive is not None:  # its members first, then what pickle.load reads at offset 0
        found = list(archive.findings)
        if probe is not None:
            found += _pickle_findings(path, prefix, probe, truncated=truncated)
        return archive.kind, found
    if probe is not None and not (
        probe.why == STOP and _valid_safetensors(path, stream, size, prefix, limits)
    ):
        return "pickle", _pickle_findings(path, prefix, probe, truncated=truncated)
    native = native_kind(prefix)
    if native is not None:
        return "native code", [Finding(path, "scan.native", native)]
    if is_bytecode(prefix):
        return "python bytecode", [Finding(path, "scan.bytecode", "CPython bytecode (.pyc)")]
    at = hdf5_offset(stream, size)
    if at is not None:
        return "hdf5", [
            Finding(
                path,
                "scan.hdf5",
                f"HDF5 file (superblock at offset {at}); "
                "HDF5/Keras models can carry code such as Lambda layers",
            )
        ]
    if prefix.startswith(NPY_MAGIC):
        return "numpy", _numpy(path, prefix)
    st: list[Finding] = []
    if _looks_like_safetensors(prefix, size, limits) or path.lower().endswith(".safetensors"):
        st = check_safetensors(path, stream, size, limits)
        if not st or _looks_like_safetensors(prefix, size, limits):
            return "safetensors", st
    packed = _compressed(path, prefix, limits, truncated=truncated)
    if packed is not None:
        return packed
    if is_tar(prefix):
        return "tar archive", [
            Finding(path, "scan.unknown", "tar archive is not on the allow-list")
        ]
    if prefix[:1] == b"\x0a" or path.lower().endswith(".model"):
        verdict = _sentencepiece(path, stream, size, limits)
        if verdict is not None:
            return verdict
    text = _text(path, stream, size, prefix, limits)
    if text is not None:
        return text
    if st:  # named .safetensors, recognized as nothing else: why it is no safetensors
        return "safetensors", st
    return "unknown", [
        Finding(
            path,
            "scan.unknown",
            f"unrecognized binary content (starts with {prefix[:16].hex(' ')})",
        )
    ]


def _pickle_findings(
    path: str, prefix: bytes, probe: PickleProbe, *, truncated: bool
) -> list[Finding]:
    rule = "scan.joblib" if probe.joblib else "scan.pickle"
    found = [Finding(path, rule, probe.describe())]
    if _is_text_prefix(prefix, truncated=truncated):  # also say what the text is
        code = structured.code_problem(prefix, prefix.decode("utf-8", "replace"))
        if code is not None:
            found.append(Finding(path, code[0], code[1]))
    return found


def _pickle_readable(
    path: str, stream: BinaryIO, size: int, prefix: bytes, limits: ScanLimits
) -> int:
    """How many bytes the pickle walk reads: all of them, except in a file named
    ``.safetensors`` (which loaders read with the safetensors library, never an unpickler)
    that is valid safetensors by its header: there only the 8-byte length and the header,
    the bytes no tensor accounts for. A walk still unpickling where the tensor data begins
    is then no pickle: every later byte is the tensor data the header describes."""
    if not path.lower().endswith(".safetensors") or not _looks_like_safetensors(
        prefix, size, limits
    ):
        return size
    if check_safetensors(path, stream, size, limits):
        return size
    return 8 + int.from_bytes(prefix[:8], "little")


def _valid_safetensors(
    path: str, stream: BinaryIO, size: int, prefix: bytes, limits: ScanLimits
) -> bool:
    """A complete pickle that imports nothing is no danger in a file that is valid
    safetensors too (a safetensors loader reads it; PICKLE_LOADED names still refuse it)."""
    return _looks_like_safetensors(prefix, size, limits) and not check_safetensors(
        path, stream, size, limits
    )


def _looks_like_safetensors(prefix: bytes, size: int, limits: ScanLimits) -> bool:
    if len(prefix) < 9 or prefix[8:9] != b"{":
        return False
    length = int.from_bytes(prefix[:8], "little")
    return 2 <= length <= min(limits.max_safetensors_header, size - 8)


def _numpy(path: str, prefix: bytes) -> list[Finding]:
    try:
        descr = npy_descr(prefix)
    except ValueError as exc:
        return [
            Finding(
                path,
                "scan.numpy-object",
                f"numpy array with an unreadable header (loading it may unpickle): {exc}",
            )
        ]
    if descr_has_object(descr):
        return [
            Finding(
                path,
                "scan.numpy-object",
                f"numpy array with object dtype {descr!r}: its elements are pickles",
            )
        ]
    return [
        Finding(
            path,
            "scan.unknown",
            f"numpy array (dtype {descr!r}) is not on the "
            "allow-list; convert it to safetensors or admit it with allow_globs",
        )
    ]


def _compressed(path: str, prefix: bytes, limits: ScanLimits, *, truncated: bool) -> Verdict | None:
    packed = compressed_kind(prefix, limits.probe_bytes, whole=not truncated)
    if packed is None:
        return None
    probe = (
        judge_pickle_bytes(
            packed.data,
            cut=packed.cut,
            max_bytes=limits.max_pickle_walk,
            max_ops=limits.max_pickle_ops,
        )
        if packed.data
        else None
    )
    if probe is None:
        return f"{packed.method} stream", [
            Finding(
                path, "scan.unknown", f"{packed.method}-compressed data is not on the allow-list"
            )
        ]
    rule = "scan.joblib" if probe.joblib or packed.method.startswith("joblib") else "scan.pickle"
    return "pickle", [Finding(path, rule, f"{packed.method}-compressed {probe.describe()}")]


def _sentencepiece(path: str, stream: BinaryIO, size: int, limits: ScanLimits) -> Verdict | None:
    named = path.lower().endswith(".model")
    if size > limits.max_sentencepiece_bytes:
        if not named:
            return None
        return "sentencepiece", [
            Finding(
                path,
                "scan.too-large",
                f"{size} bytes exceeds the sentencepiece limit of {limits.max_sentencepiece_bytes}",
            )
        ]
    problem = structured.sentencepiece_problem(read_at(stream, 0, size))
    if problem is None:
        return "sentencepiece", []
    if named:
        return "sentencepiece", [Finding(path, "scan.sentencepiece", problem)]
    return None


def _text(
    path: str, stream: BinaryIO, size: int, prefix: bytes, limits: ScanLimits
) -> Verdict | None:
    if not _is_text_prefix(prefix, truncated=size > len(prefix)):
        return None
    if size > limits.max_text_bytes:
        return "text", [
            Finding(
                path,
                "scan.too-large",
                f"text file of {size} bytes exceeds the limit of {limits.max_text_bytes}",
            )
        ]
    data = read_at(stream, 0, size)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return "unknown", [
            Finding(path, "scan.unknown", f"not valid UTF-8 text (byte {exc.start})")
        ]
    if structured.has_binary_controls(text):
        return "unknown", [Finding(path, "scan.unknown", "text holds NUL or control characters")]
    code = structured.code_problem(prefix, text)
    if code is not None:
        return "code", [Finding(path, code[0], code[1])]
    name = path.rsplit("/", 1)[-1]
    if name.lower().endswith(".json") or text.lstrip()[:1] in ("{", "["):
        verdict = _json(path, text, size, limits)
        if verdict is not None:
            return verdict
    if name == SPEC_NAME:
        if size > limits.max_spec_bytes:
            return "bundle spec", [
                Finding(
                    path,
                    "scan.too-large",
                    f"{size} bytes exceeds the spec limit of {limits.max_spec_bytes}",
                )
            ]
        return "bundle spec", structured.check_yaml(path, text)
    return structured.text_kind(path, text), []


def _json(path: str, text: str, size: int, limits: ScanLimits) -> Verdict | None:
    named = path.lower().endswith(".json")
    if size > limits.max_json_bytes:
        return "json", [
            Finding(
                path,
                "scan.too-large",
                f"JSON file of {size} bytes exceeds the limit of {limits.max_json_bytes}",
            )
        ]
    try:
        document = structured.parse_json(text)
    except ValueError as exc:
        if not named:
            return None  # e.g. a Jinja template starting with "{{": plain text
        return "json", [Finding(path, "scan.json", f"not valid JSON: {exc}")]
    refs = structured.remote_code_refs(document)
    return "json", [Finding(path, "scan.auto_map", reason) for reason in refs]


def _is_text_prefix(prefix: bytes, *, truncated: bool) -> bool:
    data = prefix
    if truncated:  # the prefix may end inside a multi-byte character
        for cut in range(4):
            try:
                data[: len(data) - cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
            return not structured.has_binary_controls(data[: len(data) - cut].decode("utf-8"))
        return False
    try:
        return not structured.has_binary_controls(data.decode("utf-8"))
    except UnicodeDecodeError:
        return False
