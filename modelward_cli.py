"""The ``modelward`` command: attest/, registry/ and loader/ each contribute their groups."""

from __future__ import annotations

import logging
import os
import sys

import typer

from attest.cli import bundle_app, key_app
from attest.cli._common import err_console
from attest.errors import AttestError

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


def _register_optional_groups() -> tuple[type[Exception], ...]:
    """Add registry/ and loader/ commands; return the error roots the CLI reports plainly."""
    roots: list[type[Exception]] = [AttestError]
    try:
        import registry.cli as registry_cli
    except ImportError:
        pass
    else:
        registry_cli.register(app)
        roots.extend(registry_cli.ERROR_ROOTS)
    try:
        import loader.cli as loader_cli
    except ImportError:
        pass
    else:
        loader_cli.register(app)
        roots.extend(loader_cli.ERROR_ROOTS)
    return tuple(roots)


ERROR_ROOTS = _register_optional_groups()


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
