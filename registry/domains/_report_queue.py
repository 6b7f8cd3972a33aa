"""Group commit for fleet reports (issue 40): what the app state keeps for ``reports``.

A fleet of thousands reports every few seconds; one write transaction per report costs a
``BEGIN IMMEDIATE`` (SQLite) or the advisory lock (PostgreSQL), a commit and a query per
check. ``ReportIngest.submit`` queues a report and writes it with the others that arrive
while the previous batch is being written:

- a report that finds no batch being written is written at once, alone (no timer, no added
  wait); under load up to ``max_batch`` share one write transaction, in arrival order;
- each request is answered after its batch committed: nothing is acknowledged unwritten;
- one batch at a time per process; several processes' batches are serialized by the write
  lock, so the checks inside one (the per-key sequence above all) read what every earlier
  batch kept.

It also owns the ingest's per-process caches (``signed``: the alias's signed state by the
versions it was verified at; ``public_keys``: parsed worker keys by their PEM), so they live
and die with the app state. Nothing here judges a report: ``rollouts.reports`` does
(beside ``_verdict_cache`` and ``_token_cache``, so the app state imports no domain).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from starlette.concurrency import run_in_threadpool

__all__ = ["LruCache", "ReportIngest"]

_K = TypeVar("_K")
_V = TypeVar("_V")
_Item = TypeVar("_Item")


class LruCache(Generic[_K, _V]):
    """A bounded, thread-safe LRU map (``max_entries``); a miss returns None."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"LruCache: max_entries must be at least 1, not {max_entries}")
        self._max = max_entries
        self._data: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K) -> _V | None:
        with self._lock:
            if key not in self._data:
                return None
            self._data.move_to_end(key)
            return self._data[key]

    def put(self, key: _K, value: _V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)


@dataclass
class ReportIngest:
    """The report queue of one process and the ingest's caches (see the module)."""

    max_batch: int = 256
    signed: LruCache[Any, Any] = field(default_factory=lambda: LruCache(256))
    public_keys: LruCache[str, Any] = field(default_factory=lambda: LruCache(100_000))
    _pending: list[tuple[Any, asyncio.Future[Any]]] = field(default_factory=list)
    _writer: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"ReportIngest: max_batch must be at least 1, not {self.max_batch}")

    async def submit(
        self, item: _Item, write: Callable[[Sequence[_Item]], Sequence[object]]
    ) -> object:
        """``item``'s outcome once the batch it joined is written: ``write`` (run in a
        worker thread) takes the batch in arrival order and returns one outcome per item.
        An exception ``write`` raises is every item's of that batch."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(write))
        return await future

    async def _drain(self, write: Callable[[Sequence[Any]], Sequence[object]]) -> None:
        while self._pending:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
            try:
                outcomes = await run_in_threadpool(write, [item for item, _ in batch])
                answered = list(zip(batch, outcomes, strict=True))
            except Exception as exc:  # noqa: BLE001 - handed to each waiting request
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), outcome in answered:
                if not future.done():  # a request cancelled (client gone) is written anyway
                    future.set_result(outcome)
