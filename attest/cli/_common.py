"""Output helpers shared by every command: one console, one way to fail, one hashing bar."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:
    from modelward.attest.digest import ProgressCallback

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, *, code: int = 1, hint: str | None = None) -> NoReturn:
    """Print ``error: message`` (and a hint) on stderr and exit with ``code``."""
    err_console.print("error:", style="bold red", end=" ")
    err_console.print(message, markup=False)
    if hint:
        err_console.print("hint:", style="dim", end=" ")
        err_console.print(hint, markup=False)
    raise typer.Exit(code)


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
