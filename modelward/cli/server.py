"""Server-side commands: ``modelward serve``, ``modelward db ...``, ``modelward admin ...``.

The admin commands (principals, tokens) work over the API with the logged-in token, which
must be an admin's, and are audited under that admin's name. Only with an explicit
``--database-url`` / ``--data-dir`` / ``--config`` do they work straight on that database
instead (bootstrap, recovery), audited as ``local-admin``; that database must exist with the
current schema, and nothing is created when it does not.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

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


EXIT_CANNOT_LISTEN = 3


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
    # Before anything is printed or created: a busy port fails here, not after the banner.
    _require_free_port(settings.host, settings.port)
    configure_logging(settings.log_level)
    state = build_state(settings)
    if ensure_schema(state.db.engine, settings.resolved_database_url()):
        typer.echo("initialized an empty database")
    secret = settings.bootstrap_token.get_secret_value() if settings.bootstrap_token else None
    with state.db.write() as session:
        created = bootstrap_admin(session, secret)
    from modelward.registry.domains.trust.service import DB_WRITER_ONLINE, ensure_root, trust_of

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


_NEW_DATABASE_HINT = (
    "pass the registry's --data-dir or --database-url; `modelward db upgrade` creates a new one"
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

    url = _db_url(config, data_dir, database_url)
    missing = _missing_sqlite_file(url)
    if missing is not None:
        _fail(f"no database at {missing}; nothing was created", hint=_NEW_DATABASE_HINT)
    downgrade(url, revision)
    typer.echo(f"database downgraded to {revision}")


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
    engine = make_engine(url)
    try:
        typer.echo(f"current: {current_revision(engine) or '(empty)'}")
        typer.echo(f"head: {head_revision()}")
    finally:
        engine.dispose()


admin_app = typer.Typer(
    name="admin",
    help=(
        "Principals and API tokens: over the API with the logged-in admin token, or straight "
        "on the database with --data-dir / --database-url / --config (bootstrap, recovery)."
    ),
    no_args_is_help=True,
)
principal_app = typer.Typer(name="principal", help="Principals.", no_args_is_help=True)
token_app = typer.Typer(name="token", help="API tokens.", no_args_is_help=True)
admin_app.add_typer(principal_app)
admin_app.add_typer(token_app)

# Only these flags reach the database directly; without them the admin commands use the API.
AdminDataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Work straight on this registry data dir's database (bootstrap, recovery)",
    ),
]
AdminDbUrl = Annotated[
    str | None,
    typer.Option("--database-url", help="Work straight on this database (bootstrap, recovery)"),
]
AdminConfig = Annotated[
    Path | None,
    typer.Option("--config", help="Work straight on the database this TOML settings file names"),
]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout")]


def _fail(message: str, *, hint: str | None = None, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    raise typer.Exit(code)


@dataclass(frozen=True)
class _Target:
    """Where an admin command works: the database (only with an explicit flag) or the API."""

    config: Path | None
    data_dir: Path | None
    database_url: str | None

    @property
    def direct(self) -> bool:
        return any(v is not None for v in (self.config, self.data_dir, self.database_url))

    def origin(self) -> str:
        if self.database_url is not None:
            return "--database-url"
        if self.data_dir is not None:
            return f"--data-dir {self.data_dir}"
        return f"--config {self.config}"


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _missing_sqlite_file(url: str) -> Path | None:
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


def _read_only_engine(url: str) -> Any:
    """A read-only engine on the SQLite file ``url`` names (None for other databases)."""
    from urllib.parse import quote

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = quote(str(Path(str(parsed.database)).resolve()))
    return create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")


def _existing_database(target: _Target) -> Any:
    """The database ``target`` names, opened only if it exists (a SQLite file is never
    created, nor its directory), with the schema at head; else ``error:`` naming the URL and
    the step to take, exit 1, nothing created."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from modelward.registry.db import (
        Database,
        current_revision,
        head_revision,
        make_engine,
        schema_state,
    )

    url = _db_url(target.config, target.data_dir, target.database_url)
    try:
        shown = _shown(url)
    except ArgumentError:  # the text is not echoed: it may hold a password
        _fail(
            f"invalid database URL (from {target.origin()}): expected sqlite:///PATH or "
            "postgresql://USER@HOST:PORT/DB",
            code=2,
        )
    create_hint = (
        f"to start a new registry there, run `modelward db upgrade {target.origin()}` (or "
        f"`modelward serve {target.origin()}`) first; otherwise pass the registry's own "
        "--data-dir or --database-url, or drop the flag to work over the API as the "
        "logged-in admin"
    )
    missing = _missing_sqlite_file(url)
    if missing is not None:
        _fail(
            f"no registry database at {missing} (from {target.origin()}); nothing was created",
            hint=create_hint,
        )
    # The schema is read first without writing (a SQLite file opened read-only: connecting
    # normally would switch it to WAL), so a refusal leaves the file as it was.
    probe = _read_only_engine(url)
    engine = probe if probe is not None else make_engine(url)
    try:
        state = schema_state(engine)
        have = current_revision(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        _fail(f"cannot open the database {shown} (from {target.origin()}): {exc}")
    if probe is not None:
        probe.dispose()
        engine = make_engine(url)
    if state == "empty":
        engine.dispose()
        _fail(
            f"the database {shown} (from {target.origin()}) has no modelward schema: it is not "
            "a registry's database yet; nothing was changed",
            hint=create_hint,
        )
    if state == "outdated":
        engine.dispose()
        _fail(
            f"the database {shown} (from {target.origin()}) is at schema revision {have}, this "
            f"modelward needs {head_revision()}",
            hint=f"run `modelward db upgrade {target.origin()}` first",
        )
    return Database(engine)


@contextlib.contextmanager
def _admin_api() -> Iterator[Any]:
    """The registry client with the logged-in URL and token; refusals become ``error:``."""
    from modelward.client.api import (
        APIError,
        ClientConfigError,
        ForbiddenError,
        RegistryClient,
        RegistryClientError,
        UnauthorizedError,
    )
    from modelward.client.config import resolve_settings

    try:
        settings = resolve_settings()
    except ClientConfigError as exc:
        _fail(
            f"no registry to administer: {exc}",
            hint=(
                "log in with an admin's token (`modelward login URL --token ADMIN_TOKEN`, or "
                "MODELWARD_URL and MODELWARD_TOKEN); on the registry host, for bootstrap or "
                "recovery, pass --data-dir DIR or --database-url URL to work straight on its "
                "database"
            ),
        )
    try:
        with RegistryClient(settings.url, settings.token) as client:
            yield client
    except ForbiddenError as exc:
        _fail(
            f"{settings.url}: {exc}",
            hint="admin commands need an admin's token: `modelward login URL --token ADMIN_TOKEN`",
        )
    except UnauthorizedError as exc:
        _fail(f"{settings.url}: {exc}", hint="check the token: `modelward login URL --token T`")
    except (APIError, RegistryClientError) as exc:
        _fail(str(exc))


@contextlib.contextmanager
def _local_write(target: _Target) -> Iterator[Any]:
    """A write transaction straight on the database, audited as ``local-admin``."""
    db = _existing_database(target)
    try:
        with db.write() as session:
            yield session
    finally:
        db.dispose()
    typer.echo(
        f"(straight on the database {_shown(str(db.engine.url))}, audited as {LOCAL_ACTOR})",
        err=True,
    )


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


@principal_app.command("create")
def principal_create(
    name: Annotated[str, typer.Argument(help="principal name")],
    *,
    role: Annotated[str, typer.Option("--role", help="admin, publisher, reviewer or reader")],
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
    as_json: AsJson = False,
) -> None:
    """Create a principal (over the API as the logged-in admin, or with --data-dir /
    --database-url straight on the database)."""
    target = _Target(config, data_dir, database_url)
    if target.direct:
        from modelward.registry.domains._state import iso
        from modelward.registry.domains.principals.service import create_principal
        from modelward.registry.tuf.keys import ROW_KEY, tuf_keys

        # sealed when the registry's keys directory is at hand (docs/tuf.md#keys)
        seals = None
        if target.data_dir is not None or target.config is not None:
            settings = _settings(target.config, data_dir=target.data_dir, database_url=None)
            keys = tuf_keys(settings)
            seals = keys.row_seals() if keys.has(ROW_KEY) else None
        with _local_write(target) as session:
            p = create_principal(session, name=name, role=role, actor=LOCAL_ACTOR, seals=seals)
            created = {"name": p.name, "role": p.role, "created_at": iso(p.created_at)}
    else:
        with _admin_api() as client:
            created = client.create_principal(name, role)
    if as_json:
        _print_json(created)
    else:
        typer.echo(f"created principal {created['name']} ({created['role']})")


@principal_app.command("list")
def principal_list(
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
    as_json: AsJson = False,
) -> None:
    """List principals: name and role, one a line (tab-separated)."""
    target = _Target(config, data_dir, database_url)
    if target.direct:
        from modelward.registry.domains._state import iso
        from modelward.registry.domains.principals.service import list_principals

        db = _existing_database(target)
        try:
            with db.read() as session:
                rows = [
                    {"name": p.name, "role": p.role, "created_at": iso(p.created_at)}
                    for p in list_principals(session)
                ]
        finally:
            db.dispose()
    else:
        with _admin_api() as client:
            rows = list(client.list_principals())
    if as_json:
        _print_json({"principals": rows})
        return
    for p in rows:
        typer.echo(f"{p['name']}\t{p['role']}")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="principal name")],
    *,
    expires_in: Annotated[
        int | None, typer.Option("--expires-in", help="lifetime in seconds", min=1)
    ] = None,
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
    as_json: AsJson = False,
) -> None:
    """Create an API token; the token is printed once, as the last line."""
    target = _Target(config, data_dir, database_url)
    if target.direct:
        from modelward.registry.domains.principals.service import create_token

        with _local_write(target) as session:
            token_id, token = create_token(
                session, name=name, expires_in=expires_in, actor=LOCAL_ACTOR
            )
    else:
        with _admin_api() as client:
            answer = client.create_token(name, expires_in)
        token_id, token = str(answer["id"]), str(answer["token"])
    if as_json:
        _print_json({"principal": name, "id": token_id, "token": token})
        return
    typer.echo(f"token id: {token_id}")
    typer.echo(token)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="token id")],
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
) -> None:
    """Revoke an API token by id."""
    target = _Target(config, data_dir, database_url)
    if target.direct:
        from modelward.registry.domains.principals.service import revoke_token

        with _local_write(target) as session:
            revoke_token(session, token_id=token_id, actor=LOCAL_ACTOR)
    else:
        with _admin_api() as client:
            client.revoke_token(token_id)
    typer.echo(f"revoked token {token_id}")


def register_server(app: typer.Typer) -> None:
    """Add serve, db and admin to the root app."""
    app.command("serve")(serve)
    app.add_typer(db_app)
    app.add_typer(admin_app)
