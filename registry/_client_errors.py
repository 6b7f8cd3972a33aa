"""The registry client's errors.

    RegistryClientError              every failure the client reports
     ├── ClientConfigError           no URL/token configured, an unreadable config file
     ├── InvalidReference            ``org/name@alias`` / ``org/name@sha256:<hex>`` did not parse
     ├── TransportError              connection refused/reset, timeout, a stream cut short
     ├── BlobIntegrityError          downloaded bytes did not hash/size to the digest asked for
     └── APIError                    the server answered with a JSON error (status >= 400)
          ├── BadRequest             400, 413, 415, 416, 422: the request was refused as invalid
          ├── Unauthorized           401: no token, a bad, revoked or expired token
          ├── Forbidden              403: authenticated, not allowed
          ├── NotFound               404
          └── Conflict               409: stale compare-and-swap; ``current`` is the alias now

Each ``APIError`` carries the request it answers and the server's ``code``, ``message`` and
``detail`` from ``{"error": {"code", "message", "detail"}}``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = [
    "APIError",
    "BadRequest",
    "BlobIntegrityError",
    "ClientConfigError",
    "Conflict",
    "Forbidden",
    "InvalidReference",
    "NotFound",
    "RegistryClientError",
    "TransportError",
    "Unauthorized",
    "api_error_from_response",
]


class RegistryClientError(Exception):
    """Root of every error the registry client raises."""


class ClientConfigError(RegistryClientError):
    """The client has no usable URL/token, or its config file is unreadable."""


class InvalidReference(RegistryClientError, ValueError):  # noqa: N818 - reads as a noun
    """A ``REPO@REF`` reference did not parse."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"invalid reference {text!r}: {reason}")
        self.text = text
        self.reason = reason


class TransportError(RegistryClientError):
    """The request did not get an answer: connection refused or reset, timeout, cut-off stream."""

    def __init__(self, message: str, request: httpx.Request | None = None) -> None:
        super().__init__(message)
        self.request = request


class BlobIntegrityError(RegistryClientError):
    """Bytes received for a blob do not match the digest (or size) they were asked for."""

    def __init__(self, digest: str, actual: str, size: int, expected_size: int | None) -> None:
        want = f" ({expected_size} bytes)" if expected_size is not None else ""
        super().__init__(
            f"blob {digest}{want}: received {size} bytes hashing to {actual}; nothing kept"
        )
        self.digest = digest
        self.actual = actual
        self.size = size
        self.expected_size = expected_size


class APIError(RegistryClientError):
    """The server refused the request; ``code``/``message``/``detail`` are its JSON error."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        detail: Any,
        request: httpx.Request | None,
    ) -> None:
        text = f"{status} {code}: {message}"
        if detail not in (None, "", {}, []):
            text += f" ({json.dumps(detail, sort_keys=True, default=str)})"
        super().__init__(text)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail
        self.request = request


class BadRequest(APIError):  # noqa: N818 - HTTP status names
    """400/413/415/416/422: invalid input (digest mismatch, bad manifest, too large...)."""


class Unauthorized(APIError):  # noqa: N818
    """401: missing, unknown, revoked or expired token."""


class Forbidden(APIError):  # noqa: N818
    """403: the principal is authenticated but not allowed to do this."""


class NotFound(APIError):  # noqa: N818
    """404: no such blob, bundle, repository, alias, upload session..."""


class Conflict(APIError):  # noqa: N818
    """409: a stale compare-and-swap. ``current`` holds the alias state the server reported."""

    @property
    def current(self) -> dict[str, Any] | None:
        """The alias as it stands now (``{"alias", "digest", "version"}``), when the server said."""
        detail = self.detail
        if isinstance(detail, dict):
            inner = detail.get("current", detail)
            if isinstance(inner, dict) and "version" in inner:
                return dict(inner)
        return None


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: NotFound,
    411: BadRequest,
    413: BadRequest,
    415: BadRequest,
    416: BadRequest,
    422: BadRequest,
}


def api_error_from_response(response: httpx.Response) -> APIError:
    """Build the ``APIError`` subclass for an error response (body already read)."""
    code, message, detail = f"http_{response.status_code}", response.reason_phrase, None
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code", code))
        message = str(err.get("message", message))
        detail = err.get("detail")
    elif isinstance(body, dict) and "detail" in body:  # a framework default error
        detail = body["detail"]
    cls = _BY_STATUS.get(response.status_code, APIError)
    request = response.request if _has_request(response) else None
    return cls(response.status_code, code, message, detail, request)


def _has_request(response: httpx.Response) -> bool:
    try:
        response.request  # noqa: B018 - property raises when unset
    except RuntimeError:
        return False
    return True
