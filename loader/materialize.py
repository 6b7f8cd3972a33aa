"""Materialize a verified bundle as a read-only directory, atomically.

``stage`` builds the tree in a private temporary directory next to its final place
(hardlinks into the cache's blobs, a copy where the filesystem refuses links) and writes
the exact manifest bytes under ``.modelward/``; the caller checks the staged tree
(signatures, scanner, policy), then ``commit`` makes it read-only and renames it into
place, or ``discard`` removes it. A half-built tree is never visible under the digest.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from modelward.attest.digest import HashedBytes
from modelward.attest.errors import DigestMismatch
from modelward.attest.manifest import Manifest, parse_manifest
from modelward.attest.tree import check_relpath
from modelward.loader.cache import Cache
from modelward.loader.errors import InputError

__all__ = ["MANIFEST_NAME", "commit", "discard", "read_local_manifest", "stage"]

MANIFEST_NAME = ".modelward/manifest.json"


def stage(cache: Cache, manifest: Manifest) -> Path:
    """Build the bundle tree from cached blobs in a new temporary directory; return it."""
    for layer in manifest.layers:
        problem = check_relpath(layer.path)
        if problem is not None:
            raise InputError(f"manifest layer {layer.path!r}: {problem.reason}")
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache.staging_root()))
    try:
        for layer in manifest.layers:
            target = staging / layer.path
            target.parent.mkdir(parents=True, exist_ok=True)
            blob = cache.blob_path(layer.digest)
            try:
                os.link(blob, target)
            except OSError:
                shutil.copyfile(blob, target)
                target.chmod(0o444)
        meta = staging / ".modelward"
        meta.mkdir(exist_ok=True)
        (meta / "manifest.json").write_bytes(manifest.raw)
    except BaseException:
        discard(staging)
        raise
    return staging


def _make_read_only(root: Path) -> None:
    read_only_dir = 0o555  # r-x for all: a bundle is public to the worker, never writable
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            (Path(dirpath) / name).chmod(0o444)
        for name in dirnames:
            (Path(dirpath) / name).chmod(read_only_dir)
    root.chmod(read_only_dir)


def commit(staging: Path, final: Path, *, replace: bool = False) -> Path:
    """Make ``staging`` read-only and rename it to ``final``; an existing ``final`` (another
    pull won the race, or an earlier pull) is kept and ``staging`` removed, unless
    ``replace`` (``pull --repair``): then the old tree is moved aside, the new one renamed
    in, and only then the old one removed."""
    _make_read_only(staging)
    final.parent.mkdir(parents=True, exist_ok=True)
    replaced: Path | None = None
    if replace and final.is_dir():
        replaced = Path(tempfile.mkdtemp(prefix=".replaced-", dir=final.parent))
        final.rename(replaced / "tree")
    try:
        staging.rename(final)
    except OSError:
        if not final.is_dir():
            discard(staging)
            raise
        discard(staging)
    finally:
        if replaced is not None:
            discard(replaced)
    return final


def discard(path: Path) -> None:
    """Remove a staged (possibly read-only) tree."""
    if not path.exists():
        return
    for dirpath, _dirnames, _filenames in os.walk(path):
        Path(dirpath).chmod(stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)


def read_local_manifest(root: Path, expected_digest: str | None = None) -> Manifest:
    """The manifest a materialized bundle carries, checked against its digest (the
    directory name, or ``expected_digest``). Raises ``InputError`` or ``DigestMismatch``."""
    path = root / MANIFEST_NAME
    try:
        raw = HashedBytes(path.read_bytes())  # hashed once; parse_manifest reuses the digest
    except OSError as exc:
        raise InputError(
            f"{root}: not a materialized bundle ({MANIFEST_NAME}: {exc.strerror})"
        ) from None
    expected = expected_digest or f"sha256:{root.name}"
    if raw.digest != expected:
        raise DigestMismatch(str(path), expected, raw.digest)
    return parse_manifest(raw)
