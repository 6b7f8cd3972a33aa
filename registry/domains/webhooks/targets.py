"""What an endpoint may name: its URL and the event types it takes (docs/webhooks.md).

Each check raises ``BadRequest`` (400 ``invalid_webhook``) naming the field at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

from modelward.registry.errors import BadRequest

__all__ = [
    "EVENT_TYPES",
    "MAX_URL",
    "ROLLOUT_EVENTS",
    "TEST_EVENT",
    "check_events",
    "check_url",
    "subscribed",
]

ROLLOUT_EVENTS: Final = (
    "rollout.started",
    "rollout.advanced",
    "rollout.held",
    "rollout.aborted",
    "rollout.completed",
)
TEST_EVENT: Final = "webhook.test"  # sent to one endpoint on request, whatever it takes
EVENT_TYPES: Final = frozenset(ROLLOUT_EVENTS)
WILDCARD: Final = "rollout.*"
MAX_URL: Final = 2000
MAX_EVENTS: Final = 20


def _refuse(field: str, message: str) -> BadRequest:
    return BadRequest(message, code="invalid_webhook", detail={"field": field})


def check_url(url: str) -> str:
    """``url`` when it is an absolute http(s) URL with a host and no credentials in it."""
    if len(url) > MAX_URL:
        raise _refuse("url", f"url: longer than {MAX_URL} characters")
    if not url.isascii() or any(c.isspace() or not c.isprintable() for c in url):
        raise _refuse("url", "url: only printable ASCII without spaces (percent-encode the rest)")
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when it is not a number in range
    except ValueError as exc:
        raise _refuse("url", f"url: not a URL ({exc})") from exc
    if parts.scheme not in ("http", "https"):
        raise _refuse("url", f"url: the scheme must be http or https, not {parts.scheme!r}")
    if parts.username is not None or parts.password is not None:
        raise _refuse(
            "url",
            "url: credentials in the URL are refused (they would be stored and logged in the "
            "clear); the receiver verifies the signature instead",
        )
    if not parts.hostname:
        raise _refuse("url", "url: no host")
    if parts.fragment:
        raise _refuse("url", "url: a fragment (#...) is never sent; leave it out")
    del port
    return url


def check_events(events: Sequence[str]) -> tuple[str, ...]:
    """The event types an endpoint takes: ``rollout.*`` or names from ``ROLLOUT_EVENTS``,
    sorted, without duplicates; at least one."""
    if not events:
        raise _refuse("events", "events: name at least one event type (or rollout.*)")
    if len(events) > MAX_EVENTS:
        raise _refuse("events", f"events: at most {MAX_EVENTS}")
    for event in events:
        if event != WILDCARD and event not in EVENT_TYPES:
            known = ", ".join((WILDCARD, *ROLLOUT_EVENTS))
            raise _refuse("events", f"events: unknown event type {event!r} (known: {known})")
    return tuple(sorted(set(events)))


def subscribed(events: Sequence[str], event_type: str) -> bool:
    """Whether an endpoint taking ``events`` takes ``event_type``."""
    return event_type in events or (event_type.startswith("rollout.") and WILDCARD in events)
