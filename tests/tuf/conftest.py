"""The registry fixtures, for the TUF tests that run against a real registry."""

from __future__ import annotations

from tests.registry.conftest import fresh_registry, pg_cluster, registry

__all__ = ["fresh_registry", "pg_cluster", "registry"]
