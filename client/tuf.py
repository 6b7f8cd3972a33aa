"""``tuf.ngclient``'s transport to the registry: the client's connection pool, token and
limits (docs/tuf.md#workers).

A worker resolves aliases with python-tuf's ``Updater``; this fetcher is how that updater
reaches the registry, so the worker's token goes along and nothing but the registry is ever
fetched. It maps the client's errors onto python-tuf's: an HTTP error answer is a
``DownloadHTTPError`` with its status (the updater stops looking for newer roots at 404),
anything else a ``DownloadError``.
"""

from __future__ import annotations

from collections.abc import Iterator

from tuf.api.exceptions import DownloadError, DownloadHTTPError
from tuf.ngclient import FetcherInterface

from modelward.client.connection import Connection
from modelward.client.errors import APIError, RegistryClientError

__all__ = ["TUF_PATH", "TufFetcher"]

TUF_PATH = "/tuf/"
CHUNK = 64 * 1024


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
            raise DownloadHTTPError(str(exc), exc.status) from exc
        except RegistryClientError as exc:
            raise DownloadError(str(exc)) from exc
