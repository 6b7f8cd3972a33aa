"""Tree rules (attest/tree.py): one test per attack, each naming the path at fault."""

from __future__ import annotations

import os
import sys
import unicodedata
from pathlib import Path

import pytest

from modelward.attest.errors import TreeRuleError
from modelward.attest.tree import check_relpath, collision_key, list_bundle_files, walk_bundle


def _write(path: Path, data: bytes = b"x", mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


def _rules(root: Path) -> dict[str, set[str]]:
    _, violations = walk_bundle(root)
    found: dict[str, set[str]] = {}
    for v in violations:
        found.setdefault(v.path, set()).add(v.rule)
    return found


def _case_sensitive(directory: Path) -> bool:
    probe = directory / "CaseProbe"
    probe.write_bytes(b"")
    try:
        return not (directory / "caseprobe").exists()
    finally:
        probe.unlink()


def test_clean_tree_lists_regular_files_sorted_by_utf8_bytes(tmp_path: Path) -> None:
    _write(tmp_path / "b.json")
    _write(tmp_path / "a" / "z.txt")
    _write(tmp_path / "ä.md")
    _write(tmp_path / "C.json")
    files = list_bundle_files(tmp_path)
    assert [f.path for f in files] == ["C.json", "a/z.txt", "b.json", "ä.md"]
    assert files[0].size == 1
    assert files[0].abspath == tmp_path / "C.json"


def test_symlink_to_etc_passwd_is_refused_not_followed(tmp_path: Path) -> None:
    _write(tmp_path / "config.json")
    (tmp_path / "weights.safetensors").symlink_to("/etc/passwd")
    with pytest.raises(TreeRuleError) as info:
        list_bundle_files(tmp_path)
    (violation,) = info.value.violations
    assert violation.path == "weights.safetensors"
    assert violation.rule == "tree.symlink"
    assert "/etc/passwd" in violation.reason


def test_symlinked_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "etc").symlink_to("/etc", target_is_directory=True)
    assert _rules(tmp_path) == {"etc": {"tree.symlink"}}


def test_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    assert _rules(tmp_path) == {"pipe": {"tree.special"}}


def test_socket_is_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s"
    if len(os.fsencode(path)) > 100:
        pytest.skip("temporary path too long for a unix socket")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        assert _rules(tmp_path) == {"s": {"tree.special"}}


@pytest.mark.parametrize("mode", [0o755, 0o744, 0o654, 0o645])
def test_any_executable_bit_is_refused(tmp_path: Path, mode: int) -> None:
    _write(tmp_path / "sub" / "run.sh", b"#!/bin/sh\n", mode)
    assert _rules(tmp_path) == {"sub/run.sh": {"tree.executable"}}


def test_case_colliding_names_are_refused(tmp_path: Path) -> None:
    if not _case_sensitive(tmp_path):
        pytest.skip("file system is case-insensitive")
    _write(tmp_path / "Config.json")
    _write(tmp_path / "config.json")
    found = _rules(tmp_path)
    assert found == {"config.json": {"tree.collision"}}


def test_case_colliding_directories_are_refused(tmp_path: Path) -> None:
    if not _case_sensitive(tmp_path):
        pytest.skip("file system is case-insensitive")
    _write(tmp_path / "Sub" / "a.json")
    _write(tmp_path / "sub" / "b.json")
    assert _rules(tmp_path) == {"sub": {"tree.collision"}}


def test_nfc_nfd_colliding_names_are_refused(tmp_path: Path) -> None:
    nfc = unicodedata.normalize("NFC", "café.json")
    nfd = unicodedata.normalize("NFD", "café.json")
    assert nfc != nfd
    _write(tmp_path / nfc)
    _write(tmp_path / nfd)
    if len(list(tmp_path.iterdir())) != 2:
        pytest.skip("file system normalizes names")
    # NFD sorts first (b"e" < b"\xc3"): it breaks the NFC rule, the NFC name collides with it
    assert _rules(tmp_path) == {nfd: {"tree.nfc"}, nfc: {"tree.collision"}}


def test_nfd_name_alone_is_refused(tmp_path: Path) -> None:
    nfd = unicodedata.normalize("NFD", "résumé.md")
    _write(tmp_path / nfd)
    assert _rules(tmp_path) == {nfd: {"tree.nfc"}}


