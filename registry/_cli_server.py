"""Server-side commands: ``modelward serve``, ``modelward db ...``, ``modelward admin ...``.

The admin commands work straight on the database named by ``--database-url`` / ``--data-dir``
(or MODELWARD_* settings), for bootstrapping and recovery; they are audited as ``local-admin``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["register_server"]

LOCAL_ACTOR = "local-admin"

DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="SQLite database and blobs (default ./.modelward)")
]
DbUrl = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy URL (sqlite:///..., postgresql://)")
]
ConfigFile = Annotated[Path | None, typer.Option("--config", help="TOML settings file")]


def _settings(config: Path | None, **overrides: Any) -> Any:
    from modelward.registry.settings import load_settings

    return load_settings(config, **overrides)


def serve(
    *,
    host: Annotated[str | None, typer.Option("--host", help="listen address (127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option("--port", help="listen port (8700)")] = None,
    data_dir: DataDir = None,
    database_url: DbUrl = None,
    blob_store: Annotated[
        str | None, typer.Option("--blob-store", help="file:///dir or s3://bucket/prefix")
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="default policy for new repositories")
    ] = None,
    s3_presign: Annotated[
        bool | None, typer.Option("--s3-presign/--no-s3-presign", help="redirect blob GETs")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            max=64,
            help="server processes (default 1 on SQLite, min(4, CPUs) on PostgreSQL)",
        ),
    ] = None,
    config: ConfigFile = None,
) -> None:
    """Run the registry server."""
    import uvicorn

    from modelward.registry.app import build_state, configure_logging, create_app
    from modelward.registry.db import ensure_schema
    from modelward.registry.domains.principals.service import bootstrap_admin
    from modelward.registry.settings import WORKER_SETTINGS_ENV, worker_settings_json

    settings = _settings(
        config,
        host=host,
        port=port,
        data_dir=data_dir,
        database_url=database_url,
        blob_store=blob_store,
        policy=policy,
        s3_presign=s3_presign,
        workers=workers,
    )
    configure_logging(settings.log_level)
    state = build_state(settings)
    if ensure_schema(state.db.engine, settings.resolved_database_url()):
        typer.echo("initialized an empty database")
    secret = settings.bootstrap_token.get_secret_value() if settings.bootstrap_token else None
    with state.db.write() as session:
        created = bootstrap_admin(session, secret)
    url = f"http://{settings.host}:{settings.port}"
    processes = settings.resolved_workers()
    typer.echo(
        f"modelward registry at {url}" + (f" ({processes} workers)" if processes > 1 else "")
    )
    if created is not None:
        token, generated = created
        if generated:
            typer.echo("admin token (shown once, store it now):")
            typer.echo(token)
        else:
            typer.echo("admin principal created with the token from MODELWARD_BOOTSTRAP_TOKEN")
    sys.stdout.flush()
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": 5,
        # uvicorn would otherwise rewrite the client address from X-Forwarded-For for peers
        # in FORWARDED_ALLOW_IPS (127.0.0.1 by default); the app reads forwarding headers
        # itself, from the peers in ``trusted_proxies`` only (docs/registry.md#audit-log)
        "proxy_headers": False,
    }
    if processes == 1:
        uvicorn.Server(uvicorn.Config(create_app(settings, state), **common)).run()
        return
    # Several processes: the schema is migrated and the admin bootstrapped above, once. The
    # workers (spawned, not forked) rebuild the app from the resolved settings; the bootstrap
    # token is neither in those settings nor left in the environment they inherit.
    state.db.dispose()
    os.environ.pop("MODELWARD_BOOTSTRAP_TOKEN", None)
    os.environ[WORKER_SETTINGS_ENV] = worker_settings_json(settings)
    uvicorn.run(
        "modelward.registry.app:create_app_from_environment",
        factory=True,
        workers=processes,
        **common,
    )


db_app = typer.Typer(name="db", help="Database schema migrations.", no_args_is_help=True)


def _db_url(config: Path | None, data_dir: Path | None, database_url: str | None) -> str:
    url: str = _settings(
        config, data_dir=data_dir, database_url=database_url
    ).resolved_database_url()
    return url


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="target revision")] = "head",
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Migrate the database schema up (to head)."""
    from modelward.registry.db import upgrade

    upgrade(_db_url(config, data_dir, database_url), revision)
    typer.echo(f"database upgraded to {revision}")


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="target revision ('base' = empty)")] = "-1",
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Migrate the database schema down (one step by default)."""
    from modelward.registry.db import downgrade

    downgrade(_db_url(config, data_dir, database_url), revision)
    typer.echo(f"database downgraded to {revision}")


@db_app.command("current")
def db_current(
    database_url: DbUrl = None, data_dir: DataDir = None, config: ConfigFile = None
) -> None:
    """Print the database's schema revision and the one this modelward needs."""
    from modelward.registry.db import current_revision, head_revision, make_engine

    engine = make_engine(_db_url(config, data_dir, database_url))
    try:
        typer.echo(f"current: {current_revision(engine) or '(empty)'}")
        typer.echo(f"head: {head_revision()}")
    finally:
        engine.dispose()


