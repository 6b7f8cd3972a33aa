"""The fuzzing campaign: every target under atheris, or a quick in-process smoke.

``run(out, runs=10**6, ...)`` builds the shared material and each target's seed corpus,
then runs each target in its own atheris process (``_atheris_main``) for ``runs``
executions (bounded by ``max_time`` seconds), with a per-input timeout. A libFuzzer stop
(timeout, out-of-memory, deadly signal) is recorded as a finding and the run resumes from
its corpus for the executions left. Coverage: libFuzzer's edge and feature counts over the
instrumented modules, and — when coverage.py is installed — the line coverage of each
target's own modules, measured by replaying its final corpus. Results: ``out/fuzz.json``;
inputs and tracebacks of findings: ``out/fuzz/findings/``.

``smoke(name, ctx, mutations)`` runs the seeds and a fixed set of simple mutations through
the same judge in-process (no coverage feedback): what ``make test`` runs.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reliability.fuzz.harness import Finding, Judge, no_network, resolve
from reliability.fuzz.known import known_for
from reliability.fuzz.targets import TARGETS, prepare

__all__ = ["FINDINGS_DIR", "TargetResult", "mutations", "replay", "run", "run_target", "smoke"]

REPO_ROOT = Path(__file__).resolve().parents[2]
# one input per written-up finding, named TARGET--F<n>-<what>.input (docs/reliability.md)
FINDINGS_DIR = REPO_ROOT / "reliability" / "findings"
_STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_STAT = re.compile(r"^stat::(\w+):\s+(\d+)")
# slowest first, so two workers finish together
ORDER = (
    "verifier",
    "sigstore",
    "json",
    "oms",
    "pickle",
    "safetensors",
    "policy",
    "dsse",
    "manifest",
    "statement",
)


@dataclass
class TargetResult:
    target: str
    what: str
    documented: list[str]
    runs_requested: int
    executions: int = 0
    seconds: float = 0.0
    cov: int | None = None
    features: int | None = None
    corpus: int | None = None
    seeds: int = 0
    restarts: int = 0
    peak_rss_mb: int | None = None
    slowest_input_s: int | None = None
    line_coverage: dict[str, Any] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        return self.executions >= self.runs_requested


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _finding_files(findings: Path, name: str) -> list[dict[str, Any]]:
    out = []
    for txt in sorted(findings.glob(f"{name}-*.txt")):
        head = dict(
            line.split(": ", 1) for line in txt.read_text().splitlines()[:4] if ": " in line
        )
        signature = head.get("signature", "?")
        known = known_for(signature)
        out.append(
            {
                "signature": signature,
                "kind": head.get("kind", "?"),
                "input": str(txt.with_suffix(".input")),
                "report": str(txt),
                "known": known.ref if known else None,
            }
        )
    return out


def run_target(
    name: str,
    ctx: Path,
    out: Path,
    *,
    runs: int,
    max_time: int,
    timeout: int = 10,
    rss_limit_mb: int = 3072,
    seed: int = 1,
) -> TargetResult:
    """Fuzz one target under atheris until ``runs`` executions or ``max_time`` seconds."""
    target = TARGETS[name]
    result = TargetResult(name, target.what, list(target.documented), runs)
    corpus = out / "corpus" / name
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = target.seeds(ctx)
    result.seeds = len(seeds)
    for seed_name, data in seeds.items():
        (corpus / f"seed-{seed_name}").write_bytes(data)
    findings = out / "findings"
    artifacts = out / "artifacts" / name
    artifacts.mkdir(parents=True, exist_ok=True)
    log = out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    stops: list[dict[str, Any]] = []
    while result.executions < runs and result.restarts <= 20:
        left_time = max_time - int(time.monotonic() - started)
        if left_time <= 0:
            break
        before = set(artifacts.iterdir())
        cmd = [
            sys.executable,
            "-m",
            "reliability.fuzz._atheris_main",
            name,
            str(ctx),
            str(findings),
            "--",
            f"-runs={runs - result.executions}",
            f"-max_total_time={left_time}",
            f"-max_len={target.max_len}",
            f"-timeout={timeout}",
            f"-rss_limit_mb={rss_limit_mb}",
            f"-seed={seed + result.restarts}",
            f"-artifact_prefix={artifacts}/",
            "-print_final_stats=1",
            "-reload=0",
            str(corpus),
        ]
        with log.open("a") as handle:
            handle.write(f"\n$ {' '.join(cmd)}\n")
            handle.flush()
            proc = subprocess.run(
                cmd, stdout=handle, stderr=subprocess.STDOUT, env=_env(), check=False, cwd=REPO_ROOT
            )
        text = log.read_text(errors="replace").rsplit("\n$ ", 1)[-1]
        executed = _parse(text, result)
        result.executions += executed
        new = sorted(set(artifacts.iterdir()) - before)
        if proc.returncode == 0 and not new:
            break
        stops.append(
            {
                "returncode": proc.returncode,
                "after_executions": result.executions,
                "artifacts": [str(p) for p in new],
                "reason": next(
                    (
                        line.strip()
                        for line in text.splitlines()
                        if "ERROR: libFuzzer" in line or "ERROR: " in line
                    ),
                    "?",
                ),
            }
        )
        result.restarts += 1
        if executed == 0:  # no progress: do not loop on the same stop
            break
    result.seconds = round(time.monotonic() - started, 1)
    result.findings = _finding_files(findings, name) + [
        {"signature": f"libFuzzer stop: {s['reason']}", "kind": "stop", **s} for s in stops
    ]
    return result


def _parse(text: str, result: TargetResult) -> int:
    executed = 0
    for line in text.splitlines():
        status = _STATUS.match(line)
        if status:
            executed = int(status.group(1))
            result.cov, result.features = int(status.group(3)), int(status.group(4))
            result.corpus = int(status.group(5))
        stat = _STAT.match(line)
        if stat:
            key, value = stat.group(1), int(stat.group(2))
            if key == "number_of_executed_units":
                executed = value
            elif key == "peak_rss_mb":
                result.peak_rss_mb = max(result.peak_rss_mb or 0, value)
            elif key == "slowest_unit_time_sec":
                result.slowest_input_s = max(result.slowest_input_s or 0, value)
    return executed


def run(
    out: Path,
    *,
    runs: int = 10**6,
    max_time: int = 1800,
    targets: tuple[str, ...] = ORDER,
    jobs: int = 2,
    timeout: int = 10,
    budget: int | None = None,
) -> dict[str, Any]:
    """Every target under atheris; writes and returns the summary (``out/fuzz.json``).

    Each target stops at ``runs`` executions or ``max_time`` seconds; with ``budget``, the
    whole campaign also ends by then (a target started late gets what is left of it).
    """
    work = out / "fuzz"
    ctx = prepare(work / "ctx")
    started = time.monotonic()
    deadline = started + budget if budget else None

    def one(name: str) -> TargetResult:
        cap = max_time
        if deadline is not None:
            cap = min(cap, int(deadline - time.monotonic()))
        if cap < 30:  # nothing useful fits: say so rather than run a few seconds
            target = TARGETS[name]
            return TargetResult(name, target.what, list(target.documented), runs)
        return run_target(name, ctx, work, runs=runs, max_time=cap, timeout=timeout)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, targets))
    for result in results:  # sequentially, in this thread: coverage.py traces one thread
        result.line_coverage = corpus_coverage(result.target, ctx, work / "corpus" / result.target)
    summary = {
        "campaign": "fuzz",
        "engine": "atheris (libFuzzer)",
        "runs_per_target": runs,
        "max_time_per_target_s": max_time,
        "budget_s": budget,
        "per_input_timeout_s": timeout,
        "jobs": jobs,
        "seconds": round(time.monotonic() - started, 1),
        "targets": [{**asdict(r), "reached": r.reached} for r in results],
        "new_findings": sum(1 for r in results for f in r.findings if not f.get("known")),
        "targets_short_of_runs": [r.target for r in results if not r.reached],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


# -- smoke ---------------------------------------------------------------------------------
_TOKENS = (
    b"-1",
    b"0",
    b"1e999",
    b"NaN",
    b"[]",
    b"{}",
    b'"',
    b"\\u0000",
    b"\xff",
    b"null",
    b"true",
    b'"a":1,"a":2',
    b"\x00" * 8,
    b"\xff" * 8,
    b"[" * 2000,
    b'{"a":' * 500,
)


def mutations(seeds: list[bytes], count: int, seed: int = 0) -> list[bytes]:
    """``count`` simple deterministic mutations of ``seeds`` (flip, cut, splice, insert)."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for _ in range(count):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(6)
            at = rng.randrange(len(data) + 1)
            if op == 0 and data:
                data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
            elif op == 1:
                del data[at : at + rng.randint(1, 64)]
            elif op == 2:
                data[at:at] = rng.choice(_TOKENS)
            elif op == 3:
                del data[at:]
            elif op == 4:
                other = rng.choice(seeds)
                cut = rng.randrange(len(other) + 1)
                data[at:] = other[cut:]
            elif data:
                data[min(at, len(data) - 1)] = rng.randrange(256)
        out.append(bytes(data))
    return out


