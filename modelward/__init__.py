"""modelward: a supply-chain registry and hardened loader for ML model bundles.

The subpackages live in the repository's top-level folders and install under this one name:

- ``modelward.attest``: the pure library (bundle format, digests, scanner, signing,
  verification, policy, and the one bundle verifier); no network, no database.
- ``modelward.registry``: the registry service (``modelward serve``) and its HTTP client.
- ``modelward.loader``: pull, verify, boot, baselines, replay.
- ``modelward.policies``: the default policy, examples and the policy schema (data).
- ``modelward.migrations``: the registry's Alembic migrations.
- ``modelward.cli``: the ``modelward`` command.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
