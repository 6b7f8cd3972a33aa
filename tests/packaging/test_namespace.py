"""modelward installs under one name: a wheel holds ``modelward/...`` and nothing else."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tracked_copy(dest: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for raw in filter(None, files):
        rel = raw.decode()
        src, dst = REPO_ROOT / rel, dest / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree, not yet committed
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(src.readlink())
        else:
            shutil.copy2(src, dst)
    return dest


def test_wheel_installs_only_under_the_modelward_name(tmp_path):
    source = _tracked_copy(tmp_path / "src")
    out = tmp_path / "dist"
    code = (
        "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=source, check=True, capture_output=True
    )
    (wheel,) = out.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"modelward"}
    for expected in (
        "modelward/cli/__init__.py",
        "modelward/attest/verifier.py",
        "modelward/client/api.py",
        "modelward/loader/pull.py",
        "modelward/policies/default.yaml",
        "modelward/migrations/env.py",
        "modelward/migrations/versions/0001_initial.py",
    ):
        assert expected in names, expected
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "modelward = modelward.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_repository_folders_are_not_importable_as_top_level_names():
    code = (
        "import importlib.util, sys; sys.path = [p for p in sys.path if p not in ('', '.')]; "
        "print([n for n in ('attest', 'client', 'registry', 'loader', 'policies', 'migrations') "
        "if importlib.util.find_spec(n) is not None])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_no_module_imports_a_folder_by_its_top_level_name():
    offenders = []
    for folder in ("attest", "client", "registry", "loader", "demo", "tests", "benchmarks"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                stripped = line.strip()
                for name in ("attest", "client", "registry", "loader", "policies", "migrations"):
                    if stripped.startswith((f"from {name}.", f"from {name} ", f"import {name}")):
                        offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {stripped}")
    assert offenders == []