@pytest.mark.parametrize("name", ["a\nb.json", "tab\there", "bell\x07", "del\x7f", "back\\slash"])
def test_control_characters_and_backslash_in_names_are_refused(tmp_path: Path, name: str) -> None:
    _write(tmp_path / name)
    assert _rules(tmp_path) == {name: {"tree.name"}}


def test_invalid_utf8_name_is_refused(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path) + b"/bad\xff\xfename.json"
    fd = os.open(raw, os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    files, violations = walk_bundle(tmp_path)
    assert files == []
    (violation,) = violations
    assert violation.rule == "tree.name"
    assert violation.path.startswith("bad")
    assert "UTF-8" in violation.reason


def test_git_and_modelward_dirs_and_root_signature_are_ignored(tmp_path: Path) -> None:
    _write(tmp_path / "config.json")
    _write(tmp_path / ".git" / "hooks" / "pre-commit", b"#!/bin/sh\n", 0o755)
    (tmp_path / ".git" / "HEAD.lnk").symlink_to("/etc/passwd")
    _write(tmp_path / "sub" / ".git" / "config")
    _write(tmp_path / ".modelward" / "cache")
    _write(tmp_path / "model.sig")
    assert [f.path for f in list_bundle_files(tmp_path)] == ["config.json"]


def test_signature_name_below_root_is_a_bundle_file(tmp_path: Path) -> None:
    _write(tmp_path / "sub" / "model.sig")
    assert [f.path for f in list_bundle_files(tmp_path)] == ["sub/model.sig"]


def test_git_as_a_file_is_not_ignored(tmp_path: Path) -> None:
    _write(tmp_path / ".git", b"gitdir: /elsewhere\n")
    assert [f.path for f in list_bundle_files(tmp_path)] == [".git"]


def test_empty_directories_do_not_exist_in_the_bundle(tmp_path: Path) -> None:
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    _write(tmp_path / "x.json")
    assert [f.path for f in list_bundle_files(tmp_path)] == ["x.json"]


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root reads anything")
def test_unreadable_directory_is_reported(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    _write(locked / "x.json")
    locked.chmod(0)
    try:
        assert _rules(tmp_path) == {"locked/": {"tree.unreadable"}}
    finally:
        locked.chmod(0o755)


def test_every_violation_is_reported_at_once(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "pipe")
    _write(tmp_path / "run", b"", 0o700)
    with pytest.raises(TreeRuleError) as info:
        list_bundle_files(tmp_path)
    rules = [(v.path, v.rule) for v in info.value.violations]
    assert rules == [("link", "tree.symlink"), ("pipe", "tree.special"), ("run", "tree.executable")]
    assert "link: tree.symlink" in str(info.value)


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        walk_bundle(_write(tmp_path / "file"))


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../x", "a/../b", "a/./b", "a//b", "a/", "a\\b", "a\x00b", "a\x1fb",
     unicodedata.normalize("NFD", "é")],
)  # fmt: skip
def test_check_relpath_rejects_unsafe_manifest_paths(path: str) -> None:
    assert check_relpath(path) is not None


@pytest.mark.parametrize("path", ["a", "a/b.json", "ä/ß.md", ".hidden", "a b/c"])
def test_check_relpath_accepts_portable_paths(path: str) -> None:
    assert check_relpath(path) is None


def test_collision_key_folds_case_and_normalization() -> None:
    assert collision_key("A/Café") == collision_key(unicodedata.normalize("NFD", "a/CAFÉ"))
    assert collision_key("Straße") == collision_key("STRASSE")
    assert collision_key("a") != collision_key("b")


@pytest.mark.parametrize(
    "name",
    ["c1\u0085name", "evil\u202etxt.safetensors", "iso\u2066late", "del\u007f"],
    ids=["c1-control", "bidi-override", "bidi-isolate", "del"],
)
def test_c1_controls_and_bidi_overrides_in_names_are_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"x")
    files, violations = walk_bundle(tmp_path)
    assert files == []
    assert [(v.path, v.rule) for v in violations] == [(name, "tree.name")]
