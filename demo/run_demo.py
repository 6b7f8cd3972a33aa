"""The modelward story, start to finish, on embedded defaults (``make demo``).

A registry on loopback (SQLite and local blobs in a temporary directory), four principals —
a publisher, a release manager, a reviewer and a serving worker — and one small model that
goes from a directory on disk to a verified vLLM boot, then through an incident: a tampered
blob, a quarantined release and a rollback. Every step runs the real ``modelward`` CLI as a
subprocess and prints the command, so a reader can repeat it by hand; each step checks its
outcome, and the demo exits 1 when any step misbehaves.

Usage (from the repository root): ``.venv/bin/python -m demo [--skip-vllm] [--workdir DIR]
[--keep] [--summary-json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from demo import _story
from demo._runner import Runner, cleanup

__all__ = ["main"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _base_env(workdir: Path) -> dict[str, str]:
    """The environment every command runs under: isolated config and cache, no verbose."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MODELWARD_") and k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
    }
    env.update(
        {
            "XDG_CONFIG_HOME": str(workdir / "config"),
            "XDG_CACHE_HOME": str(workdir / "xdg-cache"),
            "PYTHONPATH": str(REPO_ROOT),
            "VLLM_CPU_KVCACHE_SPACE": env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "COLUMNS": "120",
            "NO_COLOR": "1",
        }
    )
    return env


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--skip-vllm",
        action="store_true",
        help="skip the steps that boot vLLM (everything else still runs)",
    )
    parser.add_argument("--workdir", type=Path, help="use this (empty) directory as $DEMO")
    parser.add_argument("--keep", action="store_true", help="keep $DEMO afterwards")
    parser.add_argument("--summary-json", type=Path, help="also write the step results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    width = shutil.get_terminal_size((110, 40)).columns
    console = Console(highlight=False, width=max(width, 100))
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        if any(args.workdir.iterdir()):
            console.print(f"error: {args.workdir} is not empty", style="bold red")
            return 2
        workdir = args.workdir.resolve()
    else:
        workdir = Path(tempfile.mkdtemp(prefix="modelward-demo-"))
    runner = Runner(
        repo_root=REPO_ROOT, workdir=workdir, console=console, base_env=_base_env(workdir)
    )
    console.rule("[bold]modelward: a model release as a software release")
    console.print(f"DEMO={workdir}   (every path below is under $DEMO)")
    console.print("Commands run from the repository root; tokens are shown as $VARS.")
    story = _story.Story(
        runner,
        workdir=workdir,
        port=free_port(),
        serve_port=free_port(),
        admin_token=secrets.token_urlsafe(32),
        skip_vllm=args.skip_vllm,
    )
    try:
        with cleanup(runner):
            story.play()
    finally:
        ok = runner.summary()
        if args.summary_json is not None:
            args.summary_json.write_text(
                json.dumps([vars(r) for r in runner.results], indent=2) + "\n", encoding="utf-8"
            )
        if args.keep or not ok:
            console.print(f"kept {workdir} (registry log: $DEMO/registry.log)")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
