"""``modelward admin principal ...`` and ``modelward admin token ...``.

The admin commands work over the API with the logged-in token, which must be an admin's, and
are audited under that admin's name. Only with an explicit ``--database-url`` / ``--data-dir``
/ ``--config`` do they work straight on that database instead (bootstrap, recovery), audited as
``local-admin``; that database must exist with the current schema, and nothing is created
when it does not.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.local_database import LOCAL_ACTOR
from modelward.cli.local_database import database_url as _db_url
from modelward.cli.local_database import fail as _fail
from modelward.cli.local_database import missing_sqlite_file as _missing_sqlite_file
from modelward.cli.local_database import settings as _settings

__all__ = ["principal_app", "token_app"]

principal_app = typer.Typer(name="principal", help="Principals.", no_args_is_help=True)
token_app = typer.Typer(name="token", help="API tokens.", no_args_is_help=True)

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
        from modelward.cli.common import fail_with

        fail_with(exc)


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


def _known_role(value: str) -> str:
    """A role the registry knows (``authz.ROLES``), else a usage error (exit 2) naming it."""
    from modelward.registry.domains.auth.authz import ROLES

    if value not in ROLES:
        raise typer.BadParameter(f"unknown role {value!r}; roles are {', '.join(ROLES)}")
    return value


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


@principal_app.command("create")
def principal_create(
    name: Annotated[str, typer.Argument(help="principal name")],
    *,
    role: Annotated[
        str,
        typer.Option("--role", help="admin, publisher, reviewer or reader", callback=_known_role),
    ],
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
        from modelward.registry.domains.signing.tuf.keys import ROW_KEY, tuf_keys

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
        from modelward.registry.domains.principals.service import list_principals, principal_json

        db = _existing_database(target)
        try:
            with db.read() as session:
                rows = [principal_json(p) for p in list_principals(session)]
        finally:
            db.dispose()
    else:
        with _admin_api() as client:
            rows = list(client.list_principals())
    if as_json:
        _print_json({"principals": rows})
        return
    for p in rows:
        typer.echo(f"{p['name']}\t{p['role']}" + ("\tdisabled" if p.get("disabled") else ""))


def _principal_line(p: dict[str, Any]) -> str:
    state = f"disabled since {p.get('disabled_at')}" if p.get("disabled") else "enabled"
    return f"{p['name']} ({p['role']}, {state})"


def _change_principal(
    target: _Target,
    name: str,
    *,
    disabled: bool | None = None,
    role: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Disable/enable ``name`` or set its role, over the API (a role change and a disable
    first previewed by the registry's impact check, refused without ``force`` when they
    would leave signed targets short: docs/operations.md#changing-who-may-sign) or straight
    on the database (recovery: no TUF state is re-made or checked there)."""
    if target.direct:
        from modelward.registry.domains.principals import service

        seals = None
        if target.data_dir is not None or target.config is not None:
            from modelward.registry.domains.signing.tuf.keys import ROW_KEY, tuf_keys

            keys = tuf_keys(_settings(target.config, data_dir=target.data_dir, database_url=None))
            seals = keys.row_seals() if keys.has(ROW_KEY) else None
        with _local_write(target) as session:
            if role is not None:
                row = service.set_role(
                    session, name=name, role=role, actor=LOCAL_ACTOR, seals=seals
                )
            else:
                row = service.set_disabled(
                    session, name=name, disabled=bool(disabled), actor=LOCAL_ACTOR, seals=seals
                )
            return service.principal_json(row)
    from modelward.cli.registry_keys import who_may_sign_previewed

    with _admin_api() as client:
        if role is not None:
            who_may_sign_previewed(
                client,
                "set_role",
                {"principal": name, "role": role},
                force=force,
                what=f"the role of {name} was not changed",
            )
            return dict(client.set_principal_role(name, role, force=force))
        if disabled:
            who_may_sign_previewed(
                client,
                "disable_principal",
                {"principal": name},
                force=force,
                what=f"{name} was not disabled",
            )
        return dict(client.set_principal_disabled(name, bool(disabled), force=force))


ForceOption = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Do it even when it leaves signed aliases, rollout plans or the quarantine short "
        "of their threshold (workers then refuse them until they are signed again; audited)",
    ),
]


@principal_app.command("disable")
def principal_disable(
    name: Annotated[str, typer.Argument(help="principal name")],
    *,
    force: ForceOption = False,
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
    as_json: AsJson = False,
) -> None:
    """Disable a principal: every token, /v2 bearer and console session it holds is
    refused from its next request on, and its keys stop counting in every delegation.
    First shows what that would leave short of its threshold; with any, nothing is
    disabled without --force."""
    target = _Target(config, data_dir, database_url)
    p = _change_principal(target, name, disabled=True, force=force)
    if as_json:
        _print_json(p)
    else:
        typer.echo(f"disabled principal {_principal_line(p)}: its tokens are refused")


@principal_app.command("enable")
def principal_enable(
    name: Annotated[str, typer.Argument(help="principal name")],
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
    as_json: AsJson = False,
) -> None:
    """Enable a disabled principal again: its unrevoked, unexpired tokens work again."""
    p = _change_principal(_Target(config, data_dir, database_url), name, disabled=False)
    if as_json:
        _print_json(p)
    else:
        typer.echo(f"enabled principal {_principal_line(p)}")


@principal_app.command("set-role")
def principal_set_role(
    name: Annotated[str, typer.Argument(help="principal name")],
    role: Annotated[
        str,
        typer.Argument(
            metavar="ROLE", help="admin, publisher, reviewer or reader", callback=_known_role
        ),
    ],
    *,
    force: ForceOption = False,
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
    as_json: AsJson = False,
) -> None:
    """Change a principal's role (the TUF delegations follow its keys). First shows what
    that would leave short of its threshold; with any, nothing is changed without --force."""
    p = _change_principal(_Target(config, data_dir, database_url), name, role=role, force=force)
    if as_json:
        _print_json(p)
    else:
        typer.echo(f"principal {_principal_line(p)}")


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


@token_app.command("list")
def token_list(
    principal: Annotated[
        str | None, typer.Option("--principal", metavar="NAME", help="Only this principal's")
    ] = None,
    database_url: AdminDbUrl = None,
    data_dir: AdminDataDir = None,
    config: AdminConfig = None,
    as_json: AsJson = False,
) -> None:
    """List API tokens: id, principal, created, expires, revoked (never a secret)."""
    target = _Target(config, data_dir, database_url)
    if target.direct:
        from modelward.registry.domains.principals.service import list_tokens

        db = _existing_database(target)
        try:
            with db.read() as session:
                rows = list_tokens(session, principal=principal)
        finally:
            db.dispose()
    else:
        with _admin_api() as client:
            rows = list(client.list_tokens(principal))
    if as_json:
        _print_json({"tokens": rows})
        return
    typer.echo("id\tprincipal\tcreated\texpires\trevoked")
    for t in rows:
        cells = (t["id"], t["principal"], t["created_at"], t["expires_at"], t["revoked_at"])
        typer.echo("\t".join(str(c) if c is not None else "-" for c in cells))


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
