"""Run the ``modelward`` command inside the test's own process.

A subprocess pays the interpreter's start-up and the CLI's imports on every call (about half
a second on the test machine); most CLI tests are about what a command says and does, not
about the process it runs in. ``run_modelward`` calls the same entry point
(``modelward.cli.main``) with the arguments, environment, stdin, stdout and stderr a
subprocess would get, and answers a ``CompletedProcess`` exactly as ``subprocess.run`` does:
the exit code from ``SystemExit``, stdout and stderr as text. An exception that is none of
modelward's own errors prints its traceback to stderr and exits 1, as Python does.

Tests about the process itself (signals, exit on a broken pipe, start-up time, a command that
serves or boots) keep running ``modelward`` as a subprocess. Calls are serialized by a lock:
the environment and the standard streams are the process's own, so a test that runs several
commands at once from threads runs them one after the other here (such a test, when it is
about concurrency, uses subprocesses).
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

_LOCK = threading.Lock()


class _Text(io.TextIOWrapper):
    """A text stream over bytes, as a subprocess's pipe is (``.buffer`` included)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        self.flush()
        assert isinstance(self.buffer, io.BytesIO)
        return self.buffer.getvalue().decode("utf-8", errors="replace")


def run_modelward(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    stdin: str = "",
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``modelward *args`` with ``env`` as its whole environment (and ``cwd`` as its working
    directory), in this process."""
    from modelward.cli import _LogLines, main

    with _LOCK:
        saved_env, saved_cwd = dict(os.environ), Path.cwd()
        saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr)
        out, err = _Text(), _Text()
        root = logging.getLogger()
        handler = logging.StreamHandler(err)
        verbose = env.get("MODELWARD_VERBOSE") == "1"
        handler.setFormatter(
            _LogLines(
                "%(levelname)s: %(name)s: %(message)s" if verbose else "%(levelname)s: %(message)s"
            )
        )
        saved_level = root.level
        before: list[logging.Handler] = []
        code: int = 0
        try:
            os.environ.clear()
            os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            sys.argv = ["modelward", *args]
            sys.stdin = io.StringIO(stdin)
            sys.stdout, sys.stderr = out, err
            before = list(root.handlers)
            if before:  # else main()'s logging.basicConfig makes the stderr handler itself
                root.addHandler(handler)
            root.setLevel(logging.DEBUG if verbose else logging.WARNING)
            try:
                main()
            except SystemExit as exit_:
                code = _exit_code(exit_.code, err)
            except BaseException:
                traceback.print_exc(file=err)
                code = 1
        finally:
            for added in set(root.handlers) - set(before):
                root.removeHandler(added)
            root.removeHandler(handler)
            root.setLevel(saved_level)
            sys.argv, sys.stdin, sys.stdout, sys.stderr = saved
            os.environ.clear()
            os.environ.update(saved_env)
            os.chdir(saved_cwd)
    return subprocess.CompletedProcess(["modelward", *args], code, out.text(), err.text())


def _exit_code(code: object, err: io.TextIOBase) -> int:
    """What ``sys.exit(code)`` makes of ``code``: None 0, an int itself, else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1
