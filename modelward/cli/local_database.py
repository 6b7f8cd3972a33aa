"""The database a command names on its command line (``--config`` / ``--data-dir`` /
``--database-url``), for the commands that work straight on it: ``db``, ``admin principal``,
``admin token`` (bootstrap and recovery, audited as ``local-admin``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import typer

__all__ = [
    "EXIT_ENVIRONMENT",
    "LOCAL_ACTOR",
    "database_url",
    "fail",
    "missing_sqlite_file",
    "reaching",
    "settings",
    "shown",
]

LOCAL_ACTOR = "local-admin"  # straight on the database, as the admin commands record it
EXIT_ENVIRONMENT = 3  # the database cannot be reached (docs/cli.md#exit-codes)


def settings(config: Path | None, **overrides: Any) -> Any:
    """The registry settings of ``config`` with the command line's ``overrides``."""
    from modelward.registry.settings import load_settings

    return load_settings(config, **overrides)


def database_url(config: Path | None, data_dir: Path | None, url: str | None) -> str:
    """The database URL those three flags name together."""
    resolved: str = settings(config, data_dir=data_dir, database_url=url).resolved_database_url()
    return resolved


def fail(message: str, *, hint: str | None = None, code: int = 1) -> NoReturn:
    """``error: message`` (and ``hint:``) on stderr, then exit ``code``."""
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    raise typer.Exit(code)


def missing_sqlite_file(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist (opening it would create it)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:  # reported by whoever opens it
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(str(parsed.database))
    return None if path.is_file() else path


def shown(url: str) -> str:
    """``url`` as a command prints it: its password masked (registry.db.masked_url)."""
    from modelward.registry.db import masked_url

    return masked_url(url)


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Work on the database ``url`` names: one it cannot connect to (a server down, a host
    unknown, a password refused, a file it cannot open) is ``error:`` naming it, password
    masked, exit 3 (the environment), never a traceback."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        reason = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
        why = reason[0] if reason else type(exc).__name__
        password = _password(url)
        if password:
            why = why.replace(password, "***")
        fail(
            f"cannot reach the database {shown(url)}: {why}",
            hint="check that the database server runs and that --database-url (or "
            "--data-dir, --config) names it",
            code=EXIT_ENVIRONMENT,
        )


def _password(url: str) -> str | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).password
    except (ArgumentError, ValueError, TypeError):
        return None
