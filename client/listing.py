"""``RegistryClient`` methods for finding things: repositories, a repository's bundles and its
aliases, page by page (docs/http-api.md#listing).

Each ``list_*`` method is one request for one page: ``{<items>, next}``, where ``next`` is the
cursor of the following page (None on the last). Each ``iter_*`` method follows ``next`` and
yields the items one by one, holding one page in memory at a time. Raises what
``RegistryClient`` raises (``APIError`` subclasses, ``TransportError``); ``parse_repo``
raises ``InvalidReference`` for a malformed ``org/name`` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from modelward.client.config import parse_repo
from modelward.client.connection import Connection

__all__ = ["ListingMixin", "repo_path"]

JSON = dict[str, Any]


def repo_path(repo: str) -> str:
    org, name = parse_repo(repo).split("/")
    return f"/v1/repos/{quote(org, safe='')}/{quote(name, safe='')}"


def _params(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None and v is not False}


class ListingMixin(Connection):
    """Listing endpoints; ``RegistryClient`` is built on them."""

    def list_repos(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        org: str | None = None,
        publishable: bool = False,
    ) -> JSON:
        """GET /v1/repos -> {repositories: [{name, org, created_at, bundles, aliases,
        may_publish}], next}: by name; ``org`` keeps one org's, ``publishable`` those the
        caller may publish to."""
        params = _params(limit=limit, cursor=cursor, org=org, publishable=publishable)
        result: JSON = self._json("GET", "/v1/repos", params=params)
        return result

    def list_bundles(
        self, repo: str, *, limit: int | None = None, cursor: str | None = None
    ) -> JSON:
        """GET .../bundles -> {repository, bundles: [{digest, state, aliases, allowed,
        created_by, created_at, quarantined, quarantine_reason, tombstoned,
        tombstone_reason}], next}: newest first."""
        params = _params(limit=limit, cursor=cursor)
        result: JSON = self._json("GET", f"{repo_path(repo)}/bundles", params=params)
        return result

    def list_aliases(
        self, repo: str, *, limit: int | None = None, cursor: str | None = None
    ) -> JSON:
        """GET .../aliases -> {repository, aliases: [{alias, digest, version, updated_at,
        bundle_state}], next}: by name."""
        params = _params(limit=limit, cursor=cursor)
        result: JSON = self._json("GET", f"{repo_path(repo)}/aliases", params=params)
        return result

    def iter_repos(
        self, *, page: int = 100, org: str | None = None, publishable: bool = False
    ) -> Iterator[JSON]:
        """Every repository the caller may read (see ``list_repos``), page by page."""
        return _follow(
            lambda cursor: self.list_repos(
                limit=page, cursor=cursor, org=org, publishable=publishable
            ),
            "repositories",
        )

    def iter_bundles(self, repo: str, *, page: int = 100) -> Iterator[JSON]:
        """Every bundle of ``repo``, newest first, page by page."""
        return _follow(lambda cursor: self.list_bundles(repo, limit=page, cursor=cursor), "bundles")

    def iter_aliases(self, repo: str, *, page: int = 100) -> Iterator[JSON]:
        """Every alias of ``repo``, by name, page by page."""
        return _follow(lambda cursor: self.list_aliases(repo, limit=page, cursor=cursor), "aliases")


def _follow(fetch: Callable[[str | None], JSON], key: str) -> Iterator[JSON]:
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        answer = fetch(cursor)
        yield from answer.get(key) or []
        cursor = answer.get("next")
        if not isinstance(cursor, str) or cursor in seen:  # the end, or a registry looping
            return
        seen.add(cursor)
