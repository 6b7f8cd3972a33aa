"""Alembic environment: the URL comes from registry.db.alembic_config (attributes)."""

from __future__ import annotations

from alembic import context

from modelward.registry.db import make_engine
from modelward.registry.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.attributes["database_url"]
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=target_metadata)
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
    finally:
        engine.dispose()


run_migrations_online()
