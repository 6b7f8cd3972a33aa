"""One test per attack on the bundle format and the content scanner.

Manifest paths escaping the tree, colliding or repeated paths, non-canonical or hostile JSON,
size bombs and disguised pickles. Real bytes only; nothing scanned is ever loaded (the
pickles below would run a shell command if unpickled: each test asserts the canary never
appears). Signature-path attacks are in test_attacks.py.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from modelward.attest.errors import DigestMismatch, ManifestError, TreeRuleError
from modelward.attest.manifest import (
    ARTIFACT_TYPE,
    CONFIG_MEDIA_TYPE,
    FILEPATH_ANNOTATION,
    MANIFEST_MEDIA_TYPE,
    WEIGHT_CONFIG_MEDIA_TYPE,
    build_bundle,
    parse_manifest,
    verify_tree,
)
from modelward.attest.scanner import FileReport, ScanLimits, scan_blob, scan_tree

DIGEST = "sha256:" + "0" * 64


def _manifest_doc(paths: list[str], digest: str = DIGEST, size: int = 1) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": DIGEST, "size": 2},
        "layers": [
            {
                "mediaType": WEIGHT_CONFIG_MEDIA_TYPE,
                "digest": digest,
                "size": size,
                "annotations": {FILEPATH_ANNOTATION: p},
            }
            for p in paths
        ],
    }


def _manifest(paths: list[str], **kw: Any) -> bytes:
    return rfc8785.dumps(_manifest_doc(paths, **kw))


# --- manifest paths --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("../evil", "'..'"),
        ("a/../../evil", "'..'"),
        ("/etc/passwd", "/etc/passwd"),
        ("a\\..\\evil", "a\\..\\evil"),
        ("a\x00b", "'\\x00'"),
        ("a//b", "a//b"),
        ("./a", "'.'"),
        ("a/", "a/"),
        ("cafe\u0301.json", "not NFC"),
        (".git/config", ".git/config"),
        ("sub/.modelward/x", "sub/.modelward/x"),
        ("model.sig", "model.sig"),
    ],
)
def test_manifest_path_escaping_the_tree(path: str, shown: str) -> None:
    with pytest.raises(ManifestError, match="layers\\[0\\]") as info:
        parse_manifest(_manifest([path]))
    assert shown in str(info.value)


@pytest.mark.parametrize(
    "paths",
    [
        ["A.json", "a.json"],
        ["STRASSE", "stra\u00dfe"],
        ["Sub/x", "sub/y"],
        ["a", "a/b"],
        ["w", "w"],
    ],
)
def test_manifest_colliding_or_repeated_paths(paths: list[str]) -> None:
    with pytest.raises(ManifestError, match=r"collides|both a file and a directory|duplicate"):
        parse_manifest(_manifest(paths))


def test_manifest_same_digest_under_two_paths_checks_each_path(tmp_path: Path) -> None:
    """Decision: identical files (same digest) under two paths are legitimate; each path
    is still hashed on its own, so swapping one file is caught and named."""
    root = tmp_path / "b"
    root.mkdir()
    (root / "a.txt").write_bytes(b"same\n")
    (root / "b.txt").write_bytes(b"same\n")
    manifest = build_bundle(root).manifest
    assert manifest.layer("a.txt").digest == manifest.layer("b.txt").digest
    (root / "b.txt").write_bytes(b"evil\n")
    with pytest.raises(DigestMismatch) as info:
        verify_tree(root, manifest)
    assert info.value.path == "b.txt"


def test_manifest_non_canonical_bytes_would_give_a_second_digest() -> None:
    doc = _manifest_doc(["w"])
    with pytest.raises(ManifestError, match="canonical"):
        parse_manifest(json.dumps(doc, indent=1).encode())


@pytest.mark.parametrize(
    ("replace", "reason"),
    [
        (('"size":1', '"size":1,"size":2'), "duplicate key"),
        (('"size":1', '"size":1.0'), "non-integer"),
        (('"size":1', '"size":1e400'), "non-integer"),
        (('"size":1', '"size":NaN'), "non-finite"),
        (('"size":1', '"size":-1'), "size"),
        (('"size":1', '"size":' + "9" * 5000), "not valid JSON"),
        (('"size":1', '"size":9007199254740992'), "safe integer"),
    ],
)
def test_manifest_hostile_numbers_and_duplicate_keys(replace: tuple[str, str], reason: str) -> None:
    data = _manifest(["w"]).replace(replace[0].encode(), replace[1].encode(), 1)
    with pytest.raises(ManifestError, match=reason):
        parse_manifest(data)


def test_manifest_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(ManifestError, match=r"nested too deeply|not valid JSON"):
        parse_manifest(b"[" * 200_000 + b"]" * 200_000)


def test_tree_symlink_and_extra_file_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "b"
    root.mkdir()
    (root / "config.json").write_bytes(b"{}")
    manifest = build_bundle(root).manifest
    (root / "extra.txt").write_bytes(b"x")
    with pytest.raises(TreeRuleError, match=r"extra\.txt: bundle\.extra"):
        verify_tree(root, manifest)
    (root / "extra.txt").unlink()
    (root / "config.json").unlink()
    (root / "config.json").symlink_to("/etc/passwd")
    with pytest.raises(TreeRuleError, match=r"config\.json: tree\.symlink"):
        verify_tree(root, manifest)


# --- scanner: limits ---------------------------------------------------------------------


def _scan(name: str, data: bytes, limits: ScanLimits = ScanLimits()) -> FileReport:
    return scan_blob(name, io.BytesIO(data), len(data), limits)


def _rules(report: FileReport) -> set[str]:
    return {f.rule for f in report.findings}


def test_safetensors_header_length_bomb() -> None:
    report = _scan("model.safetensors", struct.pack("<Q", 2**63) + b'{"a":1}')
    assert report.findings
    assert "exceeds" in report.findings[0].reason
    assert _rules(report) == {"scan.safetensors"}


def test_safetensors_deeply_nested_header_is_a_finding() -> None:
    header = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    report = _scan("model.safetensors", struct.pack("<Q", len(header)) + header)
    assert any("nested too deeply" in f.reason for f in report.findings), report


def test_config_json_deeply_nested_is_a_finding() -> None:
    report = _scan("config.json", b"[" * 200_000 + b"]" * 200_000)
    assert "scan.json" in _rules(report)


def test_bundle_spec_deeply_nested_yaml_is_a_finding() -> None:
    report = _scan("modelward.yaml", b"a: " + b"[" * 1100 + b"]" * 1100 + b"\n")
    assert any(f.rule == "scan.yaml" and "nest" in f.reason for f in report.findings)


def test_zip_bomb_member_is_read_only_up_to_the_probe(tmp_path: Path) -> None:
    path = tmp_path / "bomb.zip"
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("weights/blob", "w", force_zip64=True) as member,
    ):
        chunk = b"\0" * 2**20
        for _ in range(64):  # 64 MiB uncompressed, ~64 KiB on disk
            member.write(chunk)
    assert path.stat().st_size < 2**20
    with path.open("rb") as stream:
        report = scan_blob("bomb.zip", stream, path.stat().st_size)
    assert report.findings
    assert report.kind == "zip archive"


def test_zip_directory_claiming_millions_of_members() -> None:
    eocd = b"PK\x05\x06" + b"\0" * 4 + struct.pack("<HHII", 0xFFFF, 0xFFFF, 2**31, 0) + b"\0\0"
    report = _scan("w.bin", b"PK\x03\x04" + b"\0" * 100 + eocd, ScanLimits(max_zip_members=1000))
    assert "scan.too-large" in _rules(report)


# --- scanner: disguised pickles ----------------------------------------------------------


def _reduce_pickle(canary: Path, protocol: int) -> bytes:
    """os.system('touch CANARY') built opcode by opcode (never pickled, never loaded)."""
    command = f"touch {canary}".encode()
    if protocol == 0:
        return b"cos\nsystem\n(S'" + command + b"'\ntR."
    head = b"\x80" + bytes([protocol]) + b"cos\nsystem\n"
    return head + b"X" + struct.pack("<I", len(command)) + command + b"\x85R."


def _long_lead(protocol: int, payload: bytes) -> bytes:
    """A pickle that first pushes and pops a 70 KB string (past the scanner's 64 KiB probe)."""
    filler = b"a" * 70_000
    if protocol == 0:
        return b"S'" + filler + b"'\n0" + payload
    return (
        b"\x80"
        + bytes([protocol])
        + b"X"
        + struct.pack("<I", len(filler))
        + filler
        + b"0"
        + payload[2:]
    )


@pytest.mark.parametrize("name", ["vocab.txt", "model.safetensors", "tokenizer.json", "w.bin"])
def test_protocol0_text_pickle_is_found(tmp_path: Path, name: str) -> None:
    report = _scan(name, _reduce_pickle(tmp_path / "canary", 0))
    assert "scan.pickle" in _rules(report)
    assert "posix.system" in report.findings[0].reason or "os.system" in report.findings[0].reason
    assert not (tmp_path / "canary").exists()


def test_protocol0_pickle_behind_a_long_string_is_found(tmp_path: Path) -> None:
    """The probe stops at 64 KiB; a pickle whose first opcode is longer reads as text."""
    data = _long_lead(0, _reduce_pickle(tmp_path / "canary", 0))
    report = _scan("pytorch_model.bin", data)
    assert "scan.pickle" in _rules(report), report
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("protocol", [2, 3])
def test_pickle_behind_a_long_string_is_not_admitted_by_allow_globs(
    tmp_path: Path, protocol: int
) -> None:
    """allow_globs admit "unknown" files only, never a pickle: it must be recognized."""
    data = _long_lead(protocol, _reduce_pickle(tmp_path / "canary", protocol))
    report = _scan("extra/weights.dat", data, ScanLimits(allow_globs=("extra/*",)))
    assert "scan.pickle" in _rules(report), report


def test_headerless_binary_pickle_behind_a_long_string_is_found(tmp_path: Path) -> None:
    """Protocol 1 has no PROTO header: a 70 KB BINUNICODE first, then the payload's
    opcodes. Not text, no header: the walk must go on past the probe to see it."""
    filler = b"a" * 70_000
    data = (
        b"X"
        + struct.pack("<I", len(filler))
        + filler
        + b"0"
        + _reduce_pickle(tmp_path / "canary", 2)[2:]
    )
    report = _scan("extra/weights.dat", data, ScanLimits(allow_globs=("extra/*",)))
    assert "scan.pickle" in _rules(report), report
    assert not (tmp_path / "canary").exists()


def test_allow_globs_never_admit_a_recognized_pickle(tmp_path: Path) -> None:
    report = _scan(
        "extra/a.bin", _reduce_pickle(tmp_path / "canary", 2), ScanLimits(allow_globs=("extra/*",))
    )
    assert "scan.pickle" in _rules(report)


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("member", ["weights/blob", "archive/data", "x.safetensors", "README"])
def test_pickle_inside_oddly_named_zip_member(tmp_path: Path, member: str) -> None:
    data = _zip({member: _reduce_pickle(tmp_path / "canary", 2)})
    report = _scan("model.safetensors", data, ScanLimits(allow_globs=("*.safetensors",)))
    assert "scan.zip-pickle" in _rules(report), report
    assert member in report.findings[0].reason


def test_pickle_behind_a_long_string_inside_a_zip_is_not_admitted(tmp_path: Path) -> None:
    data = _zip({"weights/blob": _long_lead(2, _reduce_pickle(tmp_path / "canary", 2))})
    report = _scan("extra/w.zip", data, ScanLimits(allow_globs=("extra/*",)))
    assert "scan.zip-pickle" in _rules(report), report


def test_protocol0_pickle_behind_a_long_string_inside_a_zip_is_found(tmp_path: Path) -> None:
    data = _zip({"notes/readme": _long_lead(0, _reduce_pickle(tmp_path / "canary", 0))})
    report = _scan("extra/w.zip", data, ScanLimits(allow_globs=("extra/*",)))
    assert "scan.zip-pickle" in _rules(report), report
    assert "notes/readme" in report.findings[0].reason


def test_pickle_after_a_safetensors_looking_prefix(tmp_path: Path) -> None:
    payload = _reduce_pickle(tmp_path / "canary", 2)
    header = b'{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}'
    # a well-formed header whose data section is followed by a pickle: trailing bytes
    data = struct.pack("<Q", len(header)) + header + b"abcd" + payload
    for name in ("model.safetensors", "pytorch_model.bin"):
        report = _scan(name, data)
        assert "scan.safetensors" in _rules(report), report
        assert any("trailing bytes" in f.reason for f in report.findings)
    # a pickle named .safetensors is a pickle, whatever the name promises
    assert "scan.pickle" in _rules(_scan("model.safetensors", payload))


def test_auto_map_hidden_by_a_json_escape() -> None:
    data = b'{"auto\\u005fmap": {"AutoModel": "evil/repo--modeling.Evil"}}'
    report = _scan("config.json", data)
    assert "scan.auto_map" in _rules(report)
    assert "evil/repo--modeling.Evil" in report.findings[0].reason


def test_config_json_duplicate_keys_are_a_finding() -> None:
    report = _scan("config.json", b'{"model_type": "llama", "model_type": "evil"}')
    assert any("duplicate key" in f.reason for f in report.findings)


def test_scan_tree_reports_escape_attempts_as_findings(tmp_path: Path) -> None:
    root = tmp_path / "b"
    root.mkdir()
    (root / "config.json").write_bytes(b"{}")
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "Config.json").write_bytes(b"{}")
    report = scan_tree(root)
    found = {(f.path, f.rule) for f in report.findings}
    assert ("passwd", "tree.symlink") in found
    assert any(rule == "tree.collision" for _, rule in found)
