"""Signed webhooks for rollout events, by the Standard Webhooks spec (docs/webhooks.md).

- ``outbox.enqueue(session, event_type, data)``: the event, written in the caller's
  transaction (it exists iff the decision it reports committed), one delivery per
  subscribed endpoint;
- ``delivery``: the loop each ``serve`` process runs (claims a due delivery with a
  conditional UPDATE, signs with the endpoint's secret, sends, logs the attempt, retries by
  ``webhook_retry_schedule``);
- ``service`` and ``endpoints``: the admins' ``/v1/admin/webhooks`` (register, list,
  disable, remove, rotate the secret, the delivery log, redeliver, a test event);
- ``sealing``: endpoint secrets sealed with AES-GCM under ``webhooks.key``; ``targets``:
  which URLs and event types an endpoint may name.
"""

from __future__ import annotations

from modelward.registry.domains.webhooks.outbox import EVENT_TYPES, enqueue

__all__ = ["EVENT_TYPES", "enqueue"]
