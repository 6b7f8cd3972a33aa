"""``python -m demo.make_model``: the tiny-model maker is part of the project, not of its tests.

It used to import ``tests.tinymodel``, so it worked only where the test suite happened to be
importable (the repository root, or with it on PYTHONPATH). Here it runs in a clean
environment (no PYTHONPATH) from a directory that holds ``demo/`` and nothing else of the
repository: it must write a model transformers can load, without the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_make_model_runs_without_the_tests_on_the_path(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "demo").symlink_to(REPO_ROOT / "demo", target_is_directory=True)
    env = {
        k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("MODELWARD_")
    }
    out = tmp_path / "model"
    made = subprocess.run(
        [sys.executable, "-m", "demo.make_model", str(out), "--seed", "3"],
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().splitlines()[-1].startswith(f"wrote {out}: "), made.stdout
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names, names
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2


def test_the_suite_and_the_demo_share_one_maker() -> None:
    from demo import tinymodel
    from tests import tinymodel as suite

    assert suite.make_tiny_llama is tinymodel.make_tiny_llama
