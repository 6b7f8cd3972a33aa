"""Rehearsal without GPUs (docs/rollouts.md#rehearsal): the stand-in is outside every
production path, and the rehearsal worker's options say what they do."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from modelward.rehearsal.worker import Behaviour, parse_behave

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("cli", "loader", "registry", "client", "attest")

# every command of ``modelward`` loaded, as a worker's ``boot`` loads its own; then whether
# any rehearsal module came with them
EVERY_COMMAND = """
import importlib, sys
from modelward.cli import COMMANDS

def load(table):
    for entry in table.values():
        if entry.target:
            importlib.import_module(entry.target.partition(":")[0])
        load(entry.children or {})

load(COMMANDS)
import modelward.cli.worker, modelward.loader.follow, modelward.loader.worker
print(sorted(m for m in sys.modules if "rehearsal" in m))
"""


def test_boot_cannot_reach_the_stand_in_engine() -> None:
    """No production module names the rehearsal package, and loading every ``modelward``
    command (``boot`` with them) loads none of it: a production worker cannot start with
    the stand-in."""
    for wing in PRODUCTION:
        for path in (ROOT / wing).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                assert not any("rehearsal" in n for n in names), f"{path} imports {names}"
            assert "standin" not in path.read_text().lower(), path
    loaded = subprocess.run(
        [sys.executable, "-c", EVERY_COMMAND], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_rehearsal_behave_names_a_digest_its_error_rate_and_latency() -> None:
    digest = "sha256:" + "c" * 64
    assert parse_behave(f"{digest}=0.3,1200") == ("c" * 64, Behaviour(0.3, 1200.0))
    for wrong in (f"{digest}=1.5,10", f"{digest}=0.1", "sha256:abc=0.1,10", f"{digest}=x,1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--behave"):
            parse_behave(wrong)


def test_rehearsal_without_a_command_says_how_to_run_it() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "modelward.rehearsal"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 2
    assert "python -m modelward.rehearsal fleet" in run.stderr
