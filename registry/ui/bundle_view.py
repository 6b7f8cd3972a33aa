"""What the console shows of one bundle's files, read from the blob store with bounds.

Per file: path, size, digest, media type, and the registry scanner's verdict
(``attest.scanner.scan_blob``, the one function that decides whether a file may enter a
bundle: its kind and every finding, the pickle imports among them). A safetensors file is
summarized from its header only (``MAX_HEADER_BYTES``: tensor count, dtypes, parameters);
``modelward.yaml`` is parsed by ``attest.spec.load_spec`` for its pinned inputs. Text files
a diff reads are read whole only up to ``MAX_TEXT_BYTES``.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from modelward.attest.errors import AttestError
from modelward.attest.manifest import Layer, Manifest, parse_manifest
from modelward.attest.scanner import scan_blob
from modelward.attest.spec import SPEC_FILENAME, load_spec
from modelward.registry.domains._state import AppState

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_TEXT_BYTES",
    "FileView",
    "file_views",
    "parsed_manifest",
    "pinned_inputs",
    "read_text",
    "safetensors_summary",
]

MAX_HEADER_BYTES = 16 * 2**20  # a safetensors header larger than this is not summarized
MAX_TEXT_BYTES = 256 * 2**10  # a text file larger than this is not diffed


@dataclass(frozen=True)
class FileView:
    path: str
    size: int
    digest: str
    media_type: str
    kind: str
    findings: list[dict[str, str]]
    tensors: dict[str, Any] | None


def parsed_manifest(data: bytes) -> Manifest:
    return parse_manifest(data)


def safetensors_summary(state: AppState, layer: Layer) -> dict[str, Any]:
    """Tensor count, dtypes and total parameters from the header alone, or ``error``.
    Raises FileNotFoundError when the blob is not in the store."""
    with state.store.open(layer.digest) as stream:
        head = stream.read(8)
        if len(head) < 8:
            return {"error": "shorter than a safetensors header"}
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, layer.size - 8):
            return {"error": f"header of {length} bytes is over the limit or the file"}
        raw = stream.read(length)
    try:
        header = json.loads(raw)
    except ValueError:
        return {"error": "header is not JSON"}
    if not isinstance(header, dict):
        return {"error": "header is not a JSON object"}
    dtypes: dict[str, int] = {}
    parameters = 0
    count = 0
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        shape = info.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            return {"error": f"tensor {name[:100]!r} has no valid shape"}
        count += 1
        dtype = str(info.get("dtype"))[:20]
        dtypes[dtype] = dtypes.get(dtype, 0) + 1
        parameters += math.prod(shape)
    return {"tensors": count, "dtypes": dict(sorted(dtypes.items())), "parameters": parameters}


def file_views(state: AppState, manifest: Manifest) -> list[FileView]:
    """Every file of the bundle, scanned now by the registry's scanner (a blob no longer in
    the store is reported as ``missing``)."""
    views = []
    for layer in manifest.layers:
        try:
            with state.store.open(layer.digest) as stream:
                report = scan_blob(layer.path, stream, layer.size)
        except FileNotFoundError:  # a deleted bundle's blobs, collected
            views.append(_missing(layer))
            continue
        tensors = None
        if report.kind == "safetensors":
            tensors = safetensors_summary(state, layer)
        views.append(
            FileView(
                path=layer.path,
                size=layer.size,
                digest=layer.digest,
                media_type=layer.media_type,
                kind=report.kind,
                findings=[{"rule": f.rule, "reason": f.reason} for f in report.findings],
                tensors=tensors,
            )
        )
    return views


def _missing(layer: Layer) -> FileView:
    finding = {"rule": "store.missing", "reason": "the blob is not in the blob store"}
    return FileView(
        path=layer.path,
        size=layer.size,
        digest=layer.digest,
        media_type=layer.media_type,
        kind="missing",
        findings=[finding],
        tensors=None,
    )


def read_text(state: AppState, manifest: Manifest, path: str) -> str | None:
    """A file's text when the bundle has it, it is UTF-8 and at most MAX_TEXT_BYTES."""
    layer = next((la for la in manifest.layers if la.path == path), None)
    if layer is None or layer.size > MAX_TEXT_BYTES:
        return None
    try:
        with state.store.open(layer.digest) as stream:
            data = stream.read(MAX_TEXT_BYTES + 1)
        return data.decode("utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def pinned_inputs(state: AppState, manifest: Manifest) -> dict[str, Any] | None:
    """The validated ``modelward.yaml`` (its pinned serving inputs), or ``error``."""
    text = read_text(state, manifest, SPEC_FILENAME)
    if text is None:
        return None
    try:
        spec = load_spec(text.encode())
    except AttestError as exc:
        return {"error": str(exc)[:500]}
    dumped: dict[str, Any] = spec.model_dump(mode="json")
    return dumped
