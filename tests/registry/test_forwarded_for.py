"""Whose address the anonymous-denial throttle counts (docs/registry.md#audit-log):
``X-Forwarded-For`` is believed only from a configured trusted proxy.

One server trusts the proxy 127.0.0.2 (``MODELWARD_TRUSTED_PROXIES``) and audits 3
unauthenticated denials per address and minute. Clients connect from 127.0.0.1 (an untrusted
peer) or from 127.0.0.2 (the proxy), both on loopback."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from modelward.registry.domains._throttle import client_address, throttle_key
from tests.registry.test_registry_attacks import Reg, open_registry

PROXY = "127.0.0.2"
LIMIT = 3


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    settings = {
        "MODELWARD_AUDIT_UNAUTHENTICATED_PER_MINUTE": str(LIMIT),
        "MODELWARD_TRUSTED_PROXIES": f"{PROXY}, 10.0.0.0/8",
    }
    with open_registry(tmp_path_factory.mktemp("forwarded"), settings) as registry:
        yield registry


def _anonymous(reg: Reg, source: str, forwarded: list[str]) -> None:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=reg.url, transport=transport, timeout=30) as client:
        for value in forwarded:
            answer = client.get(
                "/v1/repos/acme/a",
                headers={"Authorization": "Bearer mwt_wrong_token", "X-Forwarded-For": value},
            )
            assert answer.status_code == 401


def _anonymous_events(reg: Reg, since: int) -> list[dict[str, Any]]:
    return [e for e in reg.audit() if e["seq"] > since and e["actor"] == "anonymous"]


def test_forwarded_for_from_an_untrusted_peer_is_ignored(reg: Reg) -> None:
    """A client that sends its own X-Forwarded-For, a new address each time, is still
    counted as itself: 3 denials audited, then one announcement, then silence."""
    since = reg.last_seq()
    _anonymous(reg, "127.0.0.1", [f"203.0.113.{i}" for i in range(12)])
    events = _anonymous_events(reg, since)
    assert [e["action"] for e in events] == ["denied"] * LIMIT + ["denied.throttled"]
    assert events[-1]["subject"] == "127.0.0.1"
    assert "203.0.113" not in str(events)


def test_forwarded_for_from_a_trusted_proxy_is_honoured(reg: Reg) -> None:
    """Through the proxy each client is counted by the address the proxy appended, the
    rightmost hop that is not a trusted proxy; a client prepending addresses gains nothing."""
    since = reg.last_seq()
    _anonymous(reg, PROXY, ["198.51.100.7"] * 5)
    # the proxy appends the real peer after whatever the client sent; 10.1.2.3 is trusted
    _anonymous(reg, PROXY, [f"6.6.6.{i}, 198.51.100.8, 10.1.2.3" for i in range(5)])
    _anonymous(reg, PROXY, ["198.51.100.9"])
    events = _anonymous_events(reg, since)
    throttled = [e["subject"] for e in events if e["action"] == "denied.throttled"]
    assert throttled == ["198.51.100.7", "198.51.100.8"]
    assert len([e for e in events if e["action"] == "denied"]) == 2 * LIMIT + 1
    assert "6.6.6" not in str(events)


NETS = [ipaddress.ip_network(n) for n in ("127.0.0.2", "10.0.0.0/8", "fd00::/8")]


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("127.0.0.1", ["1.2.3.4"], "127.0.0.1"),  # untrusted peer: its header is ignored
        ("127.0.0.2", ["1.2.3.4"], "1.2.3.4"),
        ("127.0.0.2", ["1.2.3.4", "5.6.7.8"], "5.6.7.8"),  # several headers: one list, in order
        ("127.0.0.2", ["1.2.3.4, 10.0.0.9, 10.0.0.8"], "1.2.3.4"),  # proxies are skipped
        ("127.0.0.2", ["1.2.3.4, garbage, 10.0.0.8"], "10.0.0.8"),  # nothing left of garbage
        ("127.0.0.2", [" 2001:db8::1 "], "2001:db8::1"),
        ("127.0.0.2", [], "127.0.0.2"),
        ("127.0.0.2", ["10.0.0.1"], "10.0.0.1"),  # all trusted: the leftmost
        (None, ["1.2.3.4"], "unknown"),
    ],
)
def test_client_address(peer: str | None, forwarded: list[str], expected: str) -> None:
    assert client_address(peer, forwarded, NETS) == expected


def test_ipv6_clients_are_counted_by_their_64() -> None:
    assert throttle_key("2001:db8:1:2:aaaa::1") == throttle_key("2001:db8:1:2:bbbb::9")
    assert throttle_key("2001:db8:1:3::1") != throttle_key("2001:db8:1:2::1")
    assert throttle_key("192.0.2.1") == "192.0.2.1"
