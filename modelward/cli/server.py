"""Server-side commands: ``modelward serve``, ``modelward db ...``.

``modelward admin principal|token`` live in ``modelward.cli.principals``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.local_database import LOCAL_ACTOR as _LOCAL_ACTOR
from modelward.cli.local_database import database_url as _db_url
from modelward.cli.local_database import fail as _fail
from modelward.cli.local_database import missing_sqlite_file as _missing_sqlite_file
from modelward.cli.local_database import reaching as _reaching
from modelward.cli.local_database import settings as _settings
from modelward.cli.local_database import shown as _shown

__all__ = ["register_server"]

DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="SQLite database and blobs (default ./.modelward)")
]
DbUrl = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy URL (sqlite:///..., postgresql://)")
]
ConfigFile = Annotated[Path | None, typer.Option("--config", help="TOML settings file")]


EXIT_CANNOT_LISTEN = 3
EXIT_ENVIRONMENT = 3  # the data directory is another server's (docs/cli.md#exit-codes)


def _require_free_port(host: str, port: int) -> None:
    """Bind ``host:port`` once, as uvicorn will (SO_REUSEADDR), and let it go; a port in use
    or an address that cannot be bound is ``error:`` naming it, exit 3."""
    import errno
    import socket

    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        _fail(f"cannot listen on {where}: {exc}", code=EXIT_CANNOT_LISTEN)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                _fail(
                    f"cannot listen on {where}: the address is already in use (another process "
                    "listens there); nothing was started",
                    hint="stop that process, or pick another port with --port",
                    code=EXIT_CANNOT_LISTEN,
                )
            _fail(f"cannot listen on {where}: {exc.strerror or exc}", code=EXIT_CANNOT_LISTEN)


def serve(
    *,
    host: Annotated[str | None, typer.Option("--host", help="listen address (127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option("--port", help="listen port (8700)")] = None,
    data_dir: DataDir = None,
    database_url: DbUrl = None,
    blob_store: Annotated[
        str | None,
        typer.Option(
            "--blob-store",
            "--storage-url",
            help="where blobs live: file:///dir or s3://bucket/prefix (default "
            "file://DATA_DIR/blobs)",
        ),
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
    _check_urls(settings.resolved_database_url(), settings.resolved_blob_store())
    # Before anything is printed or created: a busy port fails here, not after the banner.
    _require_free_port(settings.host, settings.port)
    # One server per SQLite database, held until this process ends (registry.writer_lock).
    writer_lock = _hold_writer_lock(settings.resolved_database_url())
    configure_logging(settings.log_level)
    state = build_state(settings)
    if ensure_schema(state.db.engine, settings.resolved_database_url()):
        typer.echo("initialized an empty database")
    secret = settings.bootstrap_token.get_secret_value() if settings.bootstrap_token else None
    with state.db.write() as session:
        created = bootstrap_admin(session, secret)
    from modelward.registry.domains.signing.online import DB_WRITER_ONLINE, ensure_root, trust_of

    if ensure_root(state):
        typer.echo(
            "warning: TUF root version 1 created with ONLINE root and targets keys under "
            f"{settings.resolved_tuf_keys_dir()}: for production run `modelward trust init` "
            "with offline keys (docs/tuf.md#keys)",
            err=True,
        )
    if trust_of(settings).keys.has("targets"):  # every start, until `trust init`
        typer.echo(f"warning: {DB_WRITER_ONLINE}", err=True)
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
        _release(writer_lock)
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
    _release(writer_lock)


def _check_urls(database_url: str, blob_store: str) -> None:
    """A database URL that is not SQLite or PostgreSQL, or a blob store that is not
    ``file://`` or ``s3://bucket``, is ``error:`` naming the value, exit 2 (the password of
    a database URL is never echoed)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    expected = "expected sqlite:///PATH or postgresql://USER@HOST:PORT/DB"
    try:
        parsed = make_url(database_url)
    except ArgumentError:
        _fail(f"--database-url is not a database URL: {expected}", code=2)
    if parsed.get_backend_name() not in {"sqlite", "postgresql"}:
        _fail(f"--database-url {parsed.render_as_string(hide_password=True)}: {expected}", code=2)
    if blob_store.startswith("file://") and blob_store != "file://":
        return
    if blob_store.startswith("s3://") and blob_store.removeprefix("s3://").split("/")[0]:
        return
    _fail(f"--storage-url {blob_store!r}: expected file:///DIR or s3://BUCKET[/PREFIX]", code=2)


