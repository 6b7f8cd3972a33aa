"""Output helpers shared by every command: one console, one way to fail."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

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
