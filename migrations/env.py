"""Alembic environment: the URL comes from registry.db.alembic_config (attributes).

On SQLite, foreign keys are not enforced while migrations run: batch mode rebuilds a table
(copy, drop, rename), and dropping a table other tables reference fails, or leaves a
violation counted until commit, when SQLite enforces them (alembic's batch documentation).
The pragma only takes effect outside a transaction, so it is set before the migrations'
transaction begins; ``PRAGMA foreign_key_check`` then runs before commit, and any row whose
reference the migrations broke fails the migration.
"""

from __future__ import annotations

from alembic import context

from modelward.registry.db import make_engine
from modelward.registry.domains.signing.tuf import tables  # noqa: F401 - the TUF tables on Base
from modelward.registry.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.attributes["database_url"]
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            sqlite = connection.dialect.name == "sqlite"
            if sqlite:  # before BEGIN: the pragma is a no-op inside a transaction
                connection.connection.driver_connection.execute(  # type: ignore[union-attr]
                    "PRAGMA foreign_keys=OFF"
                )
            context.configure(connection=connection, target_metadata=target_metadata)
            with context.begin_transaction():
                context.run_migrations()
                if sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise RuntimeError(f"migration broke foreign keys: {broken[:5]}")
            connection.commit()
    finally:
        engine.dispose()


run_migrations_online()
