"""The bundle manifest: an OCI image manifest following the CNCF ModelPack model-spec.

Specified in docs/bundle-format.md. ``build_bundle`` turns a directory into canonical
(RFC 8785) manifest and config bytes; ``parse_manifest`` is the one strict reader of
manifest bytes received from anywhere (registry uploads, pulls, the loader);
``verify_tree`` re-hashes a materialized bundle against a parsed manifest.

The bundle digest is ``sha256:<hex>`` of the exact manifest bytes, never of a
re-serialization, taken once per request: a parsed ``Manifest`` keeps its bytes as
``attest.digest.HashedBytes``, which carry the digest taken of them, so passing
``manifest.raw`` (or bytes a client already checked) along hashes nothing again.

Errors: ``TreeRuleError`` (tree rules, ``bundle.missing``, ``bundle.extra``,
``bundle.empty``), ``ManifestError`` (malformed manifest or config), ``DigestMismatch``
(a file or blob does not hash to its descriptor).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785

from modelward.attest._json import DuplicateKeyError, reject_duplicates
from modelward.attest._modelmeta import (
    DOC_MEDIA_TYPE,
    LAYER_MEDIA_TYPES,
    WEIGHT_CONFIG_MEDIA_TYPE,
    WEIGHT_MEDIA_TYPE,
    layer_media_type,
    model_metadata,
)
from modelward.attest.digest import (
    HashedBytes,
    HashOptions,
    ProgressCallback,
    hash_files,
    parse_digest,
)
from modelward.attest.errors import DigestMismatch, ManifestError, TreeRuleError, TreeViolation
from modelward.attest.tree import (
    IGNORED_DIRS,
    IGNORED_ROOT_FILES,
    BundleFile,
    check_relpath,
    collision_key,
    list_bundle_files,
    walk_bundle,
)

__all__ = [
    "ARTIFACT_TYPE",
    "CONFIG_MEDIA_TYPE",
    "DOC_MEDIA_TYPE",
    "FILEPATH_ANNOTATION",
    "LAYER_MEDIA_TYPES",
    "MANIFEST_MEDIA_TYPE",
    "TITLE_ANNOTATION",
    "WEIGHT_CONFIG_MEDIA_TYPE",
    "WEIGHT_MEDIA_TYPE",
    "BuiltBundle",
    "Descriptor",
    "Layer",
    "Manifest",
    "ManifestLimits",
    "build_bundle",
    "bundle_digest",
    "check_config",
    "layer_media_type",
    "parse_manifest",
    "verify_tree",
]

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.cncf.model.config.v1+json"
FILEPATH_ANNOTATION = "org.cncf.model.filepath"
# The OCI title annotation: the name oras (and other OCI clients) give a pulled layer's
# file. Built manifests carry it equal to the file path (docs/bundle-format.md#layers);
# manifests built before it (filepath alone) still parse.
TITLE_ANNOTATION = "org.opencontainers.image.title"

_MAX_SAFE_INT = 2**53 - 1  # RFC 8785 / I-JSON integer domain


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: media type, digest and size of a blob."""

    media_type: str
    digest: str
    size: int


