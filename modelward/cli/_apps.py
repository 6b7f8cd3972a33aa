"""The Typer groups attest/ contributes to the ``modelward`` command."""

from __future__ import annotations

import typer

bundle_app = typer.Typer(
    name="bundle",
    help="Build, inspect, scan, sign and verify model bundles.",
    no_args_is_help=True,
)
key_app = typer.Typer(
    name="key",
    help="Generate and manage signing keys.",
    no_args_is_help=True,
)
