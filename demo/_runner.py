"""The demo's machinery: run a real CLI command, show it so a reader can repeat it, check it.

Every command runs as a subprocess with the repository root as its working directory. What is
printed is the command a reader would type: the demo's temporary directory shows as ``$DEMO``
and every secret (an API token) as the shell variable that holds it, never its value.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

__all__ = ["Runner", "StepFailedError", "StepResult", "StepSkippedError", "cleanup"]

MAX_SHOWN_LINES = 12
MAX_LINE_CHARS = 200


class StepFailedError(Exception):
    """A step did not have the outcome the story expects."""


class StepSkippedError(Exception):
    """A step cannot run here (a missing feature or an optional component)."""


@dataclass
class StepResult:
    number: int
    title: str
    status: str  # "ok", "failed", "skipped", "not run"
    outcome: str


@dataclass
class Runner:
    """Runs and shows commands; remembers each step's result for the summary table."""

    repo_root: Path
    workdir: Path
    console: Console
    base_env: dict[str, str]
    secrets: dict[str, str] = field(default_factory=dict)  # value -> "$VAR"
    results: list[StepResult] = field(default_factory=list)
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    aborted: bool = False

    # -- display ---------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        """Hide secrets and the temporary directory's path."""
        for value, name in self.secrets.items():
            text = text.replace(value, name)
        return text.replace(str(self.workdir), "$DEMO")

    def shown(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        prefix = [f"{k}={v}" for k, v in (env or {}).items()]
        words = [*prefix, *argv]
        text = " ".join(w if w.startswith("$") or "=$" in w else shlex.quote(w) for w in words)
        return self.redact(text)

    def _echo_output(self, text: str) -> None:
        lines = [
            line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."
            for line in self.redact(text).splitlines()
            if line.strip()
        ]
        if len(lines) > MAX_SHOWN_LINES:
            hidden = len(lines) - MAX_SHOWN_LINES
            lines = [*lines[: MAX_SHOWN_LINES - 2], f"... ({hidden} more lines)", *lines[-2:]]
        for line in lines:
            self.console.print(
                f"    {line}", style="dim", markup=False, highlight=False, soft_wrap=True
            )

    # -- commands --------------------------------------------------------------------------
    def modelward(self) -> str:
        exe = Path(sys.executable).parent / "modelward"
        return str(exe) if exe.exists() else "modelward"

    def env_for(self, display_env: Mapping[str, str]) -> dict[str, str]:
        env = dict(self.base_env)
        for key, value in display_env.items():
            env[key] = self.unredact(value)
        return env

    def unredact(self, value: str) -> str:
        for secret, name in self.secrets.items():
            value = value.replace(name, secret)
        return value

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        expect: int = 0,
        timeout: float = 600,
        python: bool = False,
        secret_last_line: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``modelward ARGV`` (or ``python ARGV``), show it, check the exit status.

        ``env`` values may name secrets as ``$VAR``; they are shown as given and filled in
        for the real run. Raises StepFailedError when the exit status is not ``expect``.
        """
        display_env = dict(env or {})
        program = "python" if python else "modelward"
        self.console.print(
            f"  $ {self.shown([program, *argv], display_env)}",
            style="bold cyan",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        real = [sys.executable if python else self.modelward(), *map(self.unredact, argv)]
        try:
            proc = subprocess.run(
                real,
                cwd=self.repo_root,
                env=self.env_for(display_env),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise StepFailedError(
                f"`{program} {argv[0]}` did not finish in {timeout:.0f} s"
            ) from exc
        if secret_last_line and proc.returncode == 0:
            lines = proc.stdout.strip().splitlines()
            if lines and lines[-1].strip():
                self.secrets[lines[-1].strip()] = secret_last_line
        self._echo_output(proc.stdout + ("\n" + proc.stderr if proc.stderr else ""))
        if proc.returncode != expect:
            tail = self.redact((proc.stderr or proc.stdout).strip())[-600:]
            raise StepFailedError(
                f"`{program} {' '.join(argv[:2])}` exited {proc.returncode}, "
                f"expected {expect}: {tail}"
            )
        status = "refused as expected" if expect else "ok"
        self.console.print(f"    -> exit {proc.returncode} ({status})", style="green")
        return proc

    def start(
        self, argv: Sequence[str], *, env: Mapping[str, str], log: Path, python: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start ``modelward ARGV`` in the background (output to ``log``); stopped at the end."""
        program = "python" if python else "modelward"
        self.console.print(
            f"  $ {self.shown([program, *argv], env)} &",
            style="bold cyan",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        real = [sys.executable if python else self.modelward(), *map(self.unredact, argv)]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                real,
                cwd=self.repo_root,
                env=self.env_for(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
        """SIGTERM ``proc`` (then SIGKILL after ``timeout``); return its exit status."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if proc in self.background:
            self.background.remove(proc)
        return proc.returncode

    def stop_all(self) -> None:
        for proc in list(self.background):
            self.stop(proc)

    # -- steps -----------------------------------------------------------------------------
    def step(self, title: str, why: str, body: Callable[[], str]) -> None:
        """Run one story step: print its heading, run ``body``, record its outcome."""
        number = len(self.results) + 1
        if self.aborted:
            self.results.append(StepResult(number, title, "not run", "an earlier step failed"))
            return
        self.console.rule(f"[bold]Step {number}. {title}", align="left")
        self.console.print(why, style="italic", highlight=False)
        try:
            outcome = body()
        except StepSkippedError as exc:
            self.console.print(
                f"  SKIPPED: {exc}", style="bold yellow", markup=False, soft_wrap=True
            )
            self.results.append(StepResult(number, title, "skipped", str(exc)))
        except StepFailedError as exc:
            self.console.print(
                f"  FAILED: {self.redact(str(exc))}", style="bold red", markup=False, soft_wrap=True
            )
            self.results.append(StepResult(number, title, "failed", self.redact(str(exc))))
            self.aborted = True
        else:
            self.console.print(
                f"  OK: {self.redact(outcome)}", style="bold green", markup=False, soft_wrap=True
            )
            self.results.append(StepResult(number, title, "ok", self.redact(outcome)))

    def summary(self) -> bool:
        """Print the summary table; True when no step failed."""
        table = Table(title="modelward demo: summary", show_lines=False)
        table.add_column("#", justify="right")
        table.add_column("step")
        table.add_column("result")
        table.add_column("outcome", overflow="fold")
        styles = {"ok": "green", "failed": "bold red", "skipped": "yellow", "not run": "dim"}
        for r in self.results:
            table.add_row(str(r.number), r.title, f"[{styles[r.status]}]{r.status}[/]", r.outcome)
        self.console.print()
        self.console.print(table)
        failed = [r for r in self.results if r.status in ("failed", "not run")]
        if failed:
            self.console.print(Panel(f"{len(failed)} step(s) did not complete", style="red"))
        else:
            self.console.print(Panel("every step had the expected outcome", style="green"))
        return not failed


@contextlib.contextmanager
def cleanup(runner: Runner) -> Iterator[Runner]:
    """Stop every background process the demo started, whatever happens."""
    try:
        yield runner
    finally:
        runner.stop_all()
