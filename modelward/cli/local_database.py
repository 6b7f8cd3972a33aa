"""The database a command names on its command line (``--config`` / ``--data-dir`` /
``--database-url``), for the commands that work straight on it: ``db``, ``admin principal``,
``admin token`` (bootstrap and recovery, audited as ``local-admin``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import typer

__all__ = ["LOCAL_ACTOR", "database_url", "fail", "missing_sqlite_file", "settings"]

LOCAL_ACTOR = "local-admin"  # straight on the database, as the admin commands record it


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
