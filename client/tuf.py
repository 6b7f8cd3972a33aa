"""``tuf.ngclient``'s transports: to the registry (the client's connection pool, token and
limits), and to an untrusted metadata mirror with the registry behind it
(docs/tuf.md#workers, docs/tuf.md#mirrors).

A worker resolves aliases with python-tuf's ``Updater``; a fetcher is how that updater
reaches the files. ``TufFetcher`` sends the worker's token and fetches nothing but the
registry. ``MirrorFetcher`` reads a static mirror first (never sending the token) and the
registry's ``/tuf/`` when the mirror cannot answer. Both map errors onto python-tuf's: an
HTTP error answer is a ``DownloadHTTPError`` with its status (the updater stops looking for
newer roots at 404), anything else a ``DownloadError``. Neither trusts a byte: the updater
verifies everything from the pinned root.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
from tuf.api.exceptions import DownloadError, DownloadHTTPError
from tuf.ngclient import FetcherInterface

from modelward.client.connection import Connection
from modelward.client.errors import APIError, RegistryClientError

__all__ = ["TUF_PATH", "Fallback", "MetadataNotServed", "MirrorFetcher", "TufFetcher"]

TUF_PATH = "/tuf/"
CHUNK = 64 * 1024
# a versioned root: what the updater asks for next (N+1) until it is told there is none
_ROOT_FILE = re.compile(r"[0-9]+\.root\.json")


class MetadataNotServed(RegistryClientError, DownloadHTTPError):  # noqa: N818 - the outcome
    """404 for a metadata file: still python-tuf's ``DownloadHTTPError`` (the updater stops
    looking for newer roots at it), and one of our errors, so a command that needed the file
    (a delegated role: a private repository's is served only to its readers,
    docs/tuf.md#private-repositories) refuses with this message and exit 1, no traceback."""

    def __init__(self, name: str, message: str) -> None:
        text = (
            f"the registry serves no TUF metadata file {name} to this token ({message}): a "
            "private repository's roles are served only to principals who may read it "
            "(`modelward repo grant`, docs/tuf.md#private-repositories)"
        )
        RegistryClientError.__init__(self, text)
        self.status_code = 404


class TufFetcher(FetcherInterface):
    """Fetches the registry's ``/tuf/`` files through ``client``."""

    def __init__(self, client: Connection) -> None:
        self.client = client
        self.metadata_url = client.base_url + TUF_PATH

    def _fetch(self, url: str) -> Iterator[bytes]:
        if not url.startswith(self.metadata_url):
            raise DownloadError(f"{url}: not a TUF file of the registry {self.client.base_url}")
        path = url[len(self.client.base_url) :]
        try:
            with self.client._stream("GET", path) as response:
                yield from response.iter_raw(CHUNK)
        except APIError as exc:
            if exc.status == 404:
                raise MetadataNotServed(path[len(TUF_PATH) :], str(exc)) from exc
            raise DownloadHTTPError(str(exc), exc.status) from exc
        except RegistryClientError as exc:
            raise DownloadError(str(exc)) from exc


@dataclass(frozen=True)
class Fallback:
    """A file read from the registry because the mirror could not answer it."""

    name: str
    why: str  # "HTTP 503", "unreachable (ConnectError: ...)"


class MirrorFetcher(FetcherInterface):
    """Fetches TUF files from the mirror at ``mirror_url``, else through ``fallback`` (the
    registry's ``TufFetcher``) at ``fallback_url``, file by file.

    1. the mirror answers 2xx: its bytes (a transport error after the first chunk is a
       ``DownloadError``: bytes are never spliced from two sources);
    2. the mirror answers 404 or 403 for a root version: there is no newer root (the
       registry writes every root before the timestamp that needs it), as from the registry;
    3. the mirror cannot be reached, or answers any other HTTP error (404, 403, 5xx ...):
       the registry's file, recorded in ``fallbacks``.

    ``sources`` records where each file came from (name -> base URL), for messages.
    """

    def __init__(
        self,
        mirror_url: str,
        fallback: FetcherInterface,
        fallback_url: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.mirror_url = mirror_url.rstrip("/") + "/"
        self.fallback = fallback
        self.fallback_url = fallback_url.rstrip("/") + "/"
        self.fallbacks: list[Fallback] = []
        self.sources: dict[str, str] = {}
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            headers={"User-Agent": "modelward-client/0.1"},  # never the registry's token
            transport=transport,
            follow_redirects=True,
        )

    def close(self) -> None:
        self._http.close()

    def _fetch(self, url: str) -> Iterator[bytes]:
        if not url.startswith(self.mirror_url):
            raise DownloadError(f"{url}: not a file of the metadata mirror {self.mirror_url}")
        name = url[len(self.mirror_url) :]
        why: str
        try:
            with self._http.stream("GET", url) as response:
                status = response.status_code
                if status < 400:
                    # (1): the mirror's bytes
                    self.sources[name] = self.mirror_url
                    started = False
                    try:
                        for chunk in response.iter_bytes(CHUNK):
                            started = True
                            yield chunk
                    except httpx.HTTPError as exc:
                        if started:
                            raise DownloadError(f"{url}: {type(exc).__name__}: {exc}") from exc
                        raise
                    return
                if status in (403, 404) and _ROOT_FILE.fullmatch(name):
                    # (2): no newer root
                    raise DownloadHTTPError(f"{url}: HTTP {status}", status)
                why = f"HTTP {status}"
        except httpx.HTTPError as exc:
            why = f"unreachable ({type(exc).__name__}: {exc})"
        # (3): the registry's file
        self.fallbacks.append(Fallback(name, why))
        self.sources[name] = self.fallback_url
        yield from self.fallback.fetch(self.fallback_url + name)