@dataclass(frozen=True)
class Layer:
    """One file of the bundle as a raw layer."""

    path: str
    media_type: str
    digest: str
    size: int


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest. ``raw`` holds the exact bytes ``digest`` names (``parse_manifest``
    keeps them as ``HashedBytes``, carrying that digest)."""

    raw: bytes
    digest: str
    config: Descriptor
    layers: tuple[Layer, ...]
    _by_path: Mapping[str, Layer] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_path", {layer.path: layer for layer in self.layers})

    def layer(self, path: str) -> Layer:
        """The layer for ``path``; raises ``KeyError`` if the bundle has no such file."""
        return self._by_path[path]


@dataclass(frozen=True)
class BuiltBundle:
    """What ``build_bundle`` produced: manifest, config blob bytes and the files."""

    manifest: Manifest
    config_bytes: bytes
    files: tuple[BundleFile, ...]


@dataclass(frozen=True)
class ManifestLimits:
    """Bounds ``parse_manifest`` enforces on untrusted manifest bytes."""

    max_bytes: int = 16 * 2**20
    max_layers: int = 100_000
    max_path_bytes: int = 4096


def bundle_digest(manifest_bytes: bytes) -> str:
    """``sha256:<hex>`` of the exact manifest bytes; ``HashedBytes`` give the digest they
    carry, without hashing again."""
    if isinstance(manifest_bytes, HashedBytes):
        return manifest_bytes.digest
    return "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()


# --- building -----------------------------------------------------------------------


def build_bundle(
    root: Path,
    options: HashOptions = HashOptions(),
    progress: ProgressCallback | None = None,
    exclude: Sequence[str] = (),
) -> BuiltBundle:
    """Build the canonical manifest and config blob for the bundle at ``root``.

    Paths in ``exclude`` (a file, or a directory and all under it; relative to ``root``)
    are left out of the bundle entirely: not walked, hashed or listed (attest.tree).

    Raises ``TreeRuleError`` on any tree-rule violation (or an empty bundle),
    ``NotADirectoryError`` if ``root`` is not a directory, ``BundleError`` if a file
    changes while it is hashed, ``ValueError`` for an exclude path outside ``root``.
    """
    # (1) walk the tree; every rule checked before any byte is hashed
    files = sorted(list_bundle_files(root, exclude), key=lambda f: f.path.encode())
    if not files:
        raise TreeRuleError([TreeViolation(".", "bundle.empty", "bundle has no files")])
    # (2) hash every file
    digests = hash_files(files, options, progress)
    layers = [Layer(f.path, layer_media_type(f.path), digests[f.path], f.size) for f in files]
    # (3) the config blob: descriptive metadata plus the layer digests (modelfs.diffIds)
    config_doc: dict[str, Any] = {
        **model_metadata(root, layers, digests),
        "modelfs": {"type": "layers", "diffIds": [layer.digest for layer in layers]},
    }
    config_bytes = rfc8785.dumps(config_doc)
    # (4) the manifest, canonical; read back through the strict parser
    document: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {
            "mediaType": CONFIG_MEDIA_TYPE,
            "digest": bundle_digest(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": layer.media_type,
                "digest": layer.digest,
                "size": layer.size,
                "annotations": {FILEPATH_ANNOTATION: layer.path, TITLE_ANNOTATION: layer.path},
            }
            for layer in layers
        ],
    }
    manifest = parse_manifest(rfc8785.dumps(document))
    return BuiltBundle(manifest, config_bytes, tuple(files))


# --- parsing --------------------------------------------------------------------------


class _ForbiddenJsonError(ValueError):
    """A JSON construct the manifest format forbids."""


def _reject_constant(name: str) -> Any:
    raise _ForbiddenJsonError(f"non-finite number {name} is not allowed")


def _reject_float(text: str) -> Any:
    raise _ForbiddenJsonError(f"non-integer number {text[:40]!r} is not allowed")


def _load_json(data: bytes, what: str) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{what}: not valid UTF-8 (byte {exc.start})") from exc
    try:
        return json.loads(
            text,
            object_pairs_hook=reject_duplicates,
            parse_constant=_reject_constant,
            parse_float=_reject_float,
        )
    except DuplicateKeyError as exc:
        raise ManifestError(f"{what}: duplicate key {exc.key[:80]!r}") from exc
    except _ForbiddenJsonError as exc:
        raise ManifestError(f"{what}: {exc}") from exc
    except RecursionError as exc:
        raise ManifestError(f"{what}: nested too deeply") from exc
    except ValueError as exc:
        raise ManifestError(f"{what}: not valid JSON: {exc}") from exc


def _object(value: Any, where: str, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"manifest: {where}: must be an object")
    missing = sorted(keys - value.keys())
    unknown = sorted(value.keys() - keys)
    if missing:
        raise ManifestError(f"manifest: {where}: missing {', '.join(missing)}")
    if unknown:
        raise ManifestError(f"manifest: {where}: unknown field {unknown[0][:80]!r}")
    return value


def _descriptor(value: Any, where: str, keys: frozenset[str]) -> dict[str, Any]:
    obj = _object(value, where, keys)
    try:
        parse_digest(obj["digest"])
    except ValueError as exc:
        raise ManifestError(f"manifest: {where}.digest: {exc}") from exc
    size = obj["size"]
    if type(size) is not int or not 0 <= size <= _MAX_SAFE_INT:
        raise ManifestError(f"manifest: {where}.size: must be an integer in 0..2^53-1")
    media_type = obj["mediaType"]
    if not isinstance(media_type, str):
        raise ManifestError(f"manifest: {where}.mediaType: must be a string")
    return obj


_TOP_KEYS = frozenset({"schemaVersion", "mediaType", "artifactType", "config", "layers"})
_CONFIG_KEYS = frozenset({"mediaType", "digest", "size"})
_LAYER_KEYS = frozenset({"mediaType", "digest", "size", "annotations"})
_ANNOTATION_SETS = (
    frozenset({FILEPATH_ANNOTATION, TITLE_ANNOTATION}),
    frozenset({FILEPATH_ANNOTATION}),  # manifests built before the title annotation
)


def parse_manifest(data: bytes, limits: ManifestLimits = ManifestLimits()) -> Manifest:
    """Parse and check untrusted manifest bytes (docs/bundle-format.md#manifest).

    The returned ``Manifest.raw`` is ``data`` as ``HashedBytes``: hashed here, once, unless
    ``data`` already is ``HashedBytes`` (then its digest is the one used). Raises
    ``ManifestError`` naming the first problem found.
    """
    # (1) size bound before any parsing
    if len(data) > limits.max_bytes:
        raise ManifestError(f"manifest: {len(data)} bytes exceeds limit of {limits.max_bytes}")
    # (2) UTF-8 JSON, no duplicate keys, integers only
    doc = _load_json(data, "manifest")
    # (3) canonical RFC 8785 bytes: one tree, one manifest, one digest
    try:
        canonical = rfc8785.dumps(doc)
    except rfc8785.CanonicalizationError as exc:
        raise ManifestError(f"manifest: cannot be canonicalized: {exc}") from exc
    if canonical != data:
        raise ManifestError("manifest: bytes are not in canonical RFC 8785 form")
    # (4) the OCI manifest envelope, exact media types
    top = _object(doc, "top level", _TOP_KEYS)
    if type(top["schemaVersion"]) is not int or top["schemaVersion"] != 2:
        raise ManifestError("manifest: schemaVersion: must be 2")
    for key, want in (("mediaType", MANIFEST_MEDIA_TYPE), ("artifactType", ARTIFACT_TYPE)):
        if top[key] != want:
            raise ManifestError(f"manifest: {key}: unknown media type {str(top[key])[:120]!r}")
    # (5) the config descriptor
    cfg = _descriptor(top["config"], "config", _CONFIG_KEYS)
    if cfg["mediaType"] != CONFIG_MEDIA_TYPE:
        raise ManifestError(
            f"manifest: config.mediaType: unknown media type {cfg['mediaType'][:120]!r}"
        )
    config = Descriptor(cfg["mediaType"], cfg["digest"], cfg["size"])
    # (6) the layers: bounded count, known media types, safe unique paths in byte order
    raw_layers = top["layers"]
    if not isinstance(raw_layers, list) or not raw_layers:
        raise ManifestError("manifest: layers: must be a non-empty array")
    if len(raw_layers) > limits.max_layers:
        raise ManifestError(
            f"manifest: layers: {len(raw_layers)} layers exceeds limit of {limits.max_layers}"
        )
    layers = tuple(_layer(value, i, limits) for i, value in enumerate(raw_layers))
    # (7) no duplicate, colliding or file-vs-directory paths; sorted by UTF-8 bytes
    _check_paths([layer.path for layer in layers])
    # (8) the digest: of these exact bytes, taken once (kept with them from here on)
    received = HashedBytes(data)
    return Manifest(received, received.digest, config, layers)


def _layer(value: Any, index: int, limits: ManifestLimits) -> Layer:
    where = f"layers[{index}]"
    obj = _descriptor(value, where, _LAYER_KEYS)
    if obj["mediaType"] not in LAYER_MEDIA_TYPES:
        raise ManifestError(
            f"manifest: {where}.mediaType: unknown media type {obj['mediaType'][:120]!r}"
        )
    annotations = obj["annotations"]
    if not isinstance(annotations, dict) or frozenset(annotations) not in _ANNOTATION_SETS:
        raise ManifestError(
            f"manifest: {where}.annotations: must hold exactly {FILEPATH_ANNOTATION!r} "
            f"and optionally {TITLE_ANNOTATION!r}"
        )
    path = annotations[FILEPATH_ANNOTATION]
    if not isinstance(path, str):
        raise ManifestError(f"manifest: {where}: {FILEPATH_ANNOTATION} must be a string")
    # Two names for one file would let two readers (ours by filepath, an OCI client by
    # title) materialize different trees from one digest: they must be equal.
    if TITLE_ANNOTATION in annotations and annotations[TITLE_ANNOTATION] != path:
        raise ManifestError(
            f"manifest: {where}: {TITLE_ANNOTATION} "
            f"{str(annotations[TITLE_ANNOTATION])[:200]!r} differs from "
            f"{FILEPATH_ANNOTATION} {path[:200]!r}"
        )
    if len(path.encode("utf-8", "surrogatepass")) > limits.max_path_bytes:
        raise ManifestError(f"manifest: {where}: path longer than {limits.max_path_bytes} bytes")
    problem = check_relpath(path)
    if problem is not None:
        raise ManifestError(f"manifest: {where}: {problem}")
    parts = path.split("/")
    if any(p in IGNORED_DIRS for p in parts) or path in IGNORED_ROOT_FILES:
        raise ManifestError(f"manifest: {where}: {path!r} is a reserved path")
    return Layer(path, obj["mediaType"], obj["digest"], obj["size"])


def _check_paths(paths: Sequence[str]) -> None:
    seen: dict[str, tuple[str, bool]] = {}  # collision key -> (spelling, is_directory)
    previous = b""
    for path in paths:
        encoded = path.encode("utf-8")
        if encoded == previous:
            raise ManifestError(f"manifest: duplicate path {path!r}")
        if encoded < previous:
            raise ManifestError(f"manifest: layers not sorted by path at {path!r}")
        previous = encoded
        parts = path.split("/")
        entries = [("/".join(parts[: i + 1]), True) for i in range(len(parts) - 1)]
        for spelling, is_dir in [*entries, (path, False)]:
            other = seen.setdefault(collision_key(spelling), (spelling, is_dir))
            if other[0] != spelling:
                raise ManifestError(
                    f"manifest: {spelling!r} collides with {other[0]!r} under case-folding "
                    "or Unicode normalization"
                )
            if other[1] != is_dir:
                raise ManifestError(f"manifest: {spelling!r} is both a file and a directory")


def check_config(data: bytes, manifest: Manifest) -> None:
    """Check config blob bytes against a parsed manifest; raise or return nothing.

    Raises ``DigestMismatch`` if the bytes are not the blob the config descriptor names,
    ``ManifestError`` if the blob is not canonical or its ``modelfs.diffIds`` are not the
    layer digests in layer order.
    """
    # (1) the bytes are the blob the manifest names
    actual = bundle_digest(data)
    if actual != manifest.config.digest or len(data) != manifest.config.size:
        raise DigestMismatch("config", manifest.config.digest, actual)
    # (2) canonical JSON object with descriptor, config, modelfs
    doc = _load_json(data, "config")
    if not isinstance(doc, dict) or rfc8785.dumps(doc) != data:
        raise ManifestError("config: not a canonical RFC 8785 JSON object")
    for key in ("descriptor", "config", "modelfs"):
        if not isinstance(doc.get(key), dict):
            raise ManifestError(f"config: {key}: must be an object")
    # (3) modelfs names exactly the layers
    modelfs = doc["modelfs"]
    if modelfs.get("type") != "layers":
        raise ManifestError("config: modelfs.type: must be 'layers'")
    if modelfs.get("diffIds") != [layer.digest for layer in manifest.layers]:
        raise ManifestError("config: modelfs.diffIds: do not match the manifest layers")


# --- verification ---------------------------------------------------------------------


def verify_tree(
    root: Path,
    manifest: Manifest,
    options: HashOptions = HashOptions(),
    progress: ProgressCallback | None = None,
) -> None:
    """Check that the tree at ``root`` is exactly the bundle ``manifest`` names.

    Raises ``TreeRuleError`` for tree-rule violations and for missing (``bundle.missing``)
    or extra (``bundle.extra``) files, ``DigestMismatch(path, expected, actual)`` for the
    first file (in path order) whose content differs. Returns nothing on success.
    """
    # (1) the tree obeys every tree rule
    files, violations = walk_bundle(root)
    if violations:
        raise TreeRuleError(violations)
    # (2) the same set of paths as the manifest
    on_disk = {f.path: f for f in files}
    expected = {layer.path: layer for layer in manifest.layers}
    problems = [
        TreeViolation(p, "bundle.missing", "in the manifest but not in the tree")
        for p in expected.keys() - on_disk.keys()
    ] + [
        TreeViolation(p, "bundle.extra", "in the tree but not in the manifest")
        for p in on_disk.keys() - expected.keys()
    ]
    if problems:
        raise TreeRuleError(sorted(problems, key=lambda v: (v.path.encode(), v.rule)))
    # (3) sizes first (cheap), then every digest
    wrong_size = [f for f in files if f.size != expected[f.path].size]
    digests = hash_files(wrong_size or files, options, None if wrong_size else progress)
    for path in sorted(digests, key=str.encode):
        if digests[path] != expected[path].digest:
            raise DigestMismatch(path, expected[path].digest, digests[path])
