"""The ``modelward`` command, wired in one place.

attest/ contributes ``bundle`` and ``key``; registry/ the server and client commands; loader/
``pull``, ``verify``, ``boot``, ``replay`` and ``baseline``. Every group is imported at the top
of this module: a broken import is an error at start-up, never a command group that silently
vanishes.
"""

from __future__ import annotations

import logging
import os
import sys

import typer

from modelward.attest.cli import bundle_app, key_app
from modelward.attest.cli._common import err_console
from modelward.attest.errors import AttestError
from modelward.loader import cli as loader_cli
from modelward.registry import cli as registry_cli

__all__ = ["ERROR_ROOTS", "app", "main"]

app = typer.Typer(
    name="modelward",
    help=(
        "Supply-chain registry and hardened loader for ML model bundles.\n\n"
        "Exit codes: 0 success, 1 refused or failed (with every reason), 2 usage error."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(bundle_app)
app.add_typer(key_app)
registry_cli.register(app)
loader_cli.register(app)

ERROR_ROOTS: tuple[type[Exception], ...] = (
    AttestError,
    *registry_cli.ERROR_ROOTS,
    *loader_cli.ERROR_ROOTS,
)


def main() -> None:
    """Entry point: run the app, report our own errors without a traceback."""
    verbose = os.environ.get("MODELWARD_VERBOSE") == "1"
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING)
    try:
        app()
    except ERROR_ROOTS as exc:
        if verbose:
            raise
        err_console.print("error:", style="bold red", end=" ")
        err_console.print(str(exc), markup=False)
        err_console.print("hint: set MODELWARD_VERBOSE=1 for a traceback", style="dim")
        sys.exit(1)


if __name__ == "__main__":
    main()
