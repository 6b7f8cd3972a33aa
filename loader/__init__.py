"""modelward.loader: what a serving worker runs (pull, verify, boot, baselines, replay).

It talks to a registry only through ``RegistrySource`` (which ``RegistryClient`` satisfies)
and decides trust only through ``modelward.attest.verify_bundle``. Importing it loads no vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelward._exports import lazy_exports

if TYPE_CHECKING:
    from modelward.loader.errors import LoaderError, RefusedError
    from modelward.loader.pull import PulledBundle, pull_bundle
    from modelward.loader.source import RegistrySource

__all__ = ["LoaderError", "PulledBundle", "RefusedError", "RegistrySource", "pull_bundle"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LoaderError": "modelward.loader.errors",
        "RefusedError": "modelward.loader.errors",
        "PulledBundle": "modelward.loader.pull",
        "pull_bundle": "modelward.loader.pull",
        "RegistrySource": "modelward.loader.source",
    },
)
