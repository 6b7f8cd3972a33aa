"""The one lookup of a principal by name, for every domain (``NotFound`` names it)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.registry.errors import NotFound
from modelward.registry.models import Principal

__all__ = ["find_principal", "principal_named"]


def find_principal(session: Session, name: str) -> Principal | None:
    """The principal row named ``name``, or None."""
    return session.execute(select(Principal).where(Principal.name == name)).scalar_one_or_none()


def principal_named(session: Session, name: str) -> Principal:
    """The principal row named ``name``; raises ``NotFound`` naming it."""
    row = find_principal(session, name)
    if row is None:
        raise NotFound(f"no principal named {name!r}", detail={"principal": name})
    return row
