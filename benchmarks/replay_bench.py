"""Replay benchmark: `modelward replay --runs N` against a bare vLLM loop doing the same
generation.

    VLLM_CPU_KVCACHE_SPACE=1 .venv/bin/python benchmarks/replay_bench.py [--runs 1000]
        [--repeat 3] [--compiled] [--no-peer]

Starts a local registry (`modelward serve` on a free loopback port, SQLite), pushes the tiny
Llama signed by a fresh publisher key, writes 3 short greedy requests (8 tokens each), then
measures, N times each, in fresh processes:

- bare:      `vllm.LLM(model=DIR, enforce_eager=True)` and `runs` × `llm.generate` of the
             3 requests (boot and generation, nothing else);
- modelward: `modelward replay REQUESTS --bundle REPO@canary --trust-root root.json --runs N
             --concurrency 3 --json -- --enforce-eager` (resolve the alias through the pinned
             TUF root, pull, verify, boot, replay in batches of 3 as the bare loop
             does, the comparison, progress, sign and attach the result);
- with --compiled, once: the same replay without `--enforce-eager` (vLLM's default graph
  compilation), the configuration a user got before replay took engine arguments.

Prints the medians, the per-execution cost and the ratio of medians. Record the table in
docs/performance.md. A benchmark, not a test: nothing asserts on times.
"""

from __future__ import annotations

import argparse
import json
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
import json, sys, time, vllm
if __name__ == "__main__":
    start = time.monotonic()
    llm = vllm.LLM(model=sys.argv[1], dtype="float32", max_model_len=256, seed=0,
                   enforce_eager=True)
    booted = time.monotonic()
    rows = [json.loads(line) for line in open(sys.argv[2])]
    params = [vllm.SamplingParams(temperature=0, max_tokens=r["max_tokens"], seed=r["seed"])
              for r in rows]
    for _ in range(int(sys.argv[3])):
        llm.generate([r["prompt"] for r in rows], params, use_tqdm=False)
    result = {"boot": booted - start, "replay": time.monotonic() - booted}
    with open(sys.argv[4], "w") as fh:  # stdout carries vLLM's logs
        json.dump(result, fh)
"""

PROMPTS = ["hello world", "the quick brown fox", "a model release"]


def bare_replay(
    model: Path, requests: Path, runs: int, env: dict[str, str]
) -> tuple[float, dict[str, float]]:
    out = requests.with_name("bare.json")
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", BARE, str(model), str(requests), str(runs), str(out)],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - start, json.loads(out.read_text())


def modelward_replay(env: dict[str, str], args: list[str]) -> tuple[float, dict[str, object]]:
    from tests.registry.conftest import MODELWARD

    start = time.monotonic()
    proc = subprocess.run(
        [MODELWARD, "replay", *args], env=env, capture_output=True, text=True, check=False
    )
    total = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"modelward replay failed:\n{proc.stderr[-3000:]}")
    report: dict[str, object] = json.loads(proc.stdout)
    return total, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (1: the smoke test)")
    parser.add_argument(
        "--compiled", action="store_true", help="also time one replay without --enforce-eager"
    )
    parser.add_argument(
        "--no-peer",
        action="store_true",
        help="skip the bare vLLM loop (the smoke test: its rows say not run)",
    )
    args = parser.parse_args()

    from benchmarks._worker_setup import published_for_a_worker
    from modelward.attest.spec import render_spec_template
    from tests.tinymodel import make_tiny_llama

    work = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    model = make_tiny_llama(work / "model")
    (model / "modelward.yaml").write_text(render_spec_template(dtype="float32", max_model_len=256))
    requests = work / "requests.jsonl"
    requests.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "prompt": p, "max_tokens": 8, "seed": i, "temperature": 0})
            + "\n"
            for i, p in enumerate(PROMPTS)
        )
    )
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with published_for_a_worker(work, model) as published:
        wenv = {**env, "MODELWARD_URL": published.url, "MODELWARD_TOKEN": published.worker_token}
        common = [
            str(requests),
            "--bundle",
            f"{published.repo}@canary",
            "--trust-root",
            str(published.trust_root),
            "--public-key",
            str(published.publisher_pem),
            "--cache-dir",
            str(work / "cache"),
            "--worker-key",
            str(published.worker_key),
            "--runs",
            str(args.runs),
            "--concurrency",
            str(len(PROMPTS)),
            "--json",
        ]
        bare, bare_parts, ours = [], [], []
        report: dict[str, object] = {}
        for _ in range(args.repeat):
            if not args.no_peer:
                total, parts = bare_replay(model, requests, args.runs, env)
                bare.append(total)
                bare_parts.append(parts)
            total, report = modelward_replay(wenv, [*common, "--", "--enforce-eager"])
            ours.append(total)
        compiled = modelward_replay(wenv, common)[0] if args.compiled else None
    executions = args.runs * len(PROMPTS)
    print(f"| {args.runs} runs × {len(PROMPTS)} requests | median s (n={args.repeat}) |")
    print("|---|---:|")
    print(f"| bare vllm.LLM boot + loop (process) | {_median(bare)} |")
    print(f"| - boot | {_median([p['boot'] for p in bare_parts])} |")
    print(f"| - generation loop | {_median([p['replay'] for p in bare_parts])} |")
    print(f"| modelward replay -- --enforce-eager (process) | {_median(ours)} |")
    if compiled is not None:
        print(f"| modelward replay, compiled graphs (process, n=1) | {compiled:.2f} |")
    ratio = f"{statistics.median(ours) / statistics.median(bare):.2f}" if bare else "not run"
    print(f"| ratio modelward / bare | {ratio} |")
    if bare_parts:
        loop = statistics.median(p["replay"] for p in bare_parts)
        print(f"| bare ms per execution | {1000 * loop / executions:.2f} |")
    print(
        f"consecutive_matches {report.get('consecutive_matches')} of {executions}, "
        f"attached {report.get('attached')}"
    )
    shutil.rmtree(work, ignore_errors=True)


def _median(times: list[float]) -> str:
    return f"{statistics.median(times):.2f}" if times else "not run"


if __name__ == "__main__":
    main()
