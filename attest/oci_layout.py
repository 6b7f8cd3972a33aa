"""OCI image layouts: a bundle and its attestations on disk, for air gaps.

Specified in docs/air-gap.md. A layout (OCI image-spec ``image-layout.md``) is a directory
with ``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>``. A bundle is stored as its
manifest bytes verbatim (the bundle digest IS the OCI manifest digest), its config blob and
every layer blob, and is tagged in ``index.json`` by ``org.opencontainers.image.ref.name``.
Each attestation is a referrer: an OCI image manifest whose ``subject`` is the bundle
manifest's descriptor, whose ``artifactType`` says the attestation's kind
(``ARTIFACT_TYPE_BY_KIND``), whose config is the empty descriptor and whose one layer holds
the attestation's exact bytes; it is listed in ``index.json`` untagged, as oras does.

``LayoutWriter`` builds or extends a layout (no network: the caller hands in a ``fill``
callable that writes each blob); ``open_layout`` is the one strict reader of a layout from
anywhere (ours, skopeo's, oras's). Reading, in order:

  (1) the root and every path below it is a real directory or regular file, never a
      symlink; a blob path comes only from a checked ``sha256:<64 hex>`` digest;
  (2) ``oci-layout`` says ``imageLayoutVersion`` 1.0.0; ``index.json`` is bounded
      (``LayoutLimits``), strict JSON, an image index of known descriptors;
  (3) the chosen tag names one image manifest; its bytes match its descriptor (size and
      digest) and parse as a bundle manifest (``attest.manifest.parse_manifest``);
  (4) every untagged manifest is read (bounded); one whose subject is the bundle must be a
      referrer of a known artifactType whose one layer matches its descriptor and whose
      content is of that kind (``attest.verify.detect_kind``);
  (5) ``LayoutBundle.verify_blobs`` streams every config and layer blob through sha256 and
      checks its size (bounded memory) before anything leaves the machine.

Errors: ``LayoutError`` (a ``BundleError``) names the file at fault relative to the layout
root (``index.json``, ``blobs/sha256/<hex>``) and the reason. Caller misuse is ``ValueError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import rfc8785

from modelward.attest import oci_media
from modelward.attest._json import DuplicateKeyError, reject_duplicates
from modelward.attest.digest import HashedBytes
from modelward.attest.errors import BundleError, ManifestError
from modelward.attest.manifest import (
    ARTIFACT_TYPE,
    MANIFEST_MEDIA_TYPE,
    Manifest,
    ManifestLimits,
    bundle_digest,
    parse_manifest,
)

__all__ = [
    "ARTIFACT_TYPE_BY_KIND",
    "DSSE_ENVELOPE_MEDIA_TYPE",
    "EMPTY_DESCRIPTOR",
    "EMPTY_MEDIA_TYPE",
    "INDEX_MEDIA_TYPE",
    "IN_TOTO_ARTIFACT_TYPE",
    "KINDS_BY_ARTIFACT_TYPE",
    "OMS_ARTIFACT_TYPE",
    "REF_NAME_ANNOTATION",
    "SIGSTORE_BUNDLE_ARTIFACT_TYPE",
    "Layout",
    "LayoutAttestation",
    "LayoutBundle",
    "LayoutError",
    "LayoutLimits",
    "LayoutWriter",
    "check_tag",
    "open_layout",
    "referrer_manifest",
]

# -- media types: attest.oci_media's, which /v2 uses too (one referrer digest on both doors)
INDEX_MEDIA_TYPE: Final = oci_media.IMAGE_INDEX
EMPTY_MEDIA_TYPE: Final = oci_media.EMPTY_CONFIG_MEDIA_TYPE
IN_TOTO_ARTIFACT_TYPE: Final = oci_media.INTOTO_DSSE
DSSE_ENVELOPE_MEDIA_TYPE: Final = "application/vnd.dsse.envelope.v1+json"
SIGSTORE_BUNDLE_ARTIFACT_TYPE: Final = oci_media.SIGSTORE_BUNDLE
OMS_ARTIFACT_TYPE: Final = oci_media.OMS_MODEL_SIG
REF_NAME_ANNOTATION: Final = "org.opencontainers.image.ref.name"
ARTIFACT_TYPE_BY_KIND: Final[Mapping[str, str]] = oci_media.ARTIFACT_TYPE_BY_KIND
KINDS_BY_ARTIFACT_TYPE: Final[Mapping[str, frozenset[str]]] = oci_media.KINDS_BY_ARTIFACT_TYPE
_SIGSTORE_BUNDLE_PREFIX: Final = "application/vnd.dev.sigstore.bundle"
# the layer media types accepted on reading, per kind (cosign and oras spell them so)
_LAYER_ACCEPTED: Final[Mapping[str, tuple[str, ...]]] = {
    "dsse": (DSSE_ENVELOPE_MEDIA_TYPE, IN_TOTO_ARTIFACT_TYPE),
    "sigstore": (_SIGSTORE_BUNDLE_PREFIX,),
    "oms": (_SIGSTORE_BUNDLE_PREFIX,),
}
_EMPTY_BLOB: Final = b"{}"
EMPTY_DESCRIPTOR: Final[Mapping[str, Any]] = {
    "mediaType": EMPTY_MEDIA_TYPE,
    "digest": bundle_digest(_EMPTY_BLOB),
    "size": len(_EMPTY_BLOB),
}
_KNOWN_INDEX_ENTRIES: Final = frozenset({MANIFEST_MEDIA_TYPE, INDEX_MEDIA_TYPE})
LAYOUT_VERSION: Final = "1.0.0"
_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
# Docker/OCI tag grammar: what skopeo and oras accept after ``oci:DIR:``.
_TAG_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_READ_SIZE: Final = 1 << 20


class LayoutError(BundleError):
    """A layout is not acceptable; ``file`` is the file at fault, relative to the root."""

    def __init__(self, file: str, reason: str) -> None:
        self.file = file
        self.reason = reason
        super().__init__(f"{file}: {reason}")


@dataclass(frozen=True)
class LayoutLimits:
    """Bounds ``open_layout`` enforces on an untrusted layout (docs/air-gap.md#limits)."""

    max_small_file_bytes: int = 4096  # oci-layout
    max_index_bytes: int = 4 * 2**20
    max_index_entries: int = 10_000
    max_annotation_bytes: int = 64 * 1024  # all annotations of one descriptor
    max_referrer_manifest_bytes: int = 1 * 2**20
    max_referrers: int = 1024
    max_attestation_bytes: int = 16 * 2**20  # attest.verify.MAX_SIGNATURE_BYTES
    max_total_attestation_bytes: int = 32 * 2**20  # one PUT body (64 MiB of base64)
    manifest: ManifestLimits = field(default_factory=ManifestLimits)


@dataclass(frozen=True)
class Entry:
    """One descriptor of ``index.json``: where it is (``manifests[i]``) and what it says."""

    where: str
    media_type: str
    digest: str
    size: int
    artifact_type: str | None
    annotations: Mapping[str, str]
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def tag(self) -> str | None:
        return self.annotations.get(REF_NAME_ANNOTATION)


@dataclass(frozen=True)
class LayoutAttestation:
    """An attestation read from a referrer: its exact bytes, kind and where it came from."""

    kind: str
    artifact_type: str
    data: bytes
    manifest_digest: str
    file: str  # the blob holding ``data``

    @property
    def sha256(self) -> str:
        return bundle_digest(self.data)


@dataclass(frozen=True)
class LayoutBundle:
    """A bundle read from a layout: the parsed manifest (exact bytes in ``manifest.raw``), its
    tag, the blob files still to be streamed, and its attestations."""

    layout: Layout
    tag: str
    manifest: Manifest
    attestations: tuple[LayoutAttestation, ...]

    @property
    def digest(self) -> str:
        return self.manifest.digest

    def blobs(self) -> list[tuple[str, int, Path]]:
        """``(digest, size, path)`` of the config and each distinct layer blob."""
        seen: dict[str, tuple[str, int, Path]] = {}
        descriptors = [(self.manifest.config.digest, self.manifest.config.size)] + [
            (layer.digest, layer.size) for layer in self.manifest.layers
        ]
        for digest, size in descriptors:
            if digest not in seen:
                seen[digest] = (digest, size, self.layout.blob_path(digest))
        return list(seen.values())

    def verify_blobs(self, progress: Callable[[int], None] | None = None) -> None:
        """(5) Stream every config and layer blob through sha256 and check its size.

        Raises ``LayoutError`` naming the first blob file that is missing, a symlink, of
        another size or of other bytes. Memory stays bounded by the read size."""
        for digest, size, _path in self.blobs():
            self.layout.verify_blob(digest, size, progress)


def check_tag(tag: str) -> str:
    """Return ``tag`` if skopeo and oras accept it after ``oci:DIR:``; else ``ValueError``."""
    if not isinstance(tag, str) or _TAG_RE.fullmatch(tag) is None:
        raise ValueError(
            f"tag {str(tag)[:80]!r}: letters, digits, '.', '_' or '-', at most 128, "
            "not starting with '.' or '-'"
        )
    return tag


def _blob_rel(digest: str) -> str:
    return f"blobs/sha256/{digest.removeprefix('sha256:')}"


def _load_json(data: bytes, file: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=reject_duplicates)
    except UnicodeDecodeError as exc:
        raise LayoutError(file, f"not valid UTF-8 (byte {exc.start})") from exc
    except DuplicateKeyError as exc:
        raise LayoutError(file, f"duplicate key {exc.key[:80]!r}") from exc
    except RecursionError as exc:
        raise LayoutError(file, "nested too deeply") from exc
    except ValueError as exc:
        raise LayoutError(file, f"not valid JSON: {exc}") from exc


def _descriptor(value: Any, file: str, where: str, limits: LayoutLimits) -> Entry:
    """A descriptor, checked: known fields typed, a sha256 digest, bounded annotations."""
    if not isinstance(value, dict):
        raise LayoutError(file, f"{where}: must be an object")
    media_type, digest, size = value.get("mediaType"), value.get("digest"), value.get("size")
    if not isinstance(media_type, str):
        raise LayoutError(file, f"{where}.mediaType: must be a string")
    if not isinstance(digest, str) or _DIGEST_RE.fullmatch(digest) is None:
        shown = digest[:80] if isinstance(digest, str) else type(digest).__name__
        raise LayoutError(file, f"{where}.digest: not a sha256 digest: {shown!r}")
    if type(size) is not int or not 0 <= size <= 2**53 - 1:
        raise LayoutError(file, f"{where}.size: must be an integer in 0..2^53-1")
    artifact_type = value.get("artifactType")
    if artifact_type is not None and not isinstance(artifact_type, str):
        raise LayoutError(file, f"{where}.artifactType: must be a string")
    annotations = value.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        raise LayoutError(file, f"{where}.annotations: must map strings to strings")
    if sum(len(k) + len(v) for k, v in annotations.items()) > limits.max_annotation_bytes:
        raise LayoutError(file, f"{where}.annotations: over {limits.max_annotation_bytes} bytes")
    return Entry(where, media_type, digest, size, artifact_type, annotations, value)


class Layout:
    """An OCI image layout opened for reading by ``open_layout`` (steps 1-2 done)."""

    def __init__(self, root: Path, entries: tuple[Entry, ...], limits: LayoutLimits) -> None:
        self.root = root
        self.entries = entries
        self.limits = limits

    # -- (1) paths: only real directories and regular files, from checked digests -------------
    def blob_path(self, digest: str) -> Path:
        if _DIGEST_RE.fullmatch(digest) is None:
            raise ValueError(f"not a sha256 digest: {digest[:80]!r}")
        return self.root / _blob_rel(digest)

    @contextlib.contextmanager
    def _open_blob(self, digest: str) -> Iterator[tuple[Any, int]]:
        """The blob file, opened without following a symlink; yields (file, size)."""
        rel = _blob_rel(digest)
        for directory in ("blobs", "blobs/sha256"):
            _require_kind(self.root, directory, stat.S_ISDIR, "a directory")
        try:
            mode = os.lstat(self.root / rel).st_mode
        except FileNotFoundError as exc:
            raise LayoutError(
                rel, "missing: the layout names this blob but does not hold it"
            ) from exc
        if stat.S_ISLNK(mode):
            raise LayoutError(rel, "a symlink: refused (a layout holds real files only)")
        try:  # O_NOFOLLOW: swapped for a symlink since the lstat, it still fails
            fd = os.open(self.root / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            raise LayoutError(rel, f"cannot be opened: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise LayoutError(rel, "not a regular file")
            yield fh, info.st_size

    def read_blob(self, digest: str, size: int, max_bytes: int, what: str) -> bytes:
        """The bytes of a small blob, checked against its descriptor (size, then digest)."""
        rel = _blob_rel(digest)
        if size > max_bytes:
            raise LayoutError(rel, f"{what}: {size} bytes exceeds the limit of {max_bytes}")
        with self._open_blob(digest) as (fh, actual_size):
            if actual_size != size:
                raise LayoutError(
                    rel,
                    f"{what} does not match its descriptor: {actual_size} bytes, "
                    f"the descriptor says {size}",
                )
            data = HashedBytes(fh.read(size + 1))  # the digest travels on (parse_manifest)
        if len(data) != size or data.digest != digest:
            raise LayoutError(
                rel, f"{what} does not match its descriptor: it hashes to {data.digest}"
            )
        return data

    def verify_blob(
        self, digest: str, size: int, progress: Callable[[int], None] | None = None
    ) -> None:
        """Stream one blob through sha256; ``LayoutError`` unless it is ``size`` bytes
        hashing to ``digest``."""
        rel = _blob_rel(digest)
        with self._open_blob(digest) as (fh, actual_size):
            if actual_size != size:
                raise LayoutError(rel, f"{actual_size} bytes, the manifest says {size}")
            hasher, have = hashlib.sha256(), 0
            while block := fh.read(min(_READ_SIZE, size + 1 - have)):
                hasher.update(block)
                have += len(block)
                if progress is not None:
                    progress(len(block))
                if have > size:
                    break
        actual = "sha256:" + hasher.hexdigest()
        if have != size or actual != digest:
            raise LayoutError(rel, f"digest mismatch: the manifest says {digest}, got {actual}")

    # -- (3)-(4) a bundle and its referrers ---------------------------------------------------
    def tags(self) -> dict[str, Entry]:
        """Every tag of ``index.json`` and the descriptor it names."""
        return {e.tag: e for e in self.entries if e.tag is not None}

    def bundle(self, tag: str | None = None) -> LayoutBundle:
        """The bundle ``tag`` names (``None``: the only tag), with its attestations.

        Raises ``LayoutError`` naming the file at fault (steps 3-4)."""
        limits = self.limits
        tags = self.tags()
        # (3): the tag names one image manifest.
        if tag is None:
            if len(tags) != 1:
                shown = ", ".join(sorted(tags)[:20]) or "(none)"
                raise LayoutError("index.json", f"{len(tags)} tags, choose one with --tag: {shown}")
            tag = next(iter(tags))
        entry = tags.get(tag)
        if entry is None:
            shown = ", ".join(sorted(tags)[:20]) or "(none)"
            raise LayoutError("index.json", f"no tag {tag[:128]!r}; tags: {shown}")
        if entry.media_type != MANIFEST_MEDIA_TYPE:
            raise LayoutError(
                "index.json",
                f"{entry.where}: tag {tag!r} names a {entry.media_type[:120]!r}, "
                f"not a bundle ({MANIFEST_MEDIA_TYPE})",
            )
        if entry.artifact_type not in (None, ARTIFACT_TYPE):
            raise LayoutError(
                "index.json",
                f"{entry.where}.artifactType: unknown media type {entry.artifact_type[:120]!r}",
            )
        raw = self.read_blob(entry.digest, entry.size, limits.manifest.max_bytes, "manifest")
        try:
            manifest = parse_manifest(raw, limits.manifest)
        except ManifestError as exc:
            raise LayoutError(_blob_rel(entry.digest), str(exc)) from exc
        # (4): every untagged manifest whose subject is the bundle is one of its attestations.
        found: list[LayoutAttestation] = []
        total = 0
        for other in self.entries:
            if other.tag is not None or other.media_type != MANIFEST_MEDIA_TYPE:
                continue
            attestation = self._referrer(other, manifest)
            if attestation is None:
                continue
            found.append(attestation)
            total += len(attestation.data)
            if len(found) > limits.max_referrers:
                raise LayoutError(
                    "index.json", f"more than {limits.max_referrers} referrers of {manifest.digest}"
                )
            if total > limits.max_total_attestation_bytes:
                raise LayoutError(
                    attestation.file,
                    f"the attestations of {manifest.digest} exceed "
                    f"{limits.max_total_attestation_bytes} bytes together",
                )
        return LayoutBundle(self, tag, manifest, tuple(found))

    def _referrer(self, entry: Entry, bundle: Manifest) -> LayoutAttestation | None:
        """The attestation an untagged manifest holds if its subject is ``bundle``."""
        limits = self.limits
        rel = _blob_rel(entry.digest)
        if entry.size > limits.max_referrer_manifest_bytes:
            raise LayoutError(
                "index.json",
                f"{entry.where}: an untagged manifest of {entry.size} bytes "
                f"(referrers are at most {limits.max_referrer_manifest_bytes})",
            )
        raw = self.read_blob(entry.digest, entry.size, entry.size, "manifest")
        doc = _load_json(raw, rel)
        if not isinstance(doc, dict):
            raise LayoutError(rel, "not a JSON object")
        subject = doc.get("subject")
        if subject is None:
            return None
        described = _descriptor(subject, rel, "subject", limits)
        if described.digest != bundle.digest:
            return None  # a referrer of something else
        if described.size != len(bundle.raw) or described.media_type != MANIFEST_MEDIA_TYPE:
            raise LayoutError(rel, "subject: does not match the bundle manifest's descriptor")
        if doc.get("mediaType") != MANIFEST_MEDIA_TYPE or doc.get("schemaVersion") != 2:
            raise LayoutError(rel, f"not an OCI image manifest ({MANIFEST_MEDIA_TYPE}, v2)")
        artifact_type = doc.get("artifactType")
        admitted = (
            KINDS_BY_ARTIFACT_TYPE.get(artifact_type) if isinstance(artifact_type, str) else None
        )
        if admitted is None or not isinstance(artifact_type, str):
            raise LayoutError(
                rel,
                f"artifactType: unknown media type {str(artifact_type)[:120]!r}; known: "
                f"{', '.join(sorted(KINDS_BY_ARTIFACT_TYPE))}",
            )
        if entry.artifact_type not in (None, artifact_type):
            raise LayoutError(
                "index.json",
                f"{entry.where}.artifactType: {entry.artifact_type[:120]!r} "
                f"differs from the manifest's {artifact_type!r}",
            )
        _descriptor(doc.get("config"), rel, "config", limits)
        layers = doc.get("layers")
        if not isinstance(layers, list) or len(layers) != 1:
            raise LayoutError(rel, "layers: a referrer holds exactly one layer")
        layer = _descriptor(layers[0], rel, "layers[0]", limits)
        if not any(layer.media_type.startswith(_LAYER_ACCEPTED[k]) for k in admitted):
            raise LayoutError(
                rel,
                f"layers[0].mediaType: unknown media type {layer.media_type[:120]!r} "
                f"for {artifact_type}",
            )
        data = self.read_blob(layer.digest, layer.size, limits.max_attestation_bytes, "attestation")
        kind = _check_kind(data, artifact_type, admitted, _blob_rel(layer.digest))
        return LayoutAttestation(kind, artifact_type, data, entry.digest, _blob_rel(layer.digest))


def _check_kind(data: bytes, artifact_type: str, admitted: frozenset[str], file: str) -> str:
    """The attestation's kind, from its content; one its referrer's artifactType admits."""
    from modelward.attest.errors import UnknownSignatureFormat
    from modelward.attest.verify import detect_kind

    try:
        actual = detect_kind(data)
    except UnknownSignatureFormat as exc:
        raise LayoutError(file, str(exc)) from exc
    if actual not in admitted:
        raise LayoutError(file, f"a {actual} attestation under artifactType {artifact_type!r}")
    return actual


def _require_kind(root: Path, rel: str, test: Callable[[int], bool], what: str) -> None:
    try:
        mode = os.lstat(root / rel).st_mode
    except FileNotFoundError as exc:
        raise LayoutError(rel, "missing: not an OCI image layout") from exc
    if stat.S_ISLNK(mode):
        raise LayoutError(rel, "a symlink: refused (a layout holds real files only)")
    if not test(mode):
        raise LayoutError(rel, f"not {what}")


def _read_small(root: Path, rel: str, max_bytes: int) -> bytes:
    _require_kind(root, rel, stat.S_ISREG, "a regular file")
    fd = os.open(root / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise LayoutError(rel, f"{size} bytes exceeds the limit of {max_bytes}")
        data: bytes = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise LayoutError(rel, f"more than {max_bytes} bytes")
    return data


def open_layout(root: Path, limits: LayoutLimits = LayoutLimits()) -> Layout:
    """Open an untrusted OCI image layout (steps 1-2); ``Layout.bundle`` reads a bundle.

    Raises ``LayoutError`` naming the file at fault."""
    root = Path(root)
    # (1): the root is a real directory.
    try:
        mode = os.lstat(root).st_mode
    except FileNotFoundError as exc:
        raise LayoutError(str(root), "no such directory") from exc
    if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
        raise LayoutError(str(root), "not a directory (a symlink is refused)")
    # (2): oci-layout, then index.json, bounded and strict.
    doc = _load_json(_read_small(root, "oci-layout", limits.max_small_file_bytes), "oci-layout")
    if not isinstance(doc, dict) or doc.get("imageLayoutVersion") != LAYOUT_VERSION:
        raise LayoutError("oci-layout", f"imageLayoutVersion must be {LAYOUT_VERSION!r}")
    _require_kind(root, "blobs", stat.S_ISDIR, "a directory")
    index = _load_json(_read_small(root, "index.json", limits.max_index_bytes), "index.json")
    if not isinstance(index, dict) or index.get("schemaVersion") != 2:
        raise LayoutError("index.json", "not an image index (schemaVersion 2)")
    if index.get("mediaType", INDEX_MEDIA_TYPE) != INDEX_MEDIA_TYPE:
        raise LayoutError(
            "index.json", f"mediaType: unknown media type {str(index['mediaType'])[:120]!r}"
        )
    manifests = index.get("manifests")
    if not isinstance(manifests, list):
        raise LayoutError("index.json", "manifests: must be an array")
    if len(manifests) > limits.max_index_entries:
        raise LayoutError(
            "index.json",
            f"{len(manifests)} manifests exceeds the limit of {limits.max_index_entries}",
        )
    entries = tuple(
        _descriptor(m, "index.json", f"manifests[{i}]", limits) for i, m in enumerate(manifests)
    )
    tagged: dict[str, Entry] = {}
    for entry in entries:
        if entry.media_type not in _KNOWN_INDEX_ENTRIES:
            raise LayoutError(
                "index.json",
                f"{entry.where}.mediaType: unknown media type {entry.media_type[:120]!r}",
            )
        tag = entry.tag
        if tag is not None:
            first = tagged.setdefault(tag, entry)
            if first.digest != entry.digest:
                raise LayoutError(
                    "index.json",
                    f"tag {tag[:128]!r} names two manifests: {first.digest} "
                    f"({first.where}) and {entry.digest} ({entry.where})",
                )
    return Layout(root, entries, limits)


# -- writing -----------------------------------------------------------------------------
def referrer_manifest(
    subject_digest: str, subject_size: int, data: bytes, kind: str, predicate_type: str
) -> bytes:
    """Canonical bytes of the referrer manifest holding attestation ``data`` of ``kind``
    (``dsse``, ``sigstore``, ``oms``) about the bundle manifest ``subject_digest``: made by
    ``attest.oci_media.referrer_manifest``, the one maker ``/v2`` uses too, so a referrer
    keeps its digest across an air gap. Raises ``ValueError`` for an unknown kind."""
    if kind not in ARTIFACT_TYPE_BY_KIND:
        raise ValueError(f"unknown attestation kind {kind!r}")
    return oci_media.referrer_manifest(
        kind=kind,
        predicate_type=predicate_type,
        attestation_digest=bundle_digest(data),
        attestation_size=len(data),
        subject_digest=subject_digest,
        subject_size=subject_size,
    )


class LayoutWriter:
    """Write a bundle and its attestations into a new or existing layout, all or nothing.

    A new directory is built beside ``root`` and renamed into place by ``commit``; into an
    existing layout, blobs are added under their digest and ``index.json`` is replaced
    atomically last. Until ``commit``, ``abort`` (or leaving the ``with`` block by an
    exception) removes every file this writer added. Raises ``LayoutError`` when ``root``
    exists and is not a layout, or a tag already names another manifest there.
    """

    def __init__(self, root: Path, limits: LayoutLimits = LayoutLimits()) -> None:
        self.root = Path(root)
        self._added: list[Path] = []
        self._made_parents: list[Path] = []  # created for a new layout; removed on abort
        self._new_entries: list[dict[str, Any]] = []
        self._done = False
        if self.root.exists() or self.root.is_symlink():
            if self.root.is_dir() and not self.root.is_symlink() and not any(self.root.iterdir()):
                self._existing: Layout | None = None
                self._dir = self.root
                self._fresh = False
            else:
                self._existing = open_layout(self.root, limits)
                self._dir = self.root
                self._fresh = False
        else:
            self._existing = None
            self._fresh = True
            missing = [p for p in [self.root.parent, *self.root.parent.parents] if not p.exists()]
            self.root.parent.mkdir(parents=True, exist_ok=True)
            self._made_parents = missing
            self._dir = self.root.parent / f".{self.root.name}.partial-{secrets.token_hex(4)}"
            self._dir.mkdir()
        (self._dir / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> LayoutWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if not self._done:
            self.abort()

    def blob_file(self, digest: str) -> Path:
        """Where blob ``digest`` goes in the layout being written."""
        if _DIGEST_RE.fullmatch(digest) is None:
            raise ValueError(f"not a sha256 digest: {digest[:80]!r}")
        return self._dir / _blob_rel(digest)

    def _have(self, digest: str, size: int) -> bool:
        """The blob is there already, of the right size and bytes (re-hashed)."""
        path = self.blob_file(digest)
        if path.is_symlink() or not path.is_file():
            return False
        try:
            Layout(self._dir, (), LayoutLimits()).verify_blob(digest, size)
        except LayoutError:
            return False
        return True

    def put_bytes(self, data: bytes) -> str:
        """Add a small blob; returns its digest."""
        digest = bundle_digest(data)
        if not self._have(digest, len(data)):
            path = self.blob_file(digest)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
            self._added.append(path)
        return digest

    def put_file(
        self, digest: str, size: int, fill: Callable[[Path], None], *, fill_verifies: bool
    ) -> None:
        """Add blob ``digest`` of ``size`` bytes unless present: ``fill(path)`` writes it.

        When ``fill_verifies`` the caller's ``fill`` checked size and digest itself (as
        ``RegistryClient.download_blob`` does); otherwise the file is re-hashed here.
        Raises ``LayoutError`` when what ``fill`` wrote is not that blob."""
        if self._have(digest, size):
            return
        path = self.blob_file(digest)
        self._added.append(path)
        self._added.append(path.with_name(f".{path.name}.partial"))
        fill(path)
        if not fill_verifies:
            Layout(self._dir, (), LayoutLimits()).verify_blob(digest, size)
        elif path.stat().st_size != size:
            raise LayoutError(
                _blob_rel(digest), f"written with {path.stat().st_size} bytes, not {size}"
            )

    def add_bundle(self, manifest_raw: bytes, tag: str) -> None:
        """Add the bundle manifest bytes verbatim and tag it (its blobs go through
        ``put_file``). Raises ``LayoutError`` if ``tag`` names another manifest here."""
        check_tag(tag)
        manifest_raw = HashedBytes(manifest_raw)  # hashed once here or before, reused below
        digest = manifest_raw.digest
        if self._existing is not None:
            other = self._existing.tags().get(tag)
            if other is not None and other.digest != digest:
                raise LayoutError(
                    "index.json",
                    f"tag {tag!r} already names {other.digest} in {self.root}; "
                    "choose another --tag",
                )
        self.put_bytes(manifest_raw)
        self._new_entries.append(
            {
                "mediaType": MANIFEST_MEDIA_TYPE,
                "artifactType": ARTIFACT_TYPE,
                "digest": digest,
                "size": len(manifest_raw),
                "annotations": {REF_NAME_ANNOTATION: tag},
            }
        )

    def add_attestation(self, subject: bytes, data: bytes, kind: str, predicate_type: str) -> str:
        """Add attestation ``data`` as a referrer of the bundle manifest ``subject``; returns
        the referrer manifest's digest."""
        self.put_bytes(_EMPTY_BLOB)
        self.put_bytes(data)
        raw = referrer_manifest(bundle_digest(subject), len(subject), data, kind, predicate_type)
        digest = self.put_bytes(raw)
        doc = json.loads(raw)
        self._new_entries.append(
            {
                "mediaType": MANIFEST_MEDIA_TYPE,
                "artifactType": doc["artifactType"],
                "digest": digest,
                "size": len(raw),
                "annotations": doc["annotations"],
            }
        )
        return digest

    def commit(self) -> None:
        """Write ``index.json`` (existing entries kept, new ones added once) and
        ``oci-layout``; a new layout appears at ``root`` at once."""
        old = [dict(e.raw) for e in self._existing.entries] if self._existing else []
        seen = {(e["digest"], (e.get("annotations") or {}).get(REF_NAME_ANNOTATION)) for e in old}
        entries = list(old)
        for new in self._new_entries:
            key = (new["digest"], new["annotations"].get(REF_NAME_ANNOTATION))
            if key not in seen:
                seen.add(key)
                entries.append(new)
        index: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": entries,
        }
        layout_file = self._dir / "oci-layout"
        if not layout_file.exists():
            layout_file.write_bytes(rfc8785.dumps({"imageLayoutVersion": LAYOUT_VERSION}))
            self._added.append(layout_file)
        tmp = self._dir / f".index.json.{secrets.token_hex(4)}.tmp"
        tmp.write_bytes(rfc8785.dumps(index))
        tmp.replace(self._dir / "index.json")
        if self._fresh:
            try:
                self._dir.rename(self.root)
            except OSError as exc:
                self.abort()
                raise LayoutError(str(self.root), f"cannot be created: {exc.strerror}") from exc
        self._done = True

    def abort(self) -> None:
        """Remove everything this writer added (a new layout: the whole staging directory)."""
        self._done = True
        if self._fresh:
            shutil.rmtree(self._dir, ignore_errors=True)
            for parent in self._made_parents:  # innermost first
                with contextlib.suppress(OSError):
                    parent.rmdir()
            return
        for path in reversed(self._added):
            path.unlink(missing_ok=True)
        if self._existing is None:  # it was an empty directory: leave it empty
            for sub in ("blobs/sha256", "blobs"):
                with contextlib.suppress(OSError):
                    (self._dir / sub).rmdir()
