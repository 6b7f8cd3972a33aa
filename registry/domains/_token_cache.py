"""Bearer tokens that authenticated a moment ago, per server process (the ``/tuf/`` reads).

Keyed by the token's sha256: the token itself is never kept. An entry lives ``ttl`` seconds
(``MODELWARD_TUF_TOKEN_CACHE_SECONDS``) from the check that made it and never past the
token's own expiry, so a revoked token keeps reading for at most ``ttl`` seconds and an
expired one not at all. Failures are never remembered: an unknown or revoked token goes to
the database every time, and its entry, if any, is dropped (docs/tuf.md#serving).

``lookup`` also says, to one caller once three quarters of an entry's time have passed, to
check the token again now (``renew``): a busy token is re-checked before its entry ends, by
one request, instead of by every request that arrives while the database answers.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Generic, TypeVar

__all__ = ["TokenCache"]

T = TypeVar("T")


class TokenCache(Generic[T]):
    """Who a token stood for (``T``), remembered for ``ttl`` seconds; ``ttl`` 0: never."""

    def __init__(
        self,
        ttl: float,
        *,
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        # who, valid until, the token's expiry, when one caller should check it again
        self._entries: OrderedDict[str, tuple[T, float, datetime | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> T | None:
        """Who ``token`` authenticated as within ``ttl`` seconds, else None (look it up)."""
        return self.lookup(token, renew=False)[0]

    def lookup(self, token: str, *, renew: bool = True) -> tuple[T | None, bool]:
        """(who, renew_now): who ``token`` authenticated as within ``ttl`` seconds, else
        None (look it up); ``renew_now`` is True for the one caller that should check the
        token again now (past three quarters of the entry's time; ``put`` ends it)."""
        if self.ttl <= 0:
            return None, False
        key = self.key(token)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None, False
            who, until, expires_at, renew_at = entry
            now = self.clock()
            if now >= until or (expires_at is not None and expires_at <= datetime.now(UTC)):
                del self._entries[key]
                return None, False
            if renew and now >= renew_at:
                self._entries[key] = (who, until, expires_at, float("inf"))
                return who, True
            return who, False

    def put(self, token: str, who: T, expires_at: datetime | None) -> None:
        """Remember that ``token`` authenticated as ``who`` just now (the oldest entry goes
        past ``max_entries``)."""
        if self.ttl <= 0:
            return
        key = self.key(token)
        with self._lock:
            now = self.clock()
            self._entries[key] = (who, now + self.ttl, expires_at, now + self.ttl * 0.75)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def forget(self, token: str) -> None:
        """Drop ``token``'s entry (it failed to authenticate)."""
        with self._lock:
            self._entries.pop(self.key(token), None)