def _hold_writer_lock(url: str) -> Any:
    """This process's writer lock on the SQLite database ``url`` names (None elsewhere);
    another server holding it is ``error:`` naming the directory and its pid, exit 3."""
    from modelward.registry.writer_lock import DataDirInUse, hold_writer_lock

    try:
        return hold_writer_lock(url)
    except DataDirInUse as exc:
        _fail(str(exc), code=EXIT_ENVIRONMENT)


def _release(lock: Any) -> None:
    if lock is not None:
        lock.release()


def _current_database(url: str) -> Any:
    """The existing database ``url`` names, at the schema this modelward needs; else
    ``error:`` naming it and the step to take, exit 1, nothing created."""
    from modelward.registry.db import Database, make_engine, schema_state

    missing = _missing_sqlite_file(url)
    if missing is not None:
        _fail(f"no database at {missing}; nothing was created", hint=_NEW_DATABASE_HINT)
    engine = make_engine(url)
    state = schema_state(engine)
    if state != "current":
        engine.dispose()
        _fail(
            f"the database {_shown(url)} is {'empty' if state == 'empty' else 'not at head'}: "
            "the signed state goes back into a database at the current schema",
            hint=f"run `modelward db upgrade` on {_shown(url)} first",
        )
    return Database(engine)


def _refuse_while_served(url: str) -> None:
    """``error:`` (exit 3) when a ``serve`` holds the SQLite database ``url`` names."""
    from modelward.registry.writer_lock import DataDirInUse, writer_holding

    try:
        writer_holding(url, doing="nothing was changed")
    except DataDirInUse as exc:
        _fail(str(exc), code=EXIT_ENVIRONMENT)


_NEW_DATABASE_HINT = (
    "pass the registry's --data-dir or --database-url; `modelward db upgrade` creates a new one"
)
db_app = typer.Typer(name="db", help="Database schema migrations.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="target revision")] = "head",
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Migrate the database schema up (to head)."""
    from modelward.registry.db import upgrade

    url = _db_url(config, data_dir, database_url)
    with _reaching(url):
        upgrade(url, revision)
        now = _revision_now(url)
    typer.echo(f"database upgraded to {now}")


def _revision_now(url: str) -> str:
    """The revision the database ``url`` names is at, with its migration's title."""
    from modelward.registry.db import current_revision, describe_revision, make_engine

    engine = make_engine(url)
    try:
        return describe_revision(current_revision(engine))
    finally:
        engine.dispose()


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="target revision ('base' = empty)")] = "-1",
    *,
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
    destroy_signed_state: Annotated[
        bool,
        typer.Option(
            "--destroy-signed-state",
            help="Below revision 0010: drop the TUF metadata and row seals (needs --export-to)",
        ),
    ] = False,
    export_to: Annotated[
        Path | None,
        typer.Option(
            "--export-to",
            metavar="DIR",
            help="With --destroy-signed-state: export the signed state into DIR (new or "
            "empty) first; `db import-signed-state DIR` puts it back after the upgrade",
        ),
    ] = None,
) -> None:
    """Migrate the database schema down (one step by default). Below the TUF revisions
    (0009, 0010) a database holding signed metadata, and below the rollout revisions (0014,
    0015) a database with a rollout under way, is refused unless --destroy-signed-state and
    --export-to DIR are given (docs/operations.md#downgrade)."""
    from modelward.registry.db import downgrade, make_engine

    url = _db_url(config, data_dir, database_url)
    missing = _missing_sqlite_file(url)
    if missing is not None:
        _fail(f"no database at {missing}; nothing was created", hint=_NEW_DATABASE_HINT)
    _refuse_while_served(url)
    with _reaching(url):
        engine = make_engine(url)
        try:
            _guard_downgrade(engine, revision, destroy=destroy_signed_state, export_to=export_to)
        finally:
            engine.dispose()
        downgrade(url, revision)
        now = _revision_now(url)
    typer.echo(f"database downgraded to {now}")


