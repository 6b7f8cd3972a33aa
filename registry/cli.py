"""registry/'s commands on the ``modelward`` command.

Server-side commands (serve, db, admin) live in ``registry._cli_server``; client-side ones
(login, push, alias, approve, quarantine, audit, repo, key register, bundle show) live in
``registry._cli_client``, ``attestation add|list|retract`` in ``registry._cli_attestation``,
``org create|show|list`` and ``org owner add|remove`` in ``registry._cli_orgs``.
Each registers itself on the root app here.
"""

from __future__ import annotations

import typer

from modelward.registry._cli_attestation import register_attestation
from modelward.registry._cli_client import register_client
from modelward.registry._cli_orgs import register_orgs
from modelward.registry._cli_server import register_server
from modelward.registry.client import RegistryClientError
from modelward.registry.errors import RegistryError

ERROR_ROOTS: tuple[type[Exception], ...] = (RegistryError, RegistryClientError)


def register(app: typer.Typer) -> None:
    """Add every registry command to the root ``modelward`` app."""
    register_server(app)
    register_client(app)
    register_attestation(app)
    register_orgs(app)
