"""The registry fixtures, for the console's browser tests."""

from __future__ import annotations

from tests.registry.conftest import pg_cluster, registry

__all__ = ["pg_cluster", "registry"]
