"""modelward.loader: what a serving worker runs (pull, verify, boot, baselines, replay).

It talks to a registry only through ``RegistrySource`` (which ``RegistryClient`` satisfies)
and decides trust only through ``modelward.attest.verify_bundle``. Importing it loads no vLLM.
"""

from __future__ import annotations

from modelward.loader.errors import LoaderError, RefusedError
from modelward.loader.pull import PulledBundle, pull_bundle
from modelward.loader.source import RegistrySource

__all__ = ["LoaderError", "PulledBundle", "RefusedError", "RegistrySource", "pull_bundle"]
