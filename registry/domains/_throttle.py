"""Bound the audit writes anonymous callers can cause (docs/registry.md#audit-log).

Every refused request is audited, and each audit event is a serialized write to the hash
chain, so a stream of requests with no or a wrong token could grow the log and starve
writers. ``DenialThrottle`` admits at most ``per_minute`` unauthenticated (401) denials per
client address in each fixed one-minute window. The first one past the limit is audited
once as ``denied.throttled`` (the address and the limit); the rest of that window is only
counted, and the next admitted denial from the address carries ``throttled_before``: how
many went unaudited. Authenticated callers' denials are always audited: they are
accountable and revocable.

State is per server process and bounded: at most ``max_clients`` addresses are tracked;
when full, addresses whose window has ended are dropped, and if none has, new addresses
share one overflow bucket.

The address is the connection's peer (``client_address``). ``X-Forwarded-For`` is believed
only when the peer is one of the configured ``trusted_proxies`` (none by default), read from
the right: hops that are trusted proxies are skipped and the first one that is not is the
client, so a client cannot choose its own key by sending the header itself, directly or
through a proxy that appends to it. An IPv6 client is counted by its /64 (``throttle_key``),
the block one host is usually given.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["DenialThrottle", "Verdict", "client_address", "throttle_key"]

WINDOW_SECONDS = 60.0
OVERFLOW = "(overflow)"

Verdict = Literal["audit", "announce", "skip"]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_FORWARDED_HOPS = 32  # X-Forwarded-For entries read, from the right
IPV6_CLIENT_PREFIX = 64


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(
    peer: str | None, forwarded_for: Sequence[str], trusted_proxies: Sequence[Network]
) -> str:
    """The client's address: ``peer`` (the TCP peer), or — only when ``peer`` is in
    ``trusted_proxies`` — the rightmost ``X-Forwarded-For`` hop (``forwarded_for``: every
    header value, in order) that is not a trusted proxy. A hop that is not an address ends
    the walk at the last address read (nothing left of garbage is believed)."""
    if peer is None:
        return "unknown"
    current = _ip(peer)
    if current is None:
        return peer

    def trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(address in network for network in trusted_proxies)

    if not trusted(current):
        return str(current)
    hops = [hop for value in forwarded_for for hop in value.split(",")][-MAX_FORWARDED_HOPS:]
    for hop in reversed(hops):
        address = _ip(hop)
        if address is None:
            break
        current = address
        if not trusted(current):
            break
    return str(current)


def throttle_key(address: str) -> str:
    """What the throttle counts ``address`` under: itself, or its /64 for IPv6."""
    ip = _ip(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        network = ipaddress.IPv6Network((ip, IPV6_CLIENT_PREFIX), strict=False)
        return str(network)
    return address


@dataclass
class _Window:
    start: float
    admitted: int = 0
    skipped: int = 0  # unaudited in this window, the announcement included
    carried: int = 0  # unaudited in earlier windows, not yet reported


class DenialThrottle:
    """Decide, per client address, whether an unauthenticated denial is audited."""

    def __init__(
        self,
        per_minute: int,
        *,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_minute < 1:
            raise ValueError("per_minute must be at least 1")
        self.per_minute = per_minute
        self.max_clients = max_clients
        self._clock = clock
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> tuple[Verdict, int]:
        """``("audit", n)``: audit it, noting ``n`` earlier unaudited denials (0: none);
        ``("announce", 0)``: audit one ``denied.throttled`` event instead;
        ``("skip", 0)``: count it only."""
        now = self._clock()
        with self._lock:
            window = self._window(client, now)
            if now - window.start >= WINDOW_SECONDS:
                window.carried += window.skipped
                window.start, window.admitted, window.skipped = now, 0, 0
            if window.admitted < self.per_minute:
                window.admitted += 1
                carried, window.carried = window.carried, 0
                return "audit", carried
            window.skipped += 1
            return ("announce", 0) if window.skipped == 1 else ("skip", 0)

    def _window(self, client: str, now: float) -> _Window:
        window = self._windows.get(client)
        if window is not None:
            return window
        if len(self._windows) >= self.max_clients:
            for key in [
                k
                for k, w in self._windows.items()
                if now - w.start >= WINDOW_SECONDS and not w.carried
            ]:
                del self._windows[key]
        if len(self._windows) >= self.max_clients:
            client = OVERFLOW
            window = self._windows.get(client)
            if window is not None:
                return window
        window = self._windows[client] = _Window(start=now)
        return window
