"""Start ``modelward`` processes from a parent that has already imported it (a fork server).

A ``modelward serve`` process spends about five of its seven seconds of start-up importing
FastAPI, SQLAlchemy, TUF and the registry's routers; the suite starts a few hundred of them.
``spawn`` asks one long-lived helper process per test process (``python -m tests.forkserver``,
which imported all of that once) to ``fork``; the child becomes the command: its own process
(its own session when asked), its environment, working directory, standard streams and
arguments, running the same entry point as the ``modelward`` script (``modelward.cli.main``)
and exiting with its exit code. What the server does is unchanged: the tests still talk to
a real process over loopback, kill it, restart it and read its log.

``ForkedProcess`` answers what tests ask of a ``subprocess.Popen``: ``pid``, ``poll``,
``wait``, ``returncode`` (negative for a signal, as Popen's), ``terminate``, ``kill`` and
``send_signal``. The helper reaps its children and reports each exit status on its pipe.
Tests about the interpreter itself (start-up time, the console script) keep using
``subprocess``; ``MODELWARD_TEST_FORK=0`` turns the fork server off for a whole run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

# What a ``modelward serve`` imports on its way up: the CLI, uvicorn, and every module of the
# registry (``registry.app.create_app`` imports the routers inside the function; walking the
# package keeps this list from drifting from it). Imported once in the helper, shared by
# every child.
_PRELOAD = ("modelward.cli", "modelward.cli.server", "uvicorn")
_PRELOAD_PACKAGE = "modelward.registry"


# -- the helper (``python -m tests.forkserver``) ---------------------------------------------
def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``modelward *args``; never returns."""
    code = 70
    try:
        if request["new_session"]:
            os.setsid()
        for name in ("SIGINT", "SIGTERM", "SIGCHLD", "SIGPIPE"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fds = {
            0: os.open(request["stdin"] or os.devnull, os.O_RDONLY),
            1: os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
        }
        fds[2] = (
            fds[1]
            if request["stderr"] == request["stdout"]
            else os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        )
        for target, fd in fds.items():
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        os.environ.clear()
        os.environ.update(request["env"])
        if request["cwd"]:
            os.chdir(request["cwd"])
        sys.argv = ["modelward", *request["args"]]
        code = _run_main()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_main() -> int:
    import logging
    import traceback

    from modelward.cli import main

    try:
        main()
        code: object = 0
    except SystemExit as exit_:
        code = exit_.code
    except BaseException:
        traceback.print_exc()
        code = 1
    logging.shutdown()
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _helper() -> None:
    import importlib
    import pkgutil

    for module in _PRELOAD:
        importlib.import_module(module)
    package = importlib.import_module(_PRELOAD_PACKAGE)
    for found in pkgutil.walk_packages(package.__path__, f"{_PRELOAD_PACKAGE}."):
        importlib.import_module(found.name)
    # fd 1 is the pipe to the test process: only our messages go there
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    buffered = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.05)
        if ready:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return  # the test process is gone; children live on, as Popen's do
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    channel.close()
                    _child(request)
                channel.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            channel.write(json.dumps({"exit": pid, "rc": os.waitstatus_to_exitcode(status)}) + "\n")


# -- the test process's side ---------------------------------------------------------------
class _Helper:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO_ROOT,
            env=env,
        )
        self.lock = threading.Lock()
        self.changed = threading.Condition()
        self.pids: dict[int, int] = {}
        self.exits: dict[int, int] = {}
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True, name="forkserver").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self.changed:
                if "exit" in message:
                    self.exits[message["exit"]] = message["rc"]
                else:
                    self.pids[message["id"]] = message["pid"]
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, request: dict[str, Any]) -> int:
        with self.lock:
            self.next_id += 1
            request["id"] = self.next_id
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        with self.changed:
            answered = self.changed.wait_for(
                lambda: request["id"] in self.pids or not self.alive(), 60
            )
            if not answered:
                raise RuntimeError("the fork server did not answer")
            if request["id"] not in self.pids:
                raise RuntimeError(f"the fork server exited {self.proc.returncode}")
            return self.pids.pop(request["id"])


