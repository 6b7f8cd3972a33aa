"""The one UTC timestamp column type: every datetime the database hands back is aware UTC.

SQLite stores no zone and returns naive datetimes; PostgreSQL's ``timestamptz`` returns
aware ones. ``UtcDateTime`` is ``DateTime(timezone=True)`` on both (the same DDL, so no
migration), with a naive value read as UTC and an aware one written as UTC, so code compares
rows with ``datetime.now(UTC)`` without converting them first.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = ["UtcDateTime"]


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that answers aware UTC datetimes (module doc)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value  # naive: UTC already (the house's convention)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
