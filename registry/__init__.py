"""modelward.registry: the registry service (``modelward serve``) and its HTTP client.

The public surface is the client: importing this package loads neither FastAPI nor
SQLAlchemy. The service is built by ``modelward.registry.app.create_app(settings)``.
"""

from __future__ import annotations

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
