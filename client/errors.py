"""The registry client's errors.

    RegistryClientError              every failure the client reports
     ├── ClientConfigError           no URL/token configured, an unreadable config file
     ├── InvalidReference            ``org/name@alias`` / ``org/name@sha256:<hex>`` did not parse
     ├── UnknownRepository           no repository of that name the caller may read (with the
     │                               closest names it may read)
     ├── TransportError              connection refused/reset, timeout, a stream cut short
     ├── BlobIntegrityError          downloaded bytes did not hash/size to the digest asked for
     │                               (a body longer than the stated size is cut off at it)
     ├── ResponseTooLarge            an answer read into memory went past its byte limit
     ├── PreflightRefused            ``push`` judged the bundle locally with the repository's
     │                               policy: the registry would refuse it; nothing was sent
     ├── ReleaseInputError           (client.release) the registry cannot give what a
     │                               release record needs (names the thing)
     └── APIError                    the server answered with a JSON error (status >= 400)
          ├── BadRequestError        400, 411, 413, 415, 416, 422: refused as invalid
          ├── UnauthorizedError      401: no token, a bad, revoked or expired token
          ├── ForbiddenError         403: authenticated, not allowed
          ├── NotFoundError          404, 410
          └── ConflictError          409: stale compare-and-swap; ``current`` is the alias now

Each ``APIError`` carries the request it answers and the server's ``code``, ``message`` and
``detail`` from ``{"error": {"code", "message", "detail"}}``.

``UnsafeFetchWarning`` (a ``UserWarning``, not an error) marks the one download path that checks
digests only: ``RegistryClient.unsafe_fetch``.

These are what the client raises on receiving an answer; the server's own answers are
registry.errors (``NotFound``, ``Conflict``...: the names without ``Error``), a separate tree
(tests/attest/test_error_tree.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = [
    "APIError",
    "BadRequestError",
    "BlobIntegrityError",
    "ClientConfigError",
    "ConflictError",
    "ForbiddenError",
    "InvalidReference",
    "NotFoundError",
    "PreflightRefused",
    "RegistryClientError",
    "ResponseTooLarge",
    "TransportError",
    "UnauthorizedError",
    "UnknownRepository",
    "UnsafeFetchWarning",
    "api_error_from_response",
    "transport_error",
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


class UnknownRepository(RegistryClientError):  # noqa: N818 - reads as a noun
    """The registry has no repository of that name that the caller may read."""

    def __init__(self, repo: str, suggestions: tuple[str, ...]) -> None:
        hint = f"; did you mean {' or '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"no such repository {repo}{hint}")
        self.repo = repo
        self.suggestions = suggestions


class TransportError(RegistryClientError):
    """The request did not get an answer: connection refused or reset, timeout, cut-off stream."""

    def __init__(self, message: str, request: httpx.Request | None = None) -> None:
        super().__init__(message)
        self.request = request


# What OpenSSL says when the peer answers a TLS handshake with plain HTTP.
_PLAIN_HTTP_SIGNS = (
    "wrong_version_number",
    "wrong version number",
    "record layer failure",
    "packet length too long",
    "http_request",
    "http request",
)


def transport_error(exc: httpx.HTTPError, method: str, url: str) -> TransportError:
    """A ``TransportError`` naming the registry URL and what went wrong, in words.

    ``https://`` against a server that speaks plain HTTP says so (use ``http://``); a refused
    connection names the URL it tried; anything else keeps httpx's reason.
    (httpx is imported here, not at the top: the CLI's light commands load this module.)
    """
    from urllib.parse import urlsplit

    import httpx

    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    reason = str(exc) or type(exc).__name__
    request = _request_of(exc)
    if isinstance(exc, httpx.TimeoutException):
        return TransportError(f"{method} {url}: timed out ({reason})", request)
    if isinstance(exc, httpx.ConnectError):
        lowered = reason.lower()
        if parts.scheme == "https" and any(sign in lowered for sign in _PLAIN_HTTP_SIGNS):
            plain = "http://" + parts.netloc
            return TransportError(
                f"the server at {origin} speaks plain HTTP, not HTTPS: use {plain}", request
            )
        return TransportError(f"cannot connect to the registry at {origin}: {reason}", request)
    if isinstance(exc, httpx.RemoteProtocolError) and parts.scheme == "http":
        return TransportError(
            f"{method} {url}: {reason} (does the server at {origin} speak HTTPS? "
            f"then use https://{parts.netloc})",
            request,
        )
    return TransportError(f"{method} {url}: {reason}", request)


def _request_of(exc: httpx.HTTPError) -> httpx.Request | None:
    try:
        return exc.request
    except RuntimeError:
        return None


class BlobIntegrityError(RegistryClientError):
    """Bytes received for a blob do not match the digest or the size they were asked for.

    Nothing is kept. ``size`` is the byte count received; ``actual`` the digest of those bytes,
    or None when the server sent more than ``expected_size`` and the download was cut off there
    (no byte past the stated size is written or kept in memory).
    """

    def __init__(
        self, digest: str, actual: str | None, size: int, expected_size: int | None
    ) -> None:
        if actual is None and expected_size is not None:
            text = (
                f"blob {digest}: the server sent more than the {expected_size} bytes stated for "
                "it; the download stopped there (no byte past them written), nothing kept"
            )
        elif expected_size is not None and size < expected_size:
            text = (
                f"blob {digest} ({expected_size} bytes stated): the server sent only {size} "
                f"bytes, hashing to {actual}; nothing kept"
            )
        else:
            want = f" ({expected_size} bytes)" if expected_size is not None else ""
            text = f"blob {digest}{want}: received {size} bytes hashing to {actual}; nothing kept"
        super().__init__(text)
        self.digest = digest
        self.actual = actual
        self.size = size
        self.expected_size = expected_size


class ResponseTooLarge(RegistryClientError):  # noqa: N818 - named after the outcome
    """An answer read into memory went past ``limit`` bytes: reading stopped there.

    ``what`` names the object asked for (``manifest of org/name@sha256:...``), ``url`` the
    request. Raised as soon as the limit is passed (or up front when the declared
    Content-Length is over it), so a hostile registry cannot fill the client's memory.
    """

    def __init__(self, what: str, url: str, limit: int) -> None:
        super().__init__(
            f"{what}: the answer from {url} is larger than the limit of {limit} bytes; "
            "stopped reading"
        )
        self.what = what
        self.url = url
        self.limit = limit


class PreflightRefused(RegistryClientError):  # noqa: N818 - named after the outcome
    """``push`` checked the bundle against ``repo``'s policy before uploading, with the
    registry's own verifier, and the registry would refuse it for ``reasons`` (the failed
    checks, ``name: message``, word for word as the registry words them). Nothing was sent.
    ``unsigned``: the push carried no attestation at all."""

    def __init__(self, repo: str, reasons: tuple[str, ...], *, unsigned: bool) -> None:
        super().__init__("policy denied the bundle: " + "; ".join(reasons))
        self.repo = repo
        self.reasons = reasons
        self.unsigned = unsigned


class UnsafeFetchWarning(UserWarning):
    """``RegistryClient.unsafe_fetch`` ran: the bytes were checked against their digests only,
    never against signatures or a policy. Use ``modelward pull`` for a verified bundle."""


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


class BadRequestError(APIError):
    """400/413/415/416/422: invalid input (digest mismatch, bad manifest, too large...)."""


class UnauthorizedError(APIError):
    """401: missing, unknown, revoked or expired token."""


class ForbiddenError(APIError):
    """403: the principal is authenticated but not allowed to do this."""


class NotFoundError(APIError):
    """404: no such blob, bundle, repository, alias, upload session..."""


class ConflictError(APIError):
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
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: NotFoundError,
    411: BadRequestError,
    413: BadRequestError,
    415: BadRequestError,
    416: BadRequestError,
    422: BadRequestError,
}


def api_error_from_response(response: httpx.Response, content: bytes | None = None) -> APIError:
    """Build the ``APIError`` subclass for an error response.

    ``content`` is the body as read by the caller (bounded); None reads ``response.content``,
    which must already be loaded.
    """
    code, message, detail = f"http_{response.status_code}", response.reason_phrase, None
    raw = response.content if content is None else content
    try:
        body = json.loads(raw) if raw else None
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
