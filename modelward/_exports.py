"""Package ``__init__`` modules that export names without importing them up front.

``modelward.attest`` re-exports its public surface (the verifier, policy, manifest ...), which
costs a tenth of a second to import. A CLI command that only needs ``modelward.attest.digest``
must not pay for it, so the packages resolve their exports on first access (PEP 562)::

    __getattr__, __dir__ = lazy_exports(__name__, {"verify_bundle": "modelward.attest.verifier"})

Type checkers see the same names through ``if TYPE_CHECKING:`` imports in the package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name in ``exports`` → its module."""

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook's name
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the PEP 562 hook's name
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
