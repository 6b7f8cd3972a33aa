"""A request-body limit for every endpoint but the streaming ones (ASGI middleware).

JSON endpoints read their whole body before validating it, so an unbounded body is memory
an attacker chooses. ``BodyLimit`` refuses a body above the limit with 413 ``too_large``:
at once when ``Content-Length`` says so (nothing is read), and otherwise by counting the
bytes ``receive`` hands over (chunked bodies). The refusal is raised as an HTTPException
from ``receive``; FastAPI re-raises those from body parsing, so the app's one error handler
answers it with the JSON error shape and audits it as a denial.

Blob PUTs, upload PATCHes and attestation POSTs stream with their own limits
(``max_blob_bytes``, ``max_attestation_bytes``) and are left alone. A declared length is
read with ``_numbers.decimal``, so a ``Content-Length`` of thousands of digits is a 413, not a
500.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from modelward.registry.domains._numbers import decimal

__all__ = ["BodyLimit", "BodyTooLarge", "is_streaming"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_STREAMING = (
    ("PUT", re.compile(r"/v1/blobs/[^/]+")),
    ("PATCH", re.compile(r"/v1/uploads/[^/]+")),
    ("POST", re.compile(r"/v1/repos/[^/]+/[^/]+/bundles/[^/]+/attestations")),
    ("POST", re.compile(r"/v2/[^/]+/[^/]+/blobs/uploads/?")),  # OCI monolithic upload
    ("PATCH", re.compile(r"/v2/[^/]+/[^/]+/blobs/uploads/[^/]+")),
    ("PUT", re.compile(r"/v2/[^/]+/[^/]+/blobs/uploads/[^/]+")),
)


class BodyTooLarge(HTTPException):
    """413: the request body is larger than the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


def is_streaming(method: str, path: str) -> bool:
    """True for the requests whose body is bytes streamed under their own limit (blob and
    upload bytes, attestations), never read whole."""
    return any(method == m and pattern.fullmatch(path) for m, pattern in _STREAMING)


def _exempt(method: str, path: str) -> bool:
    return method not in _BODY_METHODS or is_streaming(method, path)


class BodyLimit:
    """ASGI middleware: at most ``limit`` body bytes per request (see the module doc)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _exempt(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        # a number of any length is compared, never converted whole (_numbers.decimal);
        # anything else is left to the server and the byte count below
        length = decimal(declared.decode("latin-1").strip(" \t"))
        over = length is not None and length > self.limit
        received = 0

        async def limited() -> Message:
            nonlocal received
            if over:
                raise BodyTooLarge(self.limit)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited, send)
