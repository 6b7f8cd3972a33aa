"""``RegistryClient`` methods for signed webhooks (docs/webhooks.md); admins only.

Each method is one request; errors are what ``RegistryClient`` raises (``APIError``
subclasses, ``TransportError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelward.client.connection import Connection

__all__ = ["WebhooksMixin"]

JSON = dict[str, Any]
BASE = "/v1/admin/webhooks"


class WebhooksMixin(Connection):
    """Webhook endpoints; ``RegistryClient`` is built on them."""

    def add_webhook(
        self, url: str, events: Sequence[str] = ("rollout.*",), description: str | None = None
    ) -> JSON:
        """POST: register ``url`` for ``events``; the answer holds ``secret``, shown once."""
        body = {"url": url, "events": list(events), "description": description}
        result: JSON = self._json("POST", BASE, json_body=body)
        return result

    def list_webhooks(self, *, removed: bool = False) -> list[JSON]:
        """GET every endpoint (never a secret)."""
        result: list[JSON] = self._json(
            "GET", BASE, params={"removed": "true"} if removed else None
        )
        return result

    def set_webhook_enabled(self, endpoint_id: int, *, enabled: bool) -> JSON:
        """POST: enable or disable an endpoint."""
        action = "enable" if enabled else "disable"
        result: JSON = self._json("POST", f"{BASE}/{int(endpoint_id)}/{action}")
        return result

    def remove_webhook(self, endpoint_id: int) -> None:
        """DELETE an endpoint (its secret erased, waiting deliveries cancelled)."""
        self._request("DELETE", f"{BASE}/{int(endpoint_id)}")

    def rotate_webhook_secret(self, endpoint_id: int) -> JSON:
        """POST: a new signing secret (``secret``, shown once)."""
        result: JSON = self._json("POST", f"{BASE}/{int(endpoint_id)}/rotate")
        return result

    def webhook_deliveries(
        self, endpoint_id: int, *, limit: int = 50, event_type: str | None = None
    ) -> JSON:
        """GET the delivery log: ``deliveries``, each with its ``attempts``."""
        params: dict[str, Any] = {"limit": limit}
        if event_type is not None:
            params["event_type"] = event_type
        result: JSON = self._json("GET", f"{BASE}/{int(endpoint_id)}/deliveries", params=params)
        return result

    def redeliver_webhook(self, endpoint_id: int, delivery_id: int) -> JSON:
        """POST: queue a finished delivery again."""
        result: JSON = self._json(
            "POST", f"{BASE}/{int(endpoint_id)}/deliveries/{int(delivery_id)}/redeliver"
        )
        return result

    def test_webhook(self, endpoint_id: int) -> JSON:
        """POST: queue a signed ``webhook.test`` event; its delivery."""
        result: JSON = self._json("POST", f"{BASE}/{int(endpoint_id)}/test")
        return result
