"""The audit log's hash chain: pure logic, no I/O.

Each event's ``hash`` is ``sha256:<hex>`` of the RFC 8785 canonical JSON of
``{"seq", "at", "actor", "action", "subject", "details", "prev_hash"}``; ``prev_hash`` is the
previous event's hash (``GENESIS_HASH`` for seq 1). Sequence numbers start at 1 and have no gaps.
``verify_chain`` recomputes the chain and names the first broken link: a row changed (its hash no
longer matches), deleted (a gap in seq / a prev_hash that matches nothing), inserted or reordered
(seq out of order / prev_hash not the previous row's hash). Used by the server to append and by
``modelward audit verify`` (through the API or straight from the database).

The same canonical bytes (``event_entry``) are the event's entry in the audit log's Merkle tree:
event ``seq`` is leaf ``seq - 1`` and its leaf hash is ``SHA-256(0x00 || entry)``
(attest.audit.tree). The chain finds a changed row; only a signed checkpoint held outside the
database finds a row changed by someone who also recomputed the chain (attest.audit.checkpoint).

Errors (attest.errors)::

    AuditVerificationError
    └── BrokenChain         the chain breaks at ``seq`` (``reason`` says how)

A malformed wire event (``event_from_json``) is a ``ValueError`` naming the field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import rfc8785

from modelward.attest.errors import BrokenChain

__all__ = [
    "GENESIS_HASH",
    "AuditEvent",
    "BrokenChain",
    "event_entry",
    "event_from_json",
    "event_hash",
    "event_to_json",
    "next_event",
    "verify_chain",
]

GENESIS_HASH = "sha256:" + "0" * 64


@dataclass(frozen=True)
class AuditEvent:
    """One audit row. ``at`` is an RFC 3339 UTC string kept verbatim (it is hashed)."""

    seq: int
    at: str
    actor: str
    action: str
    subject: str
    details: Mapping[str, Any] = field(default_factory=dict)
    prev_hash: str = GENESIS_HASH
    hash: str = ""


def _canonical(
    *,
    seq: int,
    at: str,
    actor: str,
    action: str,
    subject: str,
    details: Mapping[str, Any],
    prev_hash: str,
) -> bytes:
    body: dict[str, Any] = {
        "seq": seq,
        "at": at,
        "actor": actor,
        "action": action,
        "subject": subject,
        "details": dict(details),
        "prev_hash": prev_hash,
    }
    return rfc8785.dumps(body)


def event_hash(
    *,
    seq: int,
    at: str,
    actor: str,
    action: str,
    subject: str,
    details: Mapping[str, Any],
    prev_hash: str,
) -> str:
    """Hash the canonical encoding of the row fields and the previous hash."""
    body = _canonical(
        seq=seq,
        at=at,
        actor=actor,
        action=action,
        subject=subject,
        details=details,
        prev_hash=prev_hash,
    )
    return "sha256:" + hashlib.sha256(body).hexdigest()


def event_entry(event: AuditEvent) -> bytes:
    """The event's entry in the Merkle tree: the RFC 8785 JSON its chain hash is over."""
    return _canonical(
        seq=event.seq,
        at=event.at,
        actor=event.actor,
        action=event.action,
        subject=event.subject,
        details=event.details,
        prev_hash=event.prev_hash,
    )


def next_event(
    prev: AuditEvent | None,
    *,
    at: str,
    actor: str,
    action: str,
    subject: str,
    details: Mapping[str, Any],
) -> AuditEvent:
    """The event that follows ``prev`` (or the first event), hash filled in."""
    seq = 1 if prev is None else prev.seq + 1
    prev_hash = GENESIS_HASH if prev is None else prev.hash
    digest = event_hash(
        seq=seq,
        at=at,
        actor=actor,
        action=action,
        subject=subject,
        details=details,
        prev_hash=prev_hash,
    )
    return AuditEvent(seq, at, actor, action, subject, dict(details), prev_hash, digest)


def verify_chain(
    events: Iterable[AuditEvent], *, after_seq: int = 0, after_hash: str = GENESIS_HASH
) -> int:
    """Recompute the chain; return the number of events checked or raise BrokenChain.

    Start from the beginning (defaults) or continue after a known-good ``(after_seq,
    after_hash)``. Raises BrokenChain(seq, reason) for the first broken link.
    """
    expected_seq = after_seq + 1
    expected_prev = after_hash
    count = 0
    for event in events:
        # (1): sequence numbers are consecutive: a gap is a deleted row, a repeat or a step back
        # is an inserted or reordered one.
        if event.seq != expected_seq:
            kind = "missing" if event.seq > expected_seq else "duplicated or out of order"
            raise BrokenChain(
                event.seq, f"expected seq {expected_seq}, found {event.seq} ({kind} event)"
            )
        # (2): the row links to the hash of the row before it.
        if event.prev_hash != expected_prev:
            raise BrokenChain(
                event.seq,
                f"prev_hash {event.prev_hash} does not match the previous event's hash "
                f"{expected_prev} (an event was deleted, inserted or reordered before it)",
            )
        # (3): the row's own fields still hash to its recorded hash.
        actual = event_hash(
            seq=event.seq,
            at=event.at,
            actor=event.actor,
            action=event.action,
            subject=event.subject,
            details=event.details,
            prev_hash=event.prev_hash,
        )
        if actual != event.hash:
            raise BrokenChain(
                event.seq,
                f"recorded hash {event.hash} but the row hashes to {actual} (row changed)",
            )
        expected_seq += 1
        expected_prev = event.hash
        count += 1
    return count


def event_to_json(event: AuditEvent) -> dict[str, Any]:
    """The wire form used by ``GET /v1/audit``."""
    return {
        "seq": event.seq,
        "at": event.at,
        "actor": event.actor,
        "action": event.action,
        "subject": event.subject,
        "details": dict(event.details),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def event_from_json(obj: Mapping[str, Any]) -> AuditEvent:
    """Parse the wire form; raises ValueError naming the missing or mistyped field."""
    try:
        seq, at, actor = obj["seq"], obj["at"], obj["actor"]
        action, subject, details = obj["action"], obj["subject"], obj["details"]
        prev_hash, digest = obj["prev_hash"], obj["hash"]
    except KeyError as exc:
        raise ValueError(f"audit event lacks field {exc.args[0]!r}") from exc
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError("audit event field 'seq' is not an integer")  # noqa: TRY004
    for name, value in (
        ("at", at),
        ("actor", actor),
        ("action", action),
        ("subject", subject),
        ("prev_hash", prev_hash),
        ("hash", digest),
    ):
        if not isinstance(value, str):
            raise ValueError(f"audit event field {name!r} is not a string")  # noqa: TRY004
    if not isinstance(details, dict):
        raise ValueError("audit event field 'details' is not an object")  # noqa: TRY004
    return AuditEvent(seq, at, actor, action, subject, details, prev_hash, digest)
