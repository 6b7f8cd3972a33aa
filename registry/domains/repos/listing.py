"""Listing repositories, with the paging every listing shares (docs/http-api.md#listing).

Authorization is in the query: ``readable_repos`` is the one place that says which
repositories a caller may see, and every listing (repositories here, a repository's bundles
in ``bundles.service``, its aliases in ``aliases.service``) starts from it, so a row the caller
may not read never comes back. Who reads what is ``auth.authz``'s ``READ`` (public
repositories: everybody; private ones: docs/registry.md#private-repositories); whether
the caller may *publish* to each one is computed in the same query (``may_publish``) and
can filter it (``publishable``).

Pages are keyset pages: ``limit`` rows (1 … ``MAX_PAGE``) after an opaque ``cursor``; the
answer's ``next`` is the cursor of the following page, null on the last one. A cursor names
its listing, so one listing's cursor is refused by another (400 ``invalid_cursor``).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import Session

from modelward.registry.domains._state import iso
from modelward.registry.domains.auth.authz import Action, may_clause
from modelward.registry.domains.auth.service import Caller
from modelward.registry.errors import BadRequest, NotFound
from modelward.registry.models import Alias, Bundle, Repository

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "InvalidCursor",
    "Page",
    "check_limit",
    "decode_cursor",
    "encode_cursor",
    "list_repos",
    "may_publish_clause",
    "readable_repo",
    "readable_repos",
]

DEFAULT_PAGE = 100
MAX_PAGE = 1000
MAX_CURSOR_CHARS = 400
_KEY_RE = re.compile(r"[A-Za-z0-9._/@-]{1,300}")
_ORG_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")


class InvalidCursor(BadRequest):
    """400: a ``cursor`` that no page of this listing handed out."""

    code = "invalid_cursor"


@dataclass(frozen=True)
class Page:
    """One page of a listing: its rows (JSON) and the cursor of the next page (or None)."""

    items: list[dict[str, Any]]
    next: str | None


def encode_cursor(listing: str, key: str) -> str:
    """The opaque cursor that resumes ``listing`` after the row keyed ``key``."""
    return base64.urlsafe_b64encode(f"{listing}:{key}".encode()).decode().rstrip("=")


def decode_cursor(listing: str, cursor: str) -> str:
    """The key a cursor of ``listing`` resumes after; ``InvalidCursor`` for anything else."""
    problem = f"invalid cursor for the {listing} listing: pass the `next` of its previous page"
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidCursor(problem)
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidCursor(problem) from exc
    kind, sep, key = text.partition(":")
    if kind != listing or not sep or not _KEY_RE.fullmatch(key):
        raise InvalidCursor(problem)
    return key


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:  # the endpoints bound it too (422); callers in code here
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}")
    return limit


def readable_repos(caller: Caller) -> Select[Repository]:
    """The repositories ``caller`` may read (``auth.authz`` ``READ``, in the query). The one
    place that applies it; listings and single lookups start from here."""
    return select(Repository).where(may_clause(caller, Action.READ))


def readable_repo(session: Session, name: str, caller: Caller) -> Repository:
    """The repository ``name`` if ``caller`` may read it; NotFound otherwise.

    One query whether the repository is missing or unreadable, and the same NotFound (same
    message, code and status) for both: to a caller without read a private repository is
    indistinguishable from a missing one."""
    repo = session.scalars(readable_repos(caller).where(Repository.name == name)).one_or_none()
    if repo is None:
        raise NotFound(f"no repository {name}")
    return repo


def may_publish_clause(caller: Caller) -> ColumnElement[bool]:
    """True for the repositories ``caller`` may push to and move aliases in as a publisher:
    ``auth.authz.may_clause(caller, PUBLISH)``, the one rule."""
    return may_clause(caller, Action.PUBLISH)


def list_repos(
    session: Session,
    caller: Caller,
    *,
    limit: int,
    cursor: str | None = None,
    org: str | None = None,
    publishable: bool = False,
) -> Page:
    """Repositories by name: ``{name, org, created_at, bundles (not deleted), aliases,
    may_publish}``; only ``org``'s with ``org``, only those the caller may publish to with
    ``publishable``. Raises BadRequest (org name, limit), InvalidCursor."""
    check_limit(limit)
    writable = may_publish_clause(caller)
    bundles = (
        select(func.count(Bundle.id))
        .where(Bundle.repo_id == Repository.id, Bundle.tombstoned.is_(False))
        .correlate(Repository)
        .scalar_subquery()
    )
    aliases = (
        select(func.count(Alias.id))
        .where(Alias.repo_id == Repository.id)
        .correlate(Repository)
        .scalar_subquery()
    )
    query = (
        readable_repos(caller)
        .add_columns(bundles, aliases, writable.label("may_publish"))
        .order_by(Repository.name)
        .limit(limit + 1)
    )
    if org is not None:
        if not _ORG_RE.fullmatch(org):
            raise BadRequest(f"invalid org name {org!r}: lowercase letters, digits, . _ -")
        query = query.where(Repository.name.startswith(f"{org}/", autoescape=True))
    if publishable:
        query = query.where(writable)
    if cursor is not None:
        query = query.where(Repository.name > decode_cursor("repositories", cursor))
    rows = session.execute(query).all()
    items = [
        {
            "name": repo.name,
            "org": repo.name.split("/", 1)[0],
            "created_at": iso(repo.created_at),
            "bundles": int(n_bundles),
            "aliases": int(n_aliases),
            "may_publish": bool(writable_value),
        }
        for repo, n_bundles, n_aliases, writable_value in rows[:limit]
    ]
    more = len(rows) > limit
    return Page(items, encode_cursor("repositories", str(items[-1]["name"])) if more else None)
