"""``RegistryClient`` methods for rollouts (docs/rollouts.md#commands).

Each method is one request; errors are what ``RegistryClient`` raises (``APIError``
subclasses, ``TransportError``); ``parse_repo`` raises ``InvalidReference`` for a malformed
``org/name`` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from modelward.client.connection import Connection
from modelward.client.listing import repo_path

__all__ = ["RolloutsMixin"]

JSON = dict[str, Any]


def _path(repo: str, alias: str) -> str:
    return f"{repo_path(repo)}/rollouts/{quote(alias, safe='')}"


class RolloutsMixin(Connection):
    """Rollout endpoints; ``RegistryClient`` is built on them."""

    def start_rollout(
        self,
        repo: str,
        alias: str,
        to: str,
        *,
        steps: Sequence[int] | None = None,
        window_seconds: int = 0,
        min_samples: int = 0,
        analysis: str | None = None,
        reason: str | None = None,
        allow_no_fleet: bool = False,
    ) -> JSON:
        """POST a rollout plan of ``repo@alias`` to digest ``to``: the rollout, with the
        ``proposal`` the alias's role signs (``plan_signed`` once it has).
        ``allow_no_fleet``: start a plan with an analysis though no worker is known (the
        registry refuses it otherwise, and audits the override)."""
        body: JSON = {
            "to": to,
            "window_seconds": window_seconds,
            "min_samples": min_samples,
            "analysis": analysis,
            "reason": reason,
        }
        if steps is not None:
            body["steps"] = list(steps)
        if allow_no_fleet:
            body["allow_no_fleet"] = True
        result: JSON = self._json("POST", _path(repo, alias), json_body=body)
        return result

    def advance_rollout(self, repo: str, alias: str, reason: str) -> JSON:
        """POST: the plan's next step, signed by the registry's online key."""
        result: JSON = self._json(
            "POST", f"{_path(repo, alias)}/advance", json_body={"reason": reason}
        )
        return result

    def abort_rollout(self, repo: str, alias: str, reason: str) -> JSON:
        """POST: abort toward the stable digest, for good."""
        result: JSON = self._json(
            "POST", f"{_path(repo, alias)}/abort", json_body={"reason": reason}
        )
        return result

    def rollout_status(self, repo: str, alias: str) -> JSON:
        """GET the alias's latest rollout: plan, signed step, history."""
        result: JSON = self._json("GET", _path(repo, alias))
        return result

    def send_report(self, repo: str, alias: str, envelope: bytes) -> JSON:
        """POST a fleet report (its DSSE envelope, signed by this principal's worker key):
        ``{id, assigned, cohort}`` (docs/rollouts.md#fleet-reports)."""
        result: JSON = self._json(
            "POST",
            f"{_path(repo, alias)}/reports",
            content=envelope,
            headers={"Content-Type": "application/json"},
        )
        return result

    def analyze_rollout(self, repo: str, alias: str) -> JSON:
        """POST: judge the current step now and act on it as the rollout controller would
        (``verdict``, ``reasons``, ``metrics``, ``action``; docs/rollouts.md#analysis)."""
        result: JSON = self._json("POST", f"{_path(repo, alias)}/analyze")
        return result

    def rollout_weights(self, repo: str, alias: str) -> JSON:
        """GET the signed step's weights (``backends``: ``{digest, weight}``)."""
        result: JSON = self._json("GET", f"{_path(repo, alias)}/weights")
        return result

    def rollout_history(self, repo: str, alias: str) -> JSON:
        """GET every rollout of the alias, oldest first (``rollouts``: each as
        ``rollout_status`` shows one)."""
        result: JSON = self._json("GET", f"{_path(repo, alias)}/history")
        return result
