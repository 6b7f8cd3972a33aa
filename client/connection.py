"""The wire under ``RegistryClient``: one pooled ``httpx.Client``, bounded reads, errors mapped.

Every request is one operation with a deadline for the whole of it (``client.deadline``;
docs/loader.md#deadlines): ``TransferOptions.deadline`` to connect, send, wait for and read
an answer, plus the time a body of known length takes at ``TransferOptions.min_rate``
(the body sent, from its length or ``Content-Length``; the body received, from the answer's
``Content-Length`` once it arrives). Each read still stops at the per-read timeout.

``Connection`` is what the transfer helpers (``client.blobs``, ``client.tuf``) need of a client
and all they import, so the client's modules import one way: ``api`` → ``admin``, ``blobs``,
``bundles``, ``tuf`` → ``connection`` → ``errors``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx

from modelward.client.deadline import bounded, deadline, extend
from modelward.client.errors import (
    ResponseTooLarge,
    TransportError,
    api_error_from_response,
    transport_error,
)

__all__ = ["Connection", "TransferOptions"]

# An error answer is read for its JSON error only; a longer one is reported by status alone.
_MAX_ERROR_BYTES = 1 * 2**20


@dataclass(frozen=True)
class TransferOptions:
    """Limits and knobs for the client's transfers (passed in; nothing read from the environment).

    ``max_response_bytes`` bounds every answer the client reads into memory (JSON answers such
    as ``list_attestations``, ``get_blob``): 64 MiB, room for thousands of attestations.
    ``deadline`` (seconds) bounds a whole request, and ``min_rate`` (bytes a second) adds the
    time its bodies of known length take at that rate: a 64 MiB chunk gets 64 s more, a
    10 GiB blob download about 2 h 50 min (each resumed attempt of ``max_retries`` anew).
    """

    chunk_threshold: int = 64 * 2**20
    chunk_size: int = 64 * 2**20
    read_size: int = 1 * 2**20
    workers: int = 4
    max_retries: int = 3
    retry_backoff: float = 0.5
    state_dir: Path | None = None
    max_response_bytes: int = 64 * 2**20
    deadline: float = 120.0
    min_rate: int = 1 * 2**20


class Connection:
    """Requests to one registry: bearer token, identity encoding, answers read with a bound.

    Raises ``TransportError`` when a request gets no answer and an ``APIError`` subclass when
    the server refuses.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        options: TransferOptions = TransferOptions(),
    ) -> None:
        self.base_url = url.rstrip("/")
        headers = {"User-Agent": "modelward-client/0.1", "Accept-Encoding": "identity"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        limits = httpx.Limits(max_connections=max(8, options.workers * 2))
        self._http = bounded(
            httpx.Client(
                base_url=self.base_url,
                headers=headers,
                timeout=httpx.Timeout(timeout),
                transport=transport,
                limits=limits,
                follow_redirects=True,
            )
        )
        self.options = options

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | Iterator[bytes] | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
        max_bytes: int | None = None,
        what: str | None = None,
    ) -> httpx.Response:
        """Send one request and read its answer into memory, at most ``max_bytes``.

        ``max_bytes`` defaults to ``options.max_response_bytes``; ``what`` names the object
        in a ``ResponseTooLarge``. Returns the response with its body loaded.
        """
        limit = self.options.max_response_bytes if max_bytes is None else max_bytes
        what = what or f"{method} {path}"
        with self._stream(
            method, path, json_body=json_body, content=content, headers=headers, params=params
        ) as response:
            # A HEAD answer has no body; its Content-Length is the size of the thing asked about.
            body = b"" if method == "HEAD" else _read_capped(response, limit, what)
        # The body was read raw and bounded; rebuild the response around those bytes.
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=body,
            request=response.request,
        )

    @contextlib.contextmanager
    def _stream(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | Iterator[bytes] | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
    ) -> Iterator[httpx.Response]:
        """Send one request; yield the response with its body unread (error answers raise).

        The whole of it, reading the body included, ends within its deadline (the module's
        docstring) or raises ``TransportError`` (timed out) naming the deadline."""
        rate = self.options.min_rate
        # A kept-alive connection the server closed as this request went out answers
        # nothing (RemoteProtocolError before any response): a GET or HEAD is sent once
        # more, on a new connection; nothing else is, it may have been acted on.
        retry = method in ("GET", "HEAD")
        answered = False
        with deadline(self.options.deadline + _sent_size(content, headers) / rate):
            while True:
                try:
                    with self._http.stream(
                        method,
                        path,
                        json=json_body,
                        content=content,
                        headers=headers,
                        params=params,
                    ) as response:
                        answered = True
                        if response.status_code >= 400:
                            raise api_error_from_response(response, _read_error_body(response))
                        declared = response.headers.get("content-length", "")
                        if declared.isdigit():
                            extend(int(declared) / rate)
                        yield response
                    return
                except httpx.RemoteProtocolError as exc:
                    if retry and not answered:
                        retry = False
                        continue
                    raise transport_error(exc, method, self.base_url + path) from exc
                except httpx.HTTPError as exc:  # names the URL; https:// against plain HTTP
                    raise transport_error(exc, method, self.base_url + path) from exc

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        return response.json() if response.content else None


def _sent_size(content: bytes | Iterator[bytes] | None, headers: dict[str, str] | None) -> int:
    """How many bytes a request's body holds: its length, else its ``Content-Length``."""
    if isinstance(content, bytes):
        return len(content)
    declared = {k.lower(): v for k, v in (headers or {}).items()}.get("content-length", "")
    return int(declared) if declared.isdigit() else 0


def _read_capped(response: httpx.Response, limit: int, what: str) -> bytes:
    """The raw body of ``response``, at most ``limit`` bytes, or ``ResponseTooLarge``.

    A declared Content-Length over the limit is refused before reading; otherwise reading
    stops at the first chunk that goes past it. A compressed body is refused
    (``TransportError``): the client asked for identity, and decompressing could multiply it.
    """
    url = str(response.request.url)
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise TransportError(f"{what}: {url} answered with Content-Encoding {encoding!r}")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ResponseTooLarge(what, url, limit)
    body = bytearray()
    for chunk in response.iter_bytes():  # identity-encoded (checked above): the raw bytes
        body += chunk
        if len(body) > limit:
            raise ResponseTooLarge(what, url, limit)
    return bytes(body)


def _read_error_body(response: httpx.Response) -> bytes:
    """An error answer's body for its JSON error; empty when too long or compressed."""
    try:
        return _read_capped(response, _MAX_ERROR_BYTES, "error answer")
    except (ResponseTooLarge, TransportError):
        return b""