def _guard_downgrade(engine: Any, revision: str, *, destroy: bool, export_to: Path | None) -> None:
    """What a downgrade to ``revision`` would drop that workers depend on (the signed TUF
    state; the rows of a rollout under way): ``error:`` naming it, exit 1, unless the
    operator confirmed (``destroy``) and named a directory to export it to, then exported
    there (registry.signed_state, registry.rollout_downgrade)."""
    from modelward.registry.db import Database
    from modelward.registry.rollout_downgrade import export_rollouts, rollouts_under_way
    from modelward.registry.signed_state import downgrade_drops_signed_state, export_signed_state

    drops = downgrade_drops_signed_state(engine, revision)
    under_way = rollouts_under_way(engine, revision)
    confirmed = destroy and export_to is not None
    if drops and not confirmed:
        _fail(
            f"a downgrade to {revision} drops the registry's signed TUF state ({drops} "
            "metadata row(s) and the row seals): workers pinned to its root could not "
            "follow a registry that starts again at root version 1; nothing was changed",
            hint="export it and confirm: `modelward db downgrade "
            f"{revision} --destroy-signed-state --export-to DIR` (then after `db upgrade`: "
            "`modelward db import-signed-state DIR`; docs/operations.md#downgrade)",
        )
    if under_way and not confirmed:
        _fail(
            f"a downgrade to {revision} drops the rows of {len(under_way)} rollout(s) under "
            f"way: {', '.join(under_way)}. Workers keep following the signed step's weights, "
            "but `rollout status`, `advance` and `abort` could no longer find it; nothing was "
            "changed",
            hint="finish or abort it first (`modelward rollout abort ORG/NAME@ALIAS --reason "
            "TEXT --key KEY`), or export and confirm: `modelward db downgrade "
            f"{revision} --destroy-signed-state --export-to DIR` (docs/operations.md#downgrade)",
        )
    if not (drops or under_way) or export_to is None:
        return
    with Database(engine).write() as session:
        if drops:
            summary = export_signed_state(session, export_to, actor=_LOCAL_ACTOR)
            typer.echo(
                f"exported the signed state ({summary.files} files, root version "
                f"{summary.root_version}, timestamp version {summary.timestamp_version}) "
                f"to {export_to}"
            )
        if under_way:
            rollouts = export_rollouts(session, export_to, actor=_LOCAL_ACTOR)
            typer.echo(
                f"exported the rows of {rollouts.rollouts} rollout(s) ({', '.join(under_way)} "
                f"under way) to {rollouts.path} ({rollouts.sha256})"
            )


@db_app.command("import-signed-state")
def db_import_signed_state(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR",
            help="What `db downgrade --export-to DIR` wrote",
            exists=True,
            file_okay=False,
        ),
    ],
    database_url: DbUrl = None,
    data_dir: DataDir = None,
    config: ConfigFile = None,
) -> None:
    """Put the TUF metadata and row seals a downgrade exported back into the (upgraded)
    database, after checking every digest and signature; audited as local-admin."""
    from modelward.registry.signed_state import import_signed_state

    url = _db_url(config, data_dir, database_url)
    _refuse_while_served(url)
    with _reaching(url):
        db = _current_database(url)
        try:
            with db.write() as session:
                summary = import_signed_state(session, directory, actor=_LOCAL_ACTOR)
        finally:
            db.dispose()
    typer.echo(
        f"imported the signed state from {directory}: root version {summary.root_version}, "
        f"timestamp version {summary.timestamp_version}"
    )


@db_app.command("current")
def db_current(
    database_url: DbUrl = None, data_dir: DataDir = None, config: ConfigFile = None
) -> None:
    """Print the database's schema revision and the one this modelward needs."""
    from modelward.registry.db import current_revision, head_revision, make_engine

    url = _db_url(config, data_dir, database_url)
    missing = _missing_sqlite_file(url)
    if missing is not None:
        _fail(f"no database at {missing}; nothing was created", hint=_NEW_DATABASE_HINT)
    with _reaching(url):
        engine = make_engine(url)
        try:
            current = current_revision(engine)
        finally:
            engine.dispose()
    typer.echo(f"current: {current or '(empty)'}")
    typer.echo(f"head: {head_revision()}")


def register_server(app: typer.Typer) -> None:
    """Add serve and db to the root app."""
    app.command("serve")(serve)
    app.add_typer(db_app)
