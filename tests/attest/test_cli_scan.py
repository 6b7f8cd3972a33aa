"""``modelward bundle scan`` through the real command: exit codes 0/1/2 and --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.attest.corpus import build_corpus, canary_pickle

MODELWARD = Path(sys.executable).parent / "modelward"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MODELWARD), *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_clean_model_exits_0(tiny_model: Path) -> None:
    result = run("bundle", "scan", str(tiny_model))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "clean" in result.stderr


def test_clean_model_json(tiny_model: Path) -> None:
    result = run("bundle", "scan", str(tiny_model), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["clean"] is True
    assert report["findings"] == []
    kinds = {f["path"]: f["kind"] for f in report["files"]}
    assert kinds["model.safetensors"] == "safetensors"


def test_corpus_exits_1_one_line_per_finding_and_never_loads(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    corpus = build_corpus(tmp_path / "bundle", canary)
    result = run("bundle", "scan", str(tmp_path / "bundle"), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    for path, rules in corpus.expected.items():
        for rule in rules:
            assert any(line.startswith(f"{path}: {rule}: ") for line in lines), (path, rule)
    assert not canary.exists()


def test_findings_json(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    root.mkdir()
    canary = tmp_path / "canary"
    (root / "pytorch_model.bin").write_bytes(canary_pickle(canary, 4))
    (root / "config.json").write_text('{"auto_map": {"AutoModel": "m.M"}}')
    result = run("bundle", "scan", str(root), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["clean"] is False
    found = {(f["path"], f["rule"]) for f in report["findings"]}
    assert found == {("pytorch_model.bin", "scan.pickle"), ("config.json", "scan.auto_map")}
    kinds = {f["path"]: f["kind"] for f in report["files"]}
    assert kinds == {"config.json": "json", "pytorch_model.bin": "pickle"}
    assert not canary.exists()


def test_allow_glob_admits_unknown_only(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "blob.dat").write_bytes(b"\x01\x02\x03binary")
    assert run("bundle", "scan", str(root)).returncode == 1
    assert run("bundle", "scan", str(root), "--allow", "*.dat").returncode == 0
    (root / "evil.dat").write_bytes(canary_pickle(tmp_path / "canary", 2))
    result = run("bundle", "scan", str(root), "--allow", "*.dat")
    assert result.returncode == 1
    assert "evil.dat: scan.pickle:" in result.stdout


@pytest.mark.parametrize("args", [["bundle", "scan"], ["bundle", "scan", "--nope", "."]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert run(*args).returncode == 2


def test_missing_directory_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    result = run("bundle", "scan", str(tmp_path / "absent"))
    assert result.returncode == 2
    assert "absent: no such directory" in result.stderr
    assert "Traceback" not in result.stderr