admin_app = typer.Typer(
    name="admin", help="Local administration (straight on the database).", no_args_is_help=True
)
principal_app = typer.Typer(name="principal", help="Principals.", no_args_is_help=True)
token_app = typer.Typer(name="token", help="API tokens.", no_args_is_help=True)
admin_app.add_typer(principal_app)
admin_app.add_typer(token_app)


def _database(config: Path | None, data_dir: Path | None, database_url: str | None) -> Any:
    from modelward.registry.db import Database, make_engine, schema_state

    url = _db_url(config, data_dir, database_url)
    engine = make_engine(url)
    state = schema_state(engine)
    if state != "current":
        engine.dispose()
        from modelward.registry.errors import DatabaseOutOfDate

        raise DatabaseOutOfDate(
            f"database schema is {state}: run `modelward db upgrade` (or `modelward serve`) first"
        )
    return Database(engine)


@principal_app.command("create")
def principal_create(
    name: Annotated[str, typer.Argument(help="principal name")],
    role: Annotated[str, typer.Option("--role", help="admin, publisher, reviewer or reader")],
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Create a principal."""
    from modelward.registry.domains.principals.service import create_principal

    db = _database(config, data_dir, database_url)
    with db.write() as session:
        create_principal(session, name=name, role=role, actor=LOCAL_ACTOR)
    db.dispose()
    typer.echo(f"created principal {name} ({role})")


@principal_app.command("list")
def principal_list(
    database_url: DbUrl = None, data_dir: DataDir = None, config: ConfigFile = None
) -> None:
    """List principals."""
    from modelward.registry.domains.principals.service import list_principals

    db = _database(config, data_dir, database_url)
    with db.read() as session:
        for p in list_principals(session):
            typer.echo(f"{p.name}\t{p.role}")
    db.dispose()


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="principal name")],
    expires_in: Annotated[
        int | None, typer.Option("--expires-in", help="lifetime in seconds", min=1)
    ] = None,
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Create an API token; the token is printed once, as the last line."""
    from modelward.registry.domains.principals.service import create_token

    db = _database(config, data_dir, database_url)
    with db.write() as session:
        token_id, token = create_token(session, name=name, expires_in=expires_in, actor=LOCAL_ACTOR)
    db.dispose()
    typer.echo(f"token id: {token_id}")
    typer.echo(token)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="token id")],
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Revoke an API token by id."""
    from modelward.registry.domains.principals.service import revoke_token

    db = _database(config, data_dir, database_url)
    with db.write() as session:
        revoke_token(session, token_id=token_id, actor=LOCAL_ACTOR)
    db.dispose()
    typer.echo(f"revoked token {token_id}")


def register_server(app: typer.Typer) -> None:
    """Add serve, db and admin to the root app."""
    app.command("serve")(serve)
    app.add_typer(db_app)
    app.add_typer(admin_app)
