"""Engine, sessions and schema state. Nothing is created at import time.

Writes are serialized so the audit chain stays gapless under concurrency: on SQLite every write
transaction starts with ``BEGIN IMMEDIATE`` (one writer at a time); on PostgreSQL it first takes
a transaction-scoped advisory lock. Reads use plain transactions and never block writers.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

from modelward.registry.errors import ConfigurationError, DatabaseOutOfDate

__all__ = [
    "Database",
    "SchemaState",
    "alembic_config",
    "current_revision",
    "describe_revision",
    "downgrade",
    "ensure_schema",
    "head_revision",
    "make_engine",
    "masked_url",
    "schema_state",
    "upgrade",
]

WRITE_LOCK_KEY = 0x6D77_6172  # "mwar": the advisory lock every PostgreSQL write takes
MIGRATE_LOCK_KEY = 0x6D77_6D67  # "mwmg": held while a process checks or migrates the schema
SchemaState = Literal["empty", "current", "outdated"]
EXPECTED_URL = "expected sqlite:///PATH or postgresql://USER@HOST:PORT/DB"


def make_engine(url: str, *, pool_size: int = 8, max_overflow: int = 8) -> Engine:
    """An engine for ``url`` (SQLite file, or PostgreSQL via psycopg 3).

    On PostgreSQL each process keeps up to ``pool_size + max_overflow`` connections
    (docs/registry.md#running-several-workers).
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        # its message would echo the whole value, password included: name it masked
        raise ConfigurationError(
            f"invalid database URL {masked_url(url)}: {EXPECTED_URL}"
        ) from None
    if parsed.get_backend_name() not in {"sqlite", "postgresql"}:
        raise ConfigurationError(f"unsupported database URL {masked_url(url)}: {EXPECTED_URL}")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            parsed, connect_args={"check_same_thread": False, "timeout": 60}, pool_pre_ping=True
        )
        _sqlite_setup(engine)
        return engine
    # pool_pre_ping costs one round trip per checkout; measured, it made no difference to
    # alias resolves (docs/performance.md#registry), and it keeps a database restart from
    # surfacing as failed requests.
    return create_engine(parsed, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow)


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get("registry_write"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


class Database:
    """The app's handle on the database: ``read()`` and ``write()`` units of work."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        # PostgreSQL reads run in autocommit: under READ COMMITTED every statement takes its
        # own snapshot inside a transaction as well, so BEGIN and COMMIT would only add two
        # round trips per request. Read units of work never write.
        read_engine = (
            engine.execution_options(isolation_level="AUTOCOMMIT") if self.is_postgres else engine
        )
        self._read = sessionmaker(read_engine, expire_on_commit=False)
        self._write = sessionmaker(
            engine.execution_options(registry_write=True), expire_on_commit=False
        )

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session, session.begin():
            yield session

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """A serialized write transaction: commits on success, rolls back on any exception."""
        with self._write() as session, session.begin():
            if self.is_postgres:
                session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": WRITE_LOCK_KEY})
            yield session

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()


def alembic_config(url: str) -> Config:
    """A programmatic Alembic config over migrations/ (no alembic.ini needed).

    The scripts are found as package data, not imported: Alembic runs ``env.py``, which imports
    this module, so an import here would be a circle."""
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("modelward") / "migrations"))
    cfg.attributes["database_url"] = url
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:
        raise ConfigurationError("migrations/ has no revisions")
    return head


def describe_revision(revision: str | None) -> str:
    """``revision`` as a command names it: its id and the title of its migration
    (``0014_rollouts (Rollouts)``); ``base (empty: no schema)`` for None."""
    if revision is None:
        return "base (empty: no schema)"
    try:
        found = ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(revision)
    except CommandError:  # a revision this modelward does not know: named as it is
        return revision
    doc = (found.module.__doc__ or "") if found is not None else ""
    title = re.split(r"[:.,]", " ".join(doc.split()), maxsplit=1)[0].strip()
    return f"{revision} ({title})" if title else revision


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def schema_state(engine: Engine) -> SchemaState:
    """``empty`` (no tables), ``current`` (at head) or ``outdated``."""
    names = set(inspect(engine).get_table_names()) - {"alembic_version"}
    revision = current_revision(engine)
    if not names and revision is None:
        return "empty"
    return "current" if revision == head_revision() else "outdated"


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "-1") -> None:
    command.downgrade(alembic_config(url), revision)


def ensure_schema(engine: Engine, url: str) -> bool:
    """Migrate an empty database; refuse an out-of-date one. Returns True if it migrated.

    On PostgreSQL a session advisory lock makes processes starting together migrate once.
    """
    if engine.dialect.name != "postgresql":
        return _ensure_schema(engine, url)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATE_LOCK_KEY})
        conn.commit()
        try:
            return _ensure_schema(engine, url)
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATE_LOCK_KEY})
            conn.commit()


def _ensure_schema(engine: Engine, url: str) -> bool:
    state = schema_state(engine)
    if state == "empty":
        upgrade(url)
        return True
    if state == "outdated":
        have = current_revision(engine)
        raise DatabaseOutOfDate(
            f"database schema is at revision {have}, this modelward needs {head_revision()}: "
            f"run `modelward db upgrade --database-url {masked_url(url)}` first"
        )
    return False


def masked_url(url: str) -> str:
    """``url`` as every command and log line shows a database URL: its password masked
    (``***``); a value that does not parse as a URL is shown as its scheme only, since its
    password could not be found to mask."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):  # unparsable: show none of it
        scheme = url.split("://", 1)[0] if "://" in url else ""
        return f"{scheme}://(unparsable URL)" if scheme.isidentifier() else "(unparsable URL)"
