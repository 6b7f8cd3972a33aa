"""Output helpers shared by every command: one console, one way to fail, one hashing bar."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from modelward.attest.digest import ProgressCallback


class _LazyConsole:
    """A rich ``Console`` made on first use: importing rich costs start-up time that
    commands printing plain text (``bundle digest``) never need to pay."""

    def __init__(self, *, stderr: bool) -> None:
        object.__setattr__(self, "_stderr", stderr)
        object.__setattr__(self, "_console", None)

    def _get(self) -> Console:
        made: Console | None = object.__getattribute__(self, "_console")
        if made is None:
            from rich.console import Console

            made = Console(
                stderr=object.__getattribute__(self, "_stderr"), highlight=False, soft_wrap=True
            )
            object.__setattr__(self, "_console", made)
        return made

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._get(), name, value)

    def __enter__(self) -> Console:  # rich's Live enters its console
        return self._get().__enter__()

    def __exit__(self, *exc: object) -> None:
        self._get().__exit__(*exc)


console = cast("Console", _LazyConsole(stderr=False))
err_console = cast("Console", _LazyConsole(stderr=True))


def fail(message: str, *, code: int = 1, hint: str | None = None) -> NoReturn:
    """Print ``error: message`` (and a hint) on stderr and exit with ``code``."""
    err_console.print("error:", style="bold red", end=" ")
    err_console.print(message, markup=False)
    if hint:
        err_console.print("hint:", style="dim", end=" ")
        err_console.print(hint, markup=False)
    raise typer.Exit(code)


class UsageInputError(Exception):
    """Input named on the command line that cannot be used (a value, a file a flag names):
    the CLI's own; the message names it. Exits 2 (``modelward.cli._EXIT_CODES``)."""


def fail_with(exc: BaseException, *, hint: str | None = None) -> NoReturn:
    """``fail(str(exc))`` with the exit code the table gives ``exc``'s class
    (``modelward.cli.exit_code_of``; 1 for an error of no known class)."""
    from modelward.cli import EXIT_FAILED, exit_code_of

    fail(str(exc), code=exit_code_of(exc) or EXIT_FAILED, hint=hint)


def read_bounded(path: Path, what: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``; exit 2 naming ``what`` and the file when it cannot
    be read or is larger."""
    from modelward.attest._fileio import read_bounded as read

    try:
        return read(path, limit, what=f"{what} {path}", error=_UnreadableError)
    except _UnreadableError as exc:
        fail(str(exc), code=2)


class _UnreadableError(Exception):
    """A CLI input that cannot be read (read_bounded)."""


def show_progress() -> bool:
    """Progress bars only on an interactive terminal."""
    return sys.stderr.isatty()


@contextmanager
def hashing_progress(directory: Path, *, rate: bool = False) -> Iterator[ProgressCallback | None]:
    """A thread-safe byte counter for hashing ``directory``, drawn on stderr (with transfer
    speed and time left when ``rate``), or None when stderr is no terminal."""
    if not show_progress():
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    from modelward.attest.tree import walk_bundle

    files, _ = walk_bundle(directory)
    columns: list[ProgressColumn] = [
        TextColumn("hashing"),
        BarColumn(),
        DownloadColumn(binary_units=True),
    ]
    if rate:
        columns += [TransferSpeedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("hashing", total=sum(f.size for f in files))
        yield lambda n: bar.advance(task, n)
