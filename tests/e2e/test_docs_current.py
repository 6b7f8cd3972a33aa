"""The generated references in docs/reference/ match what docs/generate.py produces now."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATE = REPO_ROOT / "docs" / "generate.py"
REFERENCE = REPO_ROOT / "docs" / "reference"


def _check(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATE), "--check", *extra],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _generate_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", GENERATE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_references_are_current() -> None:
    proc = _check()
    assert proc.returncode == 0, (
        f"docs/reference is stale; run `.venv/bin/python docs/generate.py`:\n{proc.stderr}"
    )


def test_check_catches_a_hand_edit(tmp_path: Path) -> None:
    """--check must be able to fail: an edited copy of the references is reported stale."""
    copy = tmp_path / "reference"
    shutil.copytree(REFERENCE, copy)
    with (copy / "policy.md").open("a", encoding="utf-8") as fh:
        fh.write("\nhand edit\n")
    proc = _check("--out", str(copy))
    assert proc.returncode == 1
    assert "policy.md" in proc.stderr
    assert "http-api.md" not in proc.stderr


def test_references_cover_every_route_and_field() -> None:
    generate = _generate_module()
    http = (REFERENCE / "http-api.md").read_text(encoding="utf-8")
    for path in generate.openapi_document()["paths"]:
        assert f"`{path}`" in http
    policy = (REFERENCE / "policy.md").read_text(encoding="utf-8")
    for field in ("trust_registered_signers", "require_baseline", "approvals", "threshold"):
        assert f"`{field}`" in policy
