"""``python -m reliability CAMPAIGN [--scale full|smoke] [--out DIR]`` (docs/reliability.md).

CAMPAIGN is ``fuzz``, ``api``, ``crash``, ``contention`` or ``all``. Each writes
``OUT/<campaign>.json``; the exit status is 1 when a campaign reported any finding, else 0.
``replay`` runs the saved input of every written-up fuzz finding (reliability/findings/)
through its target and says which still fail.

``--snapshot`` (the default for ``--scale full``) first copies the source tree (the files
git tracks plus untracked, unignored ones) to ``OUT/src`` and runs from that copy, so a
long campaign measures one tree even while people edit the checkout; ``OUT/src.txt`` records
the commit and ``git status --short`` at that moment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = Path(
    os.environ.get("MODELWARD_SHARED_FIXTURES") or REPO_ROOT.parent / "shared" / "fixtures"
)
CAMPAIGNS = ("fuzz", "api", "crash", "contention")


def _fuzz(scale: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from reliability.fuzz.campaign import ORDER, run

    runs = args.runs or (10**6 if scale == "full" else 20_000)
    targets = tuple(args.targets.split(",")) if args.targets else ORDER
    return run(
        out,
        runs=runs,
        max_time=args.max_time or (2100 if scale == "full" else 120),
        targets=targets,
        jobs=args.jobs,
        budget=_budget(args, full=FULL_BUDGET_S["fuzz"], scale=scale),
    )


def _api(scale: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from reliability.api_fuzz import run

    examples = args.examples or (1000 if scale == "full" else 20)
    return run(
        out,
        examples=examples,
        databases=tuple(args.databases.split(",")),
        postgres_examples=250 if scale == "full" and not args.examples else None,
        budget=_budget(args, full=FULL_BUDGET_S["api"], scale=scale),
    )


def _crash(scale: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from reliability.crash import run

    kills = args.kills or (200 if scale == "full" else 10)

    def progress(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    return run(
        out,
        kills=kills,
        databases=tuple(args.databases.split(",")),
        cli_every=10 if scale == "full" else 2,
        progress=progress,
        max_time_per_database=_budget(args, full=FULL_BUDGET_S["crash"], scale=scale),
    )


def _contention(scale: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from reliability.contention import run

    writers = args.writers or 64
    rounds = args.rounds or (20 if scale == "full" else 2)
    return run(out, writers=writers, rounds=rounds, databases=tuple(args.databases.split(",")))


# Time bounds of the full scale (seconds): the fuzz and API campaigns in all, the crash
# campaign per database; contention is bounded by its rounds (about 8 minutes measured).
# Their sum keeps `make reliability` under about 100 minutes on a 2-core machine whatever the
# load; on a loaded machine the counts are then not all reached, and the JSON says so.
FULL_BUDGET_S = {"fuzz": 2100, "api": 1800, "crash": 720}


def _budget(args: argparse.Namespace, *, full: int, scale: str) -> int | None:
    if args.budget:
        return int(args.budget)
    return full if scale == "full" else None


RUNNERS = {"fuzz": _fuzz, "api": _api, "crash": _crash, "contention": _contention}


def _snapshot(out: Path) -> Path:
    """Copy the source tree to ``out/src`` (git ls-files: tracked + untracked unignored)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    dst = out / "src"
    if dst.exists():
        shutil.rmtree(dst)
    for rel in filter(None, listed):
        src = REPO_ROOT / rel
        if src.is_symlink() or src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel, follow_symlinks=False)
    (dst / ".venv").symlink_to(REPO_ROOT / ".venv")
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    status = subprocess.run(
        ["git", "status", "--short"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    ).stdout
    (out / "src.txt").write_text(
        f"commit {head}\nuncommitted changes (git status --short):\n{status}"
    )
    return dst


def _replay(out: Path) -> int:
    from reliability.fuzz.campaign import FINDINGS_DIR, replay
    from reliability.fuzz.targets import prepare

    failing = 0
    for path, finding in replay(sorted(FINDINGS_DIR.glob("*.input")), prepare(out / "fuzz-ctx")):
        failing += finding is not None
        state = f"still fails: {finding.signature}" if finding else "passes (fixed?)"
        sys.stdout.write(f"{path.name}: {state}\n")
    return 1 if failing else 0


def _terminate(_signum: int, _frame: object) -> None:
    raise SystemExit(143)  # unwinds the campaign: servers and databases are stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    parser.add_argument("campaign", choices=(*CAMPAIGNS, "all", "replay"))
    parser.add_argument("--scale", choices=("full", "smoke"), default="full")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "reliability")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--jobs", type=int, default=2, help="fuzz: targets run in parallel")
    parser.add_argument("--targets", default="", help="fuzz: comma-separated target names")
    parser.add_argument("--runs", type=int, default=0, help="fuzz: executions per target")
    parser.add_argument("--max-time", type=int, default=0, help="fuzz: seconds per target")
    parser.add_argument("--examples", type=int, default=0, help="api: examples per operation")
    parser.add_argument("--kills", type=int, default=0, help="crash: kills per database")
    parser.add_argument("--writers", type=int, default=0, help="contention: writers")
    parser.add_argument("--rounds", type=int, default=0, help="contention: rounds per writer")
    parser.add_argument(
        "--budget",
        type=int,
        default=0,
        help="seconds: fuzz and api in all, crash per database "
        f"(full-scale defaults {FULL_BUDGET_S})",
    )
    parser.add_argument(
        "--snapshot",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run from a copy of the source tree (default: with --scale full)",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    if args.campaign == "replay":
        return _replay(args.out)
    chosen = CAMPAIGNS if args.campaign == "all" else (args.campaign,)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.snapshot if args.snapshot is not None else args.scale == "full":
        src = _snapshot(args.out)
        env = {
            **os.environ,
            "PYTHONPATH": str(src),
            "MODELWARD_SHARED_FIXTURES": str(SHARED_FIXTURES),
        }
        rest = [
            a
            for a in (argv if argv is not None else sys.argv[1:])
            if not a.startswith("--snapshot")
        ]
        return subprocess.run(
            [sys.executable, "-m", "reliability", *rest, "--no-snapshot", "--out", str(args.out)],
            cwd=src,
            env=env,
            check=False,
        ).returncode
    failed = False
    for name in chosen:
        summary = RUNNERS[name](args.scale, args.out, args)
        new = int(summary.get("new_findings", 0))
        failed = failed or new > 0
        line = {k: v for k, v in summary.items() if not isinstance(v, list | dict)}
        sys.stdout.write(f"{name}: {json.dumps(line)}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
