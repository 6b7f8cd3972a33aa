"""Walk a bundle directory and enforce the tree rules (docs/bundle-format.md#tree-rules).

A bundle tree may hold only regular, non-executable files whose relative POSIX paths are
portable and unambiguous. Rule ids, each reported with the path at fault:

- ``tree.symlink``      a symbolic link (never followed)
- ``tree.special``      a device, fifo or socket
- ``tree.name``         a name that is not valid UTF-8, holds NUL/control characters or a
                        backslash, or is ``.``/``..``
- ``tree.nfc``          a name that is not NFC-normalized
- ``tree.collision``    two paths equal under case-folding or Unicode normalization
- ``tree.executable``   a file with an executable bit
- ``tree.unreadable``   an entry that cannot be stat'ed or listed

Ignored entirely: ``.git/`` and ``.modelward/`` at any level, and the bundle's own
signature file ``model.sig`` at the root. Directories are not part of a bundle: an empty
directory does not exist in the manifest.

Excluded paths (``exclude``, what ``--ignore-path`` names): a file, or a directory and
everything under it, left out of the bundle. The walk never opens, stats or descends into
them, so they are in no manifest, never scanned, never materialized; ``normalize_excludes``
checks them (relative, inside the tree).
"""

from __future__ import annotations

import os
import stat
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from modelward.attest.errors import TreeRuleError, TreeViolation

IGNORED_DIRS = frozenset({".git", ".modelward"})
IGNORED_ROOT_FILES = frozenset({"model.sig"})


@dataclass(frozen=True)
class BundleFile:
    """A regular file of a bundle: its relative POSIX path, location on disk and size."""

    path: str
    abspath: Path
    size: int


def check_name(name: str) -> TreeViolation | None:
    """Check one path component; return the violation or None. ``name`` is decoded text."""
    if name in {"", ".", ".."}:
        return TreeViolation(name, "tree.name", f"path component {name!r} is not allowed")
    bad = [c for c in name if _forbidden_char(c)]
    if bad:
        return TreeViolation(
            name,
            "tree.name",
            f"name holds a control, bidi-override, slash or backslash character {bad[0]!r}",
        )
    if unicodedata.normalize("NFC", name) != name:
        return TreeViolation(name, "tree.nfc", "name is not NFC-normalized")
    return None


def _forbidden_char(c: str) -> bool:
    code = ord(c)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F  # DEL and C1 controls
        or 0x202A <= code <= 0x202E  # bidi embeddings and overrides
        or 0x2066 <= code <= 0x2069  # bidi isolates
        or c in "\\/"
    )


def check_relpath(path: str) -> TreeViolation | None:
    """Check a relative POSIX path as it would appear in a manifest."""
    if not path or path.startswith("/"):
        return TreeViolation(path, "tree.name", "path must be relative and non-empty")
    for part in path.split("/"):
        problem = check_name(part)
        if problem is not None:
            return TreeViolation(path, problem.rule, problem.reason)
    return None


def collision_key(path: str) -> str:
    """The key under which two paths collide: NFC, case-folded, NFC again."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", path).casefold())


def normalize_excludes(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` as normalized relative POSIX paths (``a/./b/`` -> ``a/b``), deduplicated.

    Raises ``ValueError`` naming a path that is absolute, climbs out with ``..``, is empty
    or ``.`` (which would exclude the whole tree).
    """
    result: dict[str, None] = {}
    for raw in paths:
        path = PurePosixPath(raw)
        if path.is_absolute() or ".." in path.parts or str(path) in {"", "."}:
            raise ValueError(f"ignore path {raw!r} must be relative, inside the model, non-empty")
        result[str(path)] = None
    return tuple(result)


def is_excluded(path: str, excludes: Iterable[str]) -> bool:
    """Whether the relative ``path`` is one of ``excludes`` or lies under one."""
    return any(path == p or path.startswith(p + "/") for p in excludes)


def walk_bundle(
    root: Path, exclude: Iterable[str] = ()
) -> tuple[list[BundleFile], list[TreeViolation]]:
    """List the files of the bundle at ``root`` and every tree-rule violation.

    Files are returned sorted by the UTF-8 bytes of their path. Offending entries are
    reported, never followed or opened. Entries at an ``exclude`` path (normalized, see
    ``normalize_excludes``) are skipped whole. Raises ``NotADirectoryError`` if ``root`` is
    not a directory, ``ValueError`` for a bad exclude path.
    """
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a directory")
    excludes = frozenset(normalize_excludes(exclude))
    files: list[BundleFile] = []
    violations: list[TreeViolation] = []
    seen: dict[str, str] = {}
    _walk(os.fsencode(root), "", files, violations, seen, excludes=excludes)
    files.sort(key=lambda f: f.path.encode())
    violations.sort(key=lambda v: (v.path.encode(), v.rule))
    return files, violations


def list_bundle_files(root: Path, exclude: Iterable[str] = ()) -> list[BundleFile]:
    """The files of the bundle at ``root`` (less ``exclude``); raises ``TreeRuleError`` on
    any violation, ``ValueError`` for a bad exclude path."""
    files, violations = walk_bundle(root, exclude)
    if violations:
        raise TreeRuleError(violations)
    return files


def _display(parent: str, raw: bytes) -> str:
    return parent + raw.decode("utf-8", errors="backslashreplace")


def _walk(
    directory: bytes,
    parent: str,
    files: list[BundleFile],
    violations: list[TreeViolation],
    seen: dict[str, str],
    *,
    excludes: frozenset[str],
) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        violations.append(TreeViolation(parent or ".", "tree.unreadable", str(exc.strerror)))
        return
    for entry in entries:
        raw = entry.name
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            violations.append(
                TreeViolation(_display(parent, raw), "tree.name", "name is not valid UTF-8")
            )
            continue
        path = parent + name
        if path in excludes:  # never descended into, so an exact match covers subpaths
            continue
        if entry.is_dir(follow_symlinks=False) and name in IGNORED_DIRS:
            continue
        if not parent and name in IGNORED_ROOT_FILES and entry.is_file(follow_symlinks=False):
            continue
        problem = check_name(name)
        if problem is not None:
            violations.append(TreeViolation(path, problem.rule, problem.reason))
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            violations.append(TreeViolation(path, "tree.unreadable", str(exc.strerror)))
            continue
        key = collision_key(path)
        other = seen.get(key)
        if other is not None:
            violations.append(
                TreeViolation(
                    path,
                    "tree.collision",
                    f"collides with {other!r} under case-folding or Unicode normalization",
                )
            )
        else:
            seen[key] = path
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            try:
                target = os.fsdecode(os.readlink(entry.path))  # noqa: PTH115 - bytes path
            except OSError:
                target = "?"
            violations.append(TreeViolation(path, "tree.symlink", f"symbolic link to {target!r}"))
        elif stat.S_ISDIR(mode):
            _walk(entry.path, path + "/", files, violations, seen, excludes=excludes)
        elif stat.S_ISREG(mode):
            if mode & 0o111:
                reason = f"executable bit set (mode {mode & 0o777:o})"
                violations.append(TreeViolation(path, "tree.executable", reason))
            elif problem is None:
                files.append(BundleFile(path, Path(os.fsdecode(entry.path)), st.st_size))
        else:
            violations.append(
                TreeViolation(path, "tree.special", "device, fifo or socket is not a regular file")
            )
