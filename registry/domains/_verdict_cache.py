"""Bundle evidence the registry already paid for, kept per process (docs/registry.md).

A bundle is immutable, so what its files and attestations say (steps (3) and (4) of
attest.verifier: the content scan, every attestation verified, an OMS signature re-hashing
every file) is a function of the keys ``attest.verifier`` computes: ``scan_key`` (the
manifest digest, the scanner's limits) and, per attestation, ``attestation_key`` (its bytes,
the manifest digest, the trust set). ``VerdictCache`` is the ``EvidenceMemo`` the registry
hands the verifier:

- a bounded LRU (``max_entries``) in this process's memory, no table: a key is a hash of
  everything the evidence depends on, so a changed policy, a revoked or registered key, an
  attestation attached or retracted is a new key and never a stale hit; a trust set with an
  X.509 CA has no key (its validity depends on the clock) and is judged every time;
- one computation per key at a time: concurrent callers of the same key wait for the first;
- ``reads``: the memo for what a reader may ask (``alias set --dry-run``, ``GET .../gates``),
  whose misses take one of ``read_slots`` (default 1) slots, so readers together keep at most
  that many threads verifying; pushes and moves compute without waiting for a slot.

``stats`` counts hits and computations for ``/metrics`` (``modelward_bundle_evidence``);
docs/registry.md#verdict-cache says it for operators.

``DryRunAudit`` bounds the audit events dry runs add: a dry run the same principal already
ran with the same outcome within ``window`` seconds is not audited again, and a principal's
dry runs add at most ``per_minute`` events a minute; the rest are counted
(``modelward_dry_runs_unaudited``), not audited.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

_T = TypeVar("_T")

__all__ = ["DryRunAudit", "ReadMemo", "VerdictCache"]


@dataclass
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)


class VerdictCache:
    """``attest.verifier.EvidenceMemo`` over one process's memory (module doc)."""

    def __init__(self, max_entries: int = 256, read_slots: int = 1) -> None:
        if max_entries < 1 or read_slots < 1:
            raise ValueError("max_entries and read_slots must be at least 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, object] = OrderedDict()
        self._flights: dict[str, _Flight] = {}
        self._lock = threading.Lock()
        self._read_slots = threading.BoundedSemaphore(read_slots)
        self.stats = {"hit": 0, "computed": 0}
        self.reads = ReadMemo(self)

    def recall(self, key: str, compute: Callable[[], _T]) -> _T:
        """The result under ``key``, or ``compute()``'s, computed once however many ask."""
        return self._recall(key, compute, bounded=False)

    def _recall(self, key: str, compute: Callable[[], _T], *, bounded: bool) -> _T:
        while True:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    self.stats["hit"] += 1
                    return cast("_T", self._entries[key])
                flight = self._flights.get(key)
                if flight is None:
                    flight = self._flights[key] = _Flight()
                    break
            # another thread computes it: wait, then read it (or compute, if it failed)
            flight.done.wait()
        try:
            if bounded:
                with self._read_slots:
                    result = compute()
            else:
                result = compute()
            with self._lock:
                self.stats["computed"] += 1
                self._entries[key] = result
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
            return result
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()


@dataclass(frozen=True)
class ReadMemo:
    """The memo for readers' requests: a miss waits for a read slot (module doc)."""

    cache: VerdictCache

    def recall(self, key: str, compute: Callable[[], _T]) -> _T:
        return self.cache._recall(key, compute, bounded=True)


class DryRunAudit:
    """Whether a dry run is audited (module doc); per process, bounded memory."""

    def __init__(
        self,
        *,
        window: float = 600.0,
        per_minute: int = 30,
        max_remembered: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.per_minute = per_minute
        self.max_remembered = max_remembered
        self._clock = clock
        self._seen: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._minutes: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.unaudited = 0

    def admit(self, actor: str, *outcome: str) -> bool:
        """True: audit this dry run of ``actor`` with ``outcome`` (what it tried, what it
        found); False: it is counted only."""
        now = self._clock()
        key = (actor, *outcome)
        with self._lock:
            seen = self._seen.get(key)
            start, count = self._minutes.get(actor, (now, 0))
            if now - start >= 60:
                start, count = now, 0
            if (seen is not None and now - seen < self.window) or count >= self.per_minute:
                self.unaudited += 1
                return False
            self._seen[key] = now
            self._seen.move_to_end(key)
            self._minutes[actor] = (start, count + 1)
            self._minutes.move_to_end(actor)
            for remembered in (self._seen, self._minutes):
                while len(remembered) > self.max_remembered:
                    remembered.popitem(last=False)
            return True
