"""modelward.client: the HTTP client library of the registry API (docs/http-api.md).

The loader and the command line talk to a registry through it; it imports only
``modelward.attest`` (and never the server: no FastAPI, no SQLAlchemy). Modules:

- ``api``: ``RegistryClient``, one method per endpoint, built on ``listing`` and ``connection``;
- ``connection``: the wire (bounded reads, errors mapped) and ``TransferOptions``;
- ``blobs``, ``bundles``, ``tuf``: transfers, push and unsafe fetch, the TUF fetcher;
- ``config``: references (``REPO@ALIAS``, ``REPO:TAG``, ``REPO@sha256:…``) and saved logins;
- ``audit``, ``release``, ``preflight``: what ``audit verify``, ``release record`` and
  ``push``'s local policy check fetch before handing bytes to attest;
- ``errors``: the client's error tree, drawn there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelward._exports import lazy_exports

if TYPE_CHECKING:
    from modelward.client.api import RegistryClient
    from modelward.client.config import Reference, parse_reference
    from modelward.client.connection import TransferOptions
    from modelward.client.errors import APIError, RegistryClientError, TransportError

__all__ = [
    "APIError",
    "Reference",
    "RegistryClient",
    "RegistryClientError",
    "TransferOptions",
    "TransportError",
    "parse_reference",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "APIError": "modelward.client.errors",
        "Reference": "modelward.client.config",
        "RegistryClient": "modelward.client.api",
        "RegistryClientError": "modelward.client.errors",
        "TransferOptions": "modelward.client.connection",
        "TransportError": "modelward.client.errors",
        "parse_reference": "modelward.client.config",
    },
)
