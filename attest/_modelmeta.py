"""Layer media types and the config blob's descriptive metadata (docs/bundle-format.md).

Private to ``attest.manifest``, which re-exports the public names. Classification and
metadata only label a bundle; whether a file is safe is the scanner's job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from modelward.attest._fileio import read_regular
from modelward.attest.errors import DigestMismatch

__all__ = [
    "DOC_MEDIA_TYPE",
    "LAYER_MEDIA_TYPES",
    "WEIGHT_CONFIG_MEDIA_TYPE",
    "WEIGHT_MEDIA_TYPE",
    "layer_media_type",
    "model_metadata",
]

WEIGHT_MEDIA_TYPE = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG_MEDIA_TYPE = "application/vnd.cncf.model.weight.config.v1.raw"
DOC_MEDIA_TYPE = "application/vnd.cncf.model.doc.v1.raw"
LAYER_MEDIA_TYPES = frozenset({WEIGHT_MEDIA_TYPE, WEIGHT_CONFIG_MEDIA_TYPE, DOC_MEDIA_TYPE})


class _Layer(Protocol):
    """What the metadata reads of a layer (``attest.manifest.Layer`` has it)."""

    @property
    def path(self) -> str: ...

    @property
    def media_type(self) -> str: ...


_MAX_CONFIG_JSON = 16 * 2**20  # config.json larger than this gives no metadata
_MAX_META_STRING = 256

_WEIGHT_FORMATS = {
    ".safetensors": "safetensors", ".gguf": "gguf", ".ggml": "ggml", ".onnx": "onnx",
    ".bin": "pytorch", ".pt": "pytorch", ".pth": "pytorch", ".ckpt": "pytorch",
    ".h5": "keras", ".keras": "keras", ".msgpack": "flax", ".npz": "numpy",
    ".npy": "numpy", ".tflite": "tflite", ".pb": "tensorflow",
}  # fmt: skip
_DOC_STEMS = ("README", "LICENSE", "LICENCE", "NOTICE", "COPYING", "CITATION", "AUTHORS",
              "CHANGELOG", "USE_POLICY")  # fmt: skip
_DOC_SUFFIXES = (".md", ".markdown", ".rst", ".txt", ".pdf")
_TOKENIZER_TEXT = frozenset({"merges.txt", "vocab.txt", "spiece.txt"})
_PRECISIONS = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16", "float64": "fp64", "int8": "int8", "uint8": "uint8",
    "F32": "fp32", "F16": "fp16", "BF16": "bf16", "F64": "fp64", "I8": "int8",
    "U8": "uint8", "F8_E4M3": "fp8", "F8_E5M2": "fp8",
}  # fmt: skip


def layer_media_type(path: str) -> str:
    """Classify a bundle file by its path (docs/bundle-format.md#layers).

    Classification only labels layers; whether a file is safe is the scanner's job,
    which looks at content, never at names.
    """
    name = path.rsplit("/", 1)[-1]
    lower = name.lower()
    suffix = "." + lower.rsplit(".", 1)[-1] if "." in lower else ""
    if lower in _TOKENIZER_TEXT:
        return WEIGHT_CONFIG_MEDIA_TYPE
    if suffix in _WEIGHT_FORMATS:
        return WEIGHT_MEDIA_TYPE
    if suffix in _DOC_SUFFIXES or name.upper().split(".", 1)[0].startswith(_DOC_STEMS):
        return DOC_MEDIA_TYPE
    return WEIGHT_CONFIG_MEDIA_TYPE


def _model_config(root: Path, digests: Mapping[str, str]) -> dict[str, Any]:
    """The root config.json as a dict; {} when absent, too large or not a JSON object.

    The bytes read must hash to the digest just computed for the file, so the metadata
    describes the very bytes the manifest names (``DigestMismatch`` otherwise).
    """
    expected = digests.get("config.json")
    data = read_regular(root / "config.json", _MAX_CONFIG_JSON + 1) if expected else None
    if data is None or expected is None or len(data) > _MAX_CONFIG_JSON:
        return {}
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise DigestMismatch("config.json", expected, actual)
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _meta_string(value: object) -> str | None:
    """A short printable string taken from the model's files, else None."""
    if isinstance(value, str) and 0 < len(value) <= _MAX_META_STRING and value.isprintable():
        try:
            value.encode("utf-8")  # lone surrogates from JSON escapes cannot be canonicalized
        except UnicodeEncodeError:
            return None
        return value
    return None


def model_metadata(
    root: Path, layers: Sequence[_Layer], digests: Mapping[str, str]
) -> dict[str, Any]:
    """The config blob's ``descriptor`` and ``config`` objects (docs/bundle-format.md).

    No name, author, host or time: those would differ between machines and directories.
    """
    hf = _model_config(root, digests)
    quant = hf.get("quantization_config")
    architectures = hf.get("architectures")
    weights = [layer.path for layer in layers if layer.media_type == WEIGHT_MEDIA_TYPE]
    formats = {_WEIGHT_FORMATS["." + p.rsplit(".", 1)[-1].lower()] for p in weights}
    dtype = hf.get("dtype") or hf.get("torch_dtype")
    precision = _PRECISIONS.get(dtype) if isinstance(dtype, str) else None
    if precision is None:
        first = next((p for p in weights if p.lower().endswith(".safetensors")), None)
        precision = _safetensors_precision(root / first) if first else None
    config = {
        "architecture": _meta_string(architectures[0])
        if isinstance(architectures, list) and architectures
        else None,
        "format": next(iter(formats)) if len(formats) == 1 else None,
        "precision": precision,
        "quantization": _meta_string(quant.get("quant_method"))
        if isinstance(quant, dict)
        else None,
    }
    family = _meta_string(hf.get("model_type"))
    return {
        "descriptor": {"family": family} if family else {},
        "config": {k: v for k, v in config.items() if v is not None},
    }


def _safetensors_precision(path: Path) -> str | None:
    """Precision from a safetensors header (bounded read); None when not evident."""
    head = read_regular(path, 8 + 8 * 2**20)
    if head is None or len(head) < 8:
        return None
    length = int.from_bytes(head[:8], "little")
    try:
        header = json.loads(head[8 : 8 + length].decode("utf-8")) if length <= 8 * 2**20 else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    dtypes = {
        v.get("dtype") for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
    }
    if len(dtypes) > 1:
        return "mixed"
    dtype = dtypes.pop() if dtypes else None
    return _PRECISIONS.get(dtype) if isinstance(dtype, str) else None