def smoke(name: str, ctx: Path, count: int, *, timeout: float = 10.0) -> Judge:
    """Seeds and ``count`` mutations through one target in-process; returns the judge."""
    target = TARGETS[name]
    seeds = list(target.seeds(ctx).values())
    judge = Judge(
        name, target.build(ctx), tuple(resolve(d) for d in target.documented), timeout=timeout
    )
    with no_network():
        for data in [*seeds, *mutations(seeds, count)]:
            judge(data)
    return judge


def describe(findings: dict[str, Finding]) -> str:
    return "\n\n".join(f"{f.signature}: {f.message}\n{f.traceback}" for f in findings.values())


def corpus_coverage(name: str, ctx: Path, corpus: Path) -> dict[str, Any]:
    """Line coverage (coverage.py, when installed) of the target's own modules, measured by
    replaying its final corpus once; {} without coverage.py."""
    try:
        import coverage
    except ImportError:
        return {}
    target = TARGETS[name]
    attest = REPO_ROOT / "attest"
    files = [str(attest / m) for m in target.modules]
    cov = coverage.Coverage(include=files, data_file=None, branch=False)
    cov.start()
    try:
        import importlib

        for module in (
            "modelward.attest",
            *(f"modelward.attest.{m[:-3].replace('/', '.')}" for m in target.modules),
        ):
            importlib.reload(importlib.import_module(module))
        judge = Judge(
            name, target.build(ctx), tuple(resolve(d) for d in target.documented), timeout=30
        )
        with no_network():
            for path in sorted(corpus.iterdir()):
                judge(path.read_bytes())
    finally:
        cov.stop()
    out: dict[str, Any] = {}
    for file in files:
        try:
            _, statements, _, missing, _ = cov.analysis2(file)
        except coverage.CoverageException:
            continue
        covered = len(statements) - len(missing)
        out[str(Path(file).relative_to(REPO_ROOT))] = {
            "lines": len(statements),
            "covered": covered,
            "percent": round(100 * covered / max(1, len(statements)), 1),
        }
    return out


def replay(paths: list[Path], ctx: Path) -> list[tuple[Path, Finding | None]]:
    """Run each saved input (``TARGET--...``) through its target once: the finding it still
    shows, or None when it no longer fails (fixed)."""
    out: list[tuple[Path, Finding | None]] = []
    judges: dict[str, Judge] = {}
    with no_network():
        for path in paths:
            name = path.name.split("--", 1)[0]
            if name not in judges:
                target = TARGETS[name]
                judges[name] = Judge(
                    name,
                    target.build(ctx),
                    tuple(resolve(d) for d in target.documented),
                    timeout=30,
                )
            out.append((path, judges[name](path.read_bytes())))
    return out
