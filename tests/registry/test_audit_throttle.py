"""Unauthenticated denials cannot flood the audit log: the throttle's rules with a stepped
clock, then a real ``modelward serve`` with a limit of 3 a minute."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from modelward.registry.domains._throttle import WINDOW_SECONDS, DenialThrottle
from tests.registry.test_registry_attacks import Reg, open_registry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limit_then_one_announcement_then_counted_and_reported_later() -> None:
    clock = Clock()
    throttle = DenialThrottle(2, clock=clock)
    verdicts = [throttle.check("10.0.0.1") for _ in range(5)]
    assert verdicts == [("audit", 0), ("audit", 0), ("announce", 0), ("skip", 0), ("skip", 0)]
    assert throttle.check("10.0.0.2") == ("audit", 0)  # addresses are counted apart
    clock.now += WINDOW_SECONDS
    # the next window: the three unaudited denials (announcement included) are reported once
    assert throttle.check("10.0.0.1") == ("audit", 3)
    assert throttle.check("10.0.0.1") == ("audit", 0)
    assert throttle.check("10.0.0.1") == ("announce", 0)


def test_tracked_addresses_are_bounded() -> None:
    clock = Clock()
    throttle = DenialThrottle(1, max_clients=3, clock=clock)
    for i in range(3):
        assert throttle.check(f"10.0.0.{i}") == ("audit", 0)
    # full, nobody's window has ended: new addresses share the overflow bucket
    assert throttle.check("10.0.1.1") == ("audit", 0)
    assert throttle.check("10.0.1.2") == ("announce", 0)
    assert len(throttle._windows) == 4
    clock.now += WINDOW_SECONDS
    # ended windows with nothing to report are dropped to make room
    assert throttle.check("10.0.2.1") == ("audit", 0)
    assert "10.0.0.0" not in throttle._windows


def test_per_minute_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        DenialThrottle(0)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    with open_registry(
        tmp_path_factory.mktemp("throttle"), {"MODELWARD_AUDIT_UNAUTHENTICATED_PER_MINUTE": "3"}
    ) as registry:
        yield registry


def test_bad_tokens_are_audited_up_to_the_limit_then_announced_once(reg: Reg) -> None:
    since = reg.last_seq()
    for i in range(12):
        answer = httpx.get(
            f"{reg.url}/v1/repos/acme/a",
            timeout=30,
            headers={"Authorization": f"Bearer mwt_wrong_{i}"},
        )
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthenticated"
    events = [e for e in reg.audit() if e["seq"] > since]
    denied = [e for e in events if e["action"] == "denied"]
    throttled = [e for e in events if e["action"] == "denied.throttled"]
    assert len(denied) == 3
    assert all(e["actor"] == "anonymous" and e["details"]["status"] == 401 for e in denied)
    assert len(throttled) == 1
    assert throttled[0]["subject"] == "127.0.0.1"
    assert throttled[0]["details"]["limit_per_minute"] == 3
    assert "audit_throttled" in reg.log.read_text()


def test_authenticated_denials_are_never_throttled(reg: Reg) -> None:
    reader = reg.actors["worker"].client
    since = reg.last_seq()
    for _ in range(6):
        answer = reader.put("/v1/repos/acme/a/policy", json={"policy_yaml": "version: 1\n"})
        assert answer.status_code == 403
    denied = [e for e in reg.audit() if e["seq"] > since and e["action"] == "denied"]
    assert len(denied) == 6
    assert {e["actor"] for e in denied} == {"worker"}
