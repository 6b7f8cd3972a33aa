"""The registry fixtures, for the rollout tests that run against a real registry."""

from __future__ import annotations

from tests.registry.conftest import pg_cluster, registry

__all__ = ["pg_cluster", "registry"]
