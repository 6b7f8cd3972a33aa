"""Run many ``modelward`` command lines in ONE process, as the installed entry point runs each
(``modelward.cli.main``): ``python -m tests.registry.cli_batch CASES.json RESULTS.json``.

Each case is a list of arguments; each result is ``{"code", "stdout", "stderr"}``, with
``"traceback"`` set when the command raised past ``main`` (what a user would see as a
crash). One process for the whole batch: starting the interpreter and importing the
command's modules once instead of once per command keeps a walk of every command fast
(tests/registry/test_exit_codes.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.inprocess import run_modelward


def run(args: list[str]) -> dict[str, object]:
    """One command line in this process (``tests.inprocess``, the in-process runner), with
    this process's environment; ``traceback`` is what a crash past ``main`` printed."""
    done = run_modelward(args, dict(os.environ))
    crashed = "Traceback (most recent call last)" in done.stderr
    return {
        "code": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "traceback": done.stderr if crashed else None,
    }


def main() -> None:
    cases_file, results_file = Path(sys.argv[1]), Path(sys.argv[2])  # run() sets sys.argv
    cases = json.loads(cases_file.read_text())
    real_stderr = sys.stderr
    results = []
    for n, case in enumerate(cases):
        print(" ".join(case), file=real_stderr, flush=True)  # the last one, if one kills us
        # each in a directory of its own, as separate runs would be: what one leaves behind
        # in its working directory (a ./.modelward) never meets the next
        here = results_file.parent / f"case-{n}"
        here.mkdir()
        os.chdir(here)
        results.append(run(list(case)))
    results_file.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
