"""loader/'s commands on the ``modelward`` command (filled in by the loader issue)."""

from __future__ import annotations

import typer

from modelward.loader.errors import LoaderError

ERROR_ROOTS: tuple[type[Exception], ...] = (LoaderError,)


def register(app: typer.Typer) -> None:
    """Add every loader command to the root ``modelward`` app."""
    from modelward.loader import _cli_commands

    _cli_commands.register_commands(app)
