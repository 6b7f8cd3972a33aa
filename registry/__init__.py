"""modelward.registry: the registry service (``modelward serve``) and its HTTP client.

The public surface is the client: importing this package loads neither FastAPI nor
SQLAlchemy. The service is built by ``modelward.registry.app.create_app(settings)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelward._exports import lazy_exports

if TYPE_CHECKING:
    from modelward.registry.client import (
        APIError,
        Reference,
        RegistryClient,
        RegistryClientError,
        TransportError,
        parse_reference,
    )

__all__ = [
    "APIError",
    "Reference",
    "RegistryClient",
    "RegistryClientError",
    "TransportError",
    "parse_reference",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "APIError": "modelward.registry.client",
        "Reference": "modelward.registry.client",
        "RegistryClient": "modelward.registry.client",
        "RegistryClientError": "modelward.registry.client",
        "TransportError": "modelward.registry.client",
        "parse_reference": "modelward.registry.client",
    },
)
