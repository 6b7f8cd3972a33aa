"""Fixtures for loader/ tests: real vLLM boots, as few as possible (one per config)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

BOOT_TIMEOUT = 600


def write_requests(path: Path, count: int, *, sampled: int = 0) -> Path:
    """``count`` greedy, seeded requests (varied prompts and token-id prompts), then
    ``sampled`` unseeded temperature-1 requests whose completions vary between runs."""
    words = [
        "hello world",
        "the quick brown fox",
        "0 1 2 3",
        "a model release",
        "serving",
        "deterministic replay",
        "how are you today",
        "bundle",
    ]
    lines = []
    for i in range(count):
        if i % 5 == 4:
            row: dict[str, Any] = {"id": f"r{i:03d}", "prompt_token_ids": [3 + i % 50, 7, 11]}
        else:
            row = {"id": f"r{i:03d}", "prompt": f"{words[i % len(words)]} {i}"}
        row.update({"max_tokens": 8, "seed": i, "temperature": 0})
        lines.append(json.dumps(row))
    for i in range(sampled):
        lines.append(
            json.dumps(
                {"id": f"s{i}", "prompt": f"sample {i}", "max_tokens": 8, "temperature": 1.0}
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def run_engine(job: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Boot vLLM once in a subprocess through loader/ and run the job's steps."""
    workdir.mkdir(parents=True, exist_ok=True)
    job_path = workdir / "job.json"
    out_path = workdir / "out.json"
    job_path.write_text(json.dumps(job))
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_TOKEN="secret-must-be-removed")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.loader._engine_run", str(job_path), str(out_path)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BOOT_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"engine run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(out_path.read_text())
    return result


@pytest.fixture(scope="session")
def replay_requests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_requests(tmp_path_factory.mktemp("replay") / "requests.jsonl", 100)


@pytest.fixture(scope="session")
def sampled_requests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_requests(tmp_path_factory.mktemp("sampled") / "requests.jsonl", 2, sampled=4)


@pytest.fixture(scope="session")
def f32_run(
    tiny_model_master: Path,
    replay_requests: Path,
    sampled_requests: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """One float32 boot: baseline, replay 100 requests × 10 runs, sampled replay."""
    job = {
        "model_dir": str(tiny_model_master),
        "dtype": "float32",
        "digest": "sha256:" + "a" * 64,
        "steps": [
            {"baseline": {}},
            {
                "replay": {
                    "name": "main",
                    "requests": str(replay_requests),
                    "runs": 10,
                    "concurrency": 25,
                }
            },
            {
                "replay": {
                    "name": "sampled",
                    "requests": str(sampled_requests),
                    "runs": 10,
                    "concurrency": 6,
                }
            },
        ],
    }
    return run_engine(job, tmp_path_factory.mktemp("f32"))


def perturb_weights(model_dir: Path) -> None:
    """Scale a few rows of the output head: the same architecture, different outputs."""
    from safetensors.torch import load_file, save_file

    path = model_dir / "model.safetensors"
    tensors = load_file(str(path))
    tensors["lm_head.weight"][7:12] *= 25.0
    path.chmod(0o644)
    save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.fixture(scope="session")
def perturbed_model(tiny_model_master: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny model with one weight tensor perturbed (a new bundle)."""
    dst = tmp_path_factory.mktemp("perturbed") / "model"
    shutil.copytree(tiny_model_master, dst)
    perturb_weights(dst)
    return dst


@pytest.fixture(scope="session")
def perturbed_run(
    perturbed_model: Path, replay_requests: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The perturbed weights, served with the same pinned configuration."""
    job = {
        "model_dir": str(perturbed_model),
        "dtype": "float32",
        "digest": "sha256:" + "a" * 64,
        "steps": [
            {"baseline": {}},
            {
                "replay": {
                    "name": "main",
                    "requests": str(replay_requests),
                    "runs": 2,
                    "concurrency": 25,
                }
            },
        ],
    }
    return run_engine(job, tmp_path_factory.mktemp("perturbed"))
