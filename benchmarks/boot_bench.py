"""Boot benchmark: `modelward boot` against a bare `vllm.LLM(model=DIR)` of the same files.

    VLLM_CPU_KVCACHE_SPACE=1 .venv/bin/python benchmarks/boot_bench.py [--model DIR]
        [--repeat N] [--no-peer]

Starts a local registry (`modelward serve` on a free loopback port, SQLite), pushes the tiny
Llama (or --model DIR, which must hold a modelward.yaml or gets one) signed by a fresh
publisher key, signs the `canary` alias's TUF proposal with that key and saves the
registry's TUF root (`modelward trust root --out root.json`, untimed), then measures, N times
each:

- bare:      `python -c "vllm.LLM(model=DIR, ...)"`  (engine boot, nothing else), with vLLM's
             default process layout (an engine-core and a worker process) and again with
             `VLLM_ENABLE_V1_MULTIPROCESSING=0`, the one-process layout `modelward boot`'s
             in-process engine uses (loader/engine.py): the like-for-like peer
- modelward: `modelward boot REPO@canary --trust-root root.json --timings` (resolve the alias
             through the registry's signed TUF metadata from the pinned root, as a worker
             does since the TUF work (docs/tuf.md#workers), pull into a fresh cache (the TUF
             cache with it: every run is a cold refresh), verify signatures/scanner/policy,
             re-hash, boot, baseline, record)

and prints per-phase wall times (from `--timings`) and the ratio of medians. Record the
table in docs/performance.md. A benchmark, not a test: nothing asserts on times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

BARE = """
import sys, vllm
if __name__ == "__main__":
    llm = vllm.LLM(model=sys.argv[1], dtype=sys.argv[2], max_model_len=256, enforce_eager=True)
"""


def bare_boot(model: Path, dtype: str, env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", BARE, str(model), dtype], env=env, check=True, capture_output=True
    )
    return time.monotonic() - start


def modelward_boot(
    reg_url: str,
    token: str,
    repo: str,
    pem: Path,
    trust_root: Path,
    worker_key: Path,
    cache: Path,
    env: dict[str, str],
) -> tuple[float, dict[str, float]]:
    from tests.registry.conftest import MODELWARD

    shutil.rmtree(cache, ignore_errors=True)
    full_env = {**env, "MODELWARD_URL": reg_url, "MODELWARD_TOKEN": token}
    start = time.monotonic()
    proc = subprocess.run(
        [
            MODELWARD,
            "boot",
            f"{repo}@canary",
            "--trust-root",
            str(trust_root),
            "--public-key",
            str(pem),
            "--cache-dir",
            str(cache),
            "--worker-key",
            str(worker_key),
            "--timings",
            "--",
            "--enforce-eager",
        ],
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
    )
    total = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"modelward boot failed:\n{proc.stderr[-3000:]}")
    phases = {}
    for line in proc.stdout.splitlines():
        if line.startswith("timing "):
            _, name, seconds = line.split()
            phases[name] = float(seconds)
    return total, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (1: the smoke test)")
    parser.add_argument(
        "--no-peer",
        action="store_true",
        help="skip the bare vLLM boot (the smoke test: its column says not run)",
    )
    args = parser.parse_args()

    from benchmarks._worker_setup import published_for_a_worker
    from modelward.attest.spec import render_spec_template
    from tests.tinymodel import make_tiny_llama

    work = Path(tempfile.mkdtemp(prefix="boot-bench-"))
    model = work / "model"
    if args.model:
        shutil.copytree(args.model, model)
    else:
        make_tiny_llama(model)
    if not (model / "modelward.yaml").exists():
        (model / "modelward.yaml").write_text(
            render_spec_template(dtype="float32", max_model_len=256)
        )
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with published_for_a_worker(work, model) as published:
        bare, single, ours, phases = [], [], [], []
        for _ in range(args.repeat):
            if not args.no_peer:
                bare.append(bare_boot(model, "float32", env))
                single.append(
                    bare_boot(model, "float32", {**env, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
                )
            total, phase = modelward_boot(
                published.url,
                published.worker_token,
                published.repo,
                published.publisher_pem,
                published.trust_root,
                published.worker_key,
                work / "cache",
                env,
            )
            ours.append(total)
            phases.append(phase)
    print(f"| phase | median s (n={args.repeat}) |")
    print("|---|---|")
    print(f"| bare vllm.LLM boot (process) | {_median(bare)} |")
    print(f"| bare vllm.LLM boot, one process (process) | {_median(single)} |")
    print(f"| modelward boot total (process) | {statistics.median(ours):.2f} |")
    for name in phases[0]:
        print(f"| - {name} | {statistics.median(p[name] for p in phases):.3f} |")
    ratio = f"{statistics.median(ours) / statistics.median(bare):.2f}" if bare else "not run"
    print(f"| ratio modelward / bare | {ratio} |")
    if single:
        print(
            f"| ratio modelward / bare, one process | "
            f"{statistics.median(ours) / statistics.median(single):.2f} |"
        )
    shutil.rmtree(work, ignore_errors=True)


def _median(times: list[float]) -> str:
    return f"{statistics.median(times):.2f}" if times else "not run"


if __name__ == "__main__":
    main()
