"""``tuf.ngclient``'s transports: to the registry (the client's connection pool, token and
limits), and to an untrusted metadata mirror with the registry behind it
(docs/tuf.md#workers, docs/tuf.md#mirrors).

A worker resolves aliases with python-tuf's ``Updater``; a fetcher is how that updater
reaches the files. ``TufFetcher`` sends the worker's token and fetches nothing but the
registry. ``MirrorFetcher`` reads a static mirror first (never sending the token) and the
registry's ``/tuf/`` when the mirror cannot answer, and the root chain from the registry
only. Fetching one file, from either, is one
operation with a deadline for the whole of it (``FetchLimits``, passed in): a peer that drips
bytes is cut off there, not only a peer that stops. Errors map onto python-tuf's: an HTTP
error answer is a ``DownloadHTTPError`` with its status (the updater stops looking for newer
roots at 404), no answer from the registry a ``MetadataUnavailable`` (a ``DownloadError``,
and the client's ``TransportError``: one line, exit 3). Neither trusts a byte: the updater
verifies everything from the pinned root.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
from tuf.api.exceptions import DownloadError, DownloadHTTPError, DownloadLengthMismatchError
from tuf.ngclient import FetcherInterface

from modelward.client.connection import Connection
from modelward.client.deadline import bounded, deadline
from modelward.client.errors import APIError, RegistryClientError, TransportError

__all__ = [
    "TUF_PATH",
    "Fallback",
    "FetchLimits",
    "MetadataNotServed",
    "MetadataTooLarge",
    "MetadataUnavailable",
    "MirrorFetcher",
    "TufFetcher",
]

TUF_PATH = "/tuf/"
CHUNK = 64 * 1024
# a versioned root: what the updater asks for next (N+1) until the registry says there is none
_ROOT_FILE = re.compile(r"[0-9]+\.root\.json")


@dataclass(frozen=True)
class FetchLimits:
    """How long fetching one metadata file may take, in seconds (docs/tuf.md#mirrors).

    ``file``: the whole fetch of one file (connect, headers, every byte), from the mirror
    and again from the registry when the mirror could not answer; ``read``: any one read;
    ``connect``: opening a connection to the mirror. Sizes are the updater's
    (``tuf.ngclient.UpdaterConfig``): the fetcher is told each file's bound.
    """

    file: float = 30.0
    read: float = 10.0
    connect: float = 5.0


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


class MetadataUnavailable(TransportError, DownloadError):  # noqa: N818 - the outcome
    """The registry did not answer a metadata file (unreachable, or not within the fetch's
    deadline): python-tuf's ``DownloadError`` for the updater, and the client's
    ``TransportError``, so a command says it in one line (exit 3), no traceback."""


class MetadataTooLarge(RegistryClientError, DownloadLengthMismatchError):  # noqa: N818
    """The registry answered a metadata file with more bytes than the updater allows it:
    python-tuf's ``DownloadLengthMismatchError``, and one of our errors (exit 1, no
    traceback)."""


class TufFetcher(FetcherInterface):
    """Fetches the registry's ``/tuf/`` files through ``client``, each within
    ``limits.file`` seconds (and the client's own bounds)."""

    def __init__(self, client: Connection, *, limits: FetchLimits = FetchLimits()) -> None:
        self.client = client
        self.limits = limits
        self.metadata_url = client.base_url + TUF_PATH

    def _fetch(self, url: str) -> Iterator[bytes]:
        if not url.startswith(self.metadata_url):
            raise DownloadError(f"{url}: not a TUF file of the registry {self.client.base_url}")
        path = url[len(self.client.base_url) :]
        try:
            with deadline(self.limits.file), self.client._stream("GET", path) as response:
                yield from response.iter_raw(CHUNK)
        except APIError as exc:
            if exc.status == 404:
                raise MetadataNotServed(path[len(TUF_PATH) :], str(exc)) from exc
            raise DownloadHTTPError(str(exc), exc.status) from exc
        except RegistryClientError as exc:
            raise MetadataUnavailable(
                f"the registry did not answer the TUF metadata file {path[len(TUF_PATH) :]} "
                f"(each has {self.limits.file:g} s): {exc}"
            ) from exc

    def download_bytes(self, url: str, max_length: int) -> bytes:
        try:
            return super().download_bytes(url, max_length)
        except DownloadLengthMismatchError as exc:
            if isinstance(exc, RegistryClientError):
                raise
            raise MetadataTooLarge(
                f"the registry answered the TUF metadata file {url[len(self.metadata_url) :]} "
                f"with more than the {max_length} bytes it may have: refused"
            ) from exc


@dataclass(frozen=True)
class Fallback:
    """A file read from the registry because the mirror could not answer it."""

    name: str
    why: str  # "HTTP 503", "unreachable (ConnectError: ...)"


class _NoAnswer(Exception):  # noqa: N818 - an outcome, never raised out of this module
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class MirrorFetcher(FetcherInterface):
    """Fetches TUF files from the mirror at ``mirror_url``, else through ``fallback`` (the
    registry's ``TufFetcher``) at ``fallback_url``, file by file, each whole file read
    before it is handed on (bytes are never spliced from two sources):

    1. a root version (``N.root.json``) is never asked of the mirror: the root chain comes
       from the registry only, whose 404 is "no newer root" and whose silence is an error
       (``MetadataUnavailable``), never "no newer root". A mirror that answered 404 for the
       next root could otherwise hide a new root from a worker pinned to an older one, and
       serve it metadata signed by the keys that root retired (docs/tuf.md#mirrors);
    2. the mirror answers 2xx with at most the file's bound in bytes, within ``limits.file``
       seconds: its bytes, which the updater verifies (a failure is refused, never read
       again from the registry);
    3. the mirror could not answer: unreachable, an HTTP error (404, 403, 5xx ...), more
       bytes than the file's bound, cut off, or not within ``limits.file`` (a mirror that
       drips): the registry's file, within ``limits.file`` too, recorded in ``fallbacks``.
       After a mirror timed out, the rest of this fetcher's files (one update) are read
       from the registry at once: one wait per update, not one per file.

    ``sources`` records where each file of (2) and (3) came from (name -> base URL), for
    messages; ``roots`` the root versions asked of the registry (1). The updater calls
    ``download_bytes`` (a file with its bound); ``fetch`` is not offered.
    """

    def __init__(
        self,
        mirror_url: str,
        fallback: FetcherInterface,
        fallback_url: str,
        *,
        limits: FetchLimits = FetchLimits(),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.mirror_url = mirror_url.rstrip("/") + "/"
        self.fallback = fallback
        self.fallback_url = fallback_url.rstrip("/") + "/"
        self.limits = limits
        self.fallbacks: list[Fallback] = []
        self.sources: dict[str, str] = {}
        self.roots: list[str] = []
        self._timed_out: str | None = None  # why the mirror is not asked again
        self._http = bounded(
            httpx.Client(
                timeout=httpx.Timeout(limits.read, connect=min(limits.read, limits.connect)),
                headers={"User-Agent": "modelward-client/0.1"},  # never the registry's token
                transport=transport,
                follow_redirects=True,
            )
        )

    def close(self) -> None:
        self._http.close()

    def _fetch(self, url: str) -> Iterator[bytes]:
        raise DownloadError(
            f"{url}: the metadata mirror's fetcher reads whole files with their bound "
            "(download_bytes), so that it can fall back to the registry"
        )

    def download_bytes(self, url: str, max_length: int) -> bytes:
        if not url.startswith(self.mirror_url):
            raise DownloadError(f"{url}: not a file of the metadata mirror {self.mirror_url}")
        name = url[len(self.mirror_url) :]
        if _ROOT_FILE.fullmatch(name):  # (1): the root chain, from the registry only
            self.roots.append(name)
            with deadline(self.limits.file):
                return self.fallback.download_bytes(self.fallback_url + name, max_length)
        why = self._timed_out
        if why is None:
            try:
                data = self._from_mirror(url, name, max_length)  # (2)
            except _NoAnswer as exc:
                why = exc.why
            else:
                self.sources[name] = self.mirror_url
                return data
        # (3): the registry's file
        self.fallbacks.append(Fallback(name, why))
        self.sources[name] = self.fallback_url
        with deadline(self.limits.file):
            return self.fallback.download_bytes(self.fallback_url + name, max_length)

    def _from_mirror(self, url: str, name: str, max_length: int) -> bytes:
        """The mirror's bytes for ``name``; ``_NoAnswer`` (why) when it could not answer."""
        try:
            with deadline(self.limits.file), self._http.stream("GET", url) as response:
                status = response.status_code
                if status >= 400:
                    raise _NoAnswer(f"HTTP {status}")
                return _at_most(response, max_length)
        except httpx.TimeoutException as exc:
            self._timed_out = f"it did not answer {name} within {self.limits.file:g} s"
            raise _NoAnswer(f"timed out: no whole answer within {self.limits.file:g} s") from exc
        except httpx.HTTPError as exc:
            raise _NoAnswer(f"unreachable ({type(exc).__name__}: {exc})") from exc


def _at_most(response: httpx.Response, max_length: int) -> bytes:
    """The body of ``response``, or ``_NoAnswer`` as soon as it is longer than
    ``max_length`` (declared or sent)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_length:
        raise _NoAnswer(f"{declared} bytes, more than the {max_length} the file may have")
    body = bytearray()
    for chunk in response.iter_bytes(CHUNK):
        body += chunk
        if len(body) > max_length:
            raise _NoAnswer(f"more than the {max_length} bytes the file may have")
    return bytes(body)
