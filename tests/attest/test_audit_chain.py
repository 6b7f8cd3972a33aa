"""attest.audit.chain: one test per way to tamper with the log."""

from __future__ import annotations

import dataclasses

import pytest

from modelward.attest.audit.chain import (
    GENESIS_HASH,
    AuditEvent,
    BrokenChain,
    event_from_json,
    event_hash,
    event_to_json,
    next_event,
    verify_chain,
)


def _chain(n: int = 6) -> list[AuditEvent]:
    events: list[AuditEvent] = []
    prev = None
    for i in range(n):
        prev = next_event(
            prev,
            at=f"2026-12-02T17:00:{i:02d}.000000Z",
            actor="pub" if i % 2 else "admin",
            action="alias.set",
            subject="acme/tiny@prod",
            details={"to": f"sha256:{i:064x}", "n": i, "nested": {"b": [1, 2], "a": None}},
        )
        events.append(prev)
    return events


def test_intact_chain_verifies() -> None:
    events = _chain()
    assert events[0].seq == 1
    assert events[0].prev_hash == GENESIS_HASH
    assert verify_chain(events) == len(events)
    assert verify_chain([]) == 0


def test_hash_is_canonical_and_covers_every_field() -> None:
    e = _chain(1)[0]
    fields = {
        "seq": e.seq,
        "at": e.at,
        "actor": e.actor,
        "action": e.action,
        "subject": e.subject,
        "details": dict(e.details),
        "prev_hash": e.prev_hash,
    }
    assert event_hash(**fields) == e.hash
    reordered = dict(reversed(list(e.details.items())))
    assert event_hash(**{**fields, "details": reordered}) == e.hash
    for name, value in (
        ("seq", 2),
        ("at", "x"),
        ("actor", "x"),
        ("action", "x"),
        ("subject", "x"),
        ("details", {}),
        ("prev_hash", "sha256:" + "1" * 64),
    ):
        assert event_hash(**{**fields, name: value}) != e.hash, name


@pytest.mark.parametrize("field", ["actor", "action", "subject", "at"])
def test_changed_row_is_named(field: str) -> None:
    events = _chain()
    events[3] = dataclasses.replace(events[3], **{field: "mallory"})
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 4
    assert "row changed" in info.value.reason


def test_changed_details_are_detected() -> None:
    events = _chain()
    events[2] = dataclasses.replace(events[2], details={**events[2].details, "to": "sha256:evil"})
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 3


def test_row_changed_and_rehashed_breaks_the_next_link() -> None:
    events = _chain()
    forged = next_event(
        events[1],
        at=events[2].at,
        actor="mallory",
        action="alias.set",
        subject="acme/tiny@prod",
        details={},
    )
    events[2] = forged
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 4
    assert "prev_hash" in info.value.reason


def test_deleted_row_is_named() -> None:
    events = _chain()
    del events[2]
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 4
    assert "missing" in info.value.reason


def test_deleted_last_rows_then_renumbered_tail_is_detected() -> None:
    events = _chain()
    del events[2]
    events[2:] = [dataclasses.replace(e, seq=e.seq - 1) for e in events[2:]]
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 3


def test_inserted_row_is_named() -> None:
    events = _chain()
    intruder = next_event(
        events[1],
        at="2026-12-02T17:00:02.500000Z",
        actor="mallory",
        action="alias.set",
        subject="acme/tiny@prod",
        details={},
    )
    events.insert(2, intruder)
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 3
    assert "duplicated or out of order" in info.value.reason


def test_reordered_rows_are_named() -> None:
    events = _chain()
    events[2], events[3] = events[3], events[2]
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 4


def test_swapped_seq_numbers_are_detected() -> None:
    events = _chain()
    a, b = events[2], events[3]
    events[2] = dataclasses.replace(b, seq=a.seq)
    events[3] = dataclasses.replace(a, seq=b.seq)
    with pytest.raises(BrokenChain) as info:
        verify_chain(events)
    assert info.value.seq == 3


def test_continuing_after_a_known_good_event() -> None:
    events = _chain()
    assert verify_chain(events[3:], after_seq=3, after_hash=events[2].hash) == 3
    with pytest.raises(BrokenChain):
        verify_chain(events[3:], after_seq=3, after_hash=events[1].hash)


def test_wire_form_round_trips_and_rejects_malformed_events() -> None:
    events = _chain(2)
    assert [event_from_json(event_to_json(e)) for e in events] == events
    obj = event_to_json(events[0])
    del obj["hash"]
    with pytest.raises(ValueError, match="hash"):
        event_from_json(obj)
    with pytest.raises(ValueError, match="seq"):
        event_from_json({**event_to_json(events[0]), "seq": "1"})
    with pytest.raises(ValueError, match="details"):
        event_from_json({**event_to_json(events[0]), "details": []})