_HELPERS: list[_Helper] = []  # this test process's helper, started on first use
_HELPER_LOCK = threading.Lock()


def _helper_process() -> _Helper:
    with _HELPER_LOCK:
        if not _HELPERS or not _HELPERS[-1].alive():
            _HELPERS.append(_Helper())
        return _HELPERS[-1]


def enabled() -> bool:
    return os.environ.get("MODELWARD_TEST_FORK", "1") != "0"


class ForkedProcess:
    """A ``modelward`` process forked by the helper, as tests use a ``subprocess.Popen``."""

    def __init__(self, helper: _Helper, pid: int, args: Sequence[str]) -> None:
        self._helper = helper
        self.pid = pid
        self.args = ["modelward", *args]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            with self._helper.changed:
                self.returncode = self._helper.exits.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self._helper.changed:
            done = self._helper.changed.wait_for(
                lambda: self.pid in self._helper.exits or not self._helper.alive(), timeout
            )
            if not done:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        while self.poll() is None:  # the helper died: its children are reaped by init
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 0)
                time.sleep(0.1)
                continue
            self.returncode = -signal.SIGKILL
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Process = ForkedProcess | subprocess.Popen[bytes]


def _startup_env(env: Mapping[str, str]) -> bool:
    """Whether ``env`` sets a ``PYTHON*`` variable differently from this process: those act
    as an interpreter starts (``PYTHONPATH`` with a ``sitecustomize``, ``PYTHONHASHSEED``,
    ``PYTHONPROFILEIMPORTTIME``), which a forked child never does; such a command gets a
    fresh interpreter."""
    names = {n for n in (*env, *os.environ) if n.startswith("PYTHON")}
    return any(env.get(n) != os.environ.get(n) for n in names)


def spawn(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    stdout: str | os.PathLike[str],
    stderr: str | os.PathLike[str] | None = None,
    stdin: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    start_new_session: bool = False,
) -> Process:
    """``modelward *args`` as its own process, its output appended to the file ``stdout``
    (and ``stderr``, the same file when not given): forked from the helper, or a plain
    subprocess of the ``modelward`` script when the fork server is off or ``env`` changes
    what an interpreter does as it starts (``_startup_env``)."""
    if not enabled() or _startup_env(env):
        script = str(Path(sys.executable).with_name("modelward"))
        with contextlib.ExitStack() as files:
            out = files.enter_context(Path(stdout).open("ab"))
            err = files.enter_context(Path(stderr).open("ab")) if stderr else subprocess.STDOUT
            given = files.enter_context(Path(stdin).open("rb")) if stdin else subprocess.DEVNULL
            return subprocess.Popen(
                [script, *args],
                stdin=given,
                stdout=out,
                stderr=err,
                env=dict(env),
                cwd=cwd,
                start_new_session=start_new_session,
            )
    helper = _helper_process()
    request = {
        "args": list(args),
        "env": dict(env),
        "cwd": str(cwd) if cwd else None,
        "stdout": str(stdout),
        "stderr": str(stderr or stdout),
        "stdin": str(stdin) if stdin else None,
        "new_session": start_new_session,
    }
    return ForkedProcess(helper, helper.fork(request), args)


def run(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    timeout: float = 120,
    stdin: str = "",
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``modelward *args`` as its own process, as ``subprocess.run(..., capture_output=True,
    text=True)`` answers it."""
    with tempfile.TemporaryDirectory(prefix="modelward-run-") as tmp:
        out, err, given = Path(tmp, "out"), Path(tmp, "err"), Path(tmp, "in")
        given.write_text(stdin)
        proc = spawn(args, env, stdout=out, stderr=err, stdin=given, cwd=cwd)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return subprocess.CompletedProcess(
            ["modelward", *args],
            code,
            out.read_text(errors="replace") if out.exists() else "",
            err.read_text(errors="replace") if err.exists() else "",
        )


if __name__ == "__main__":
    _helper()
