"""Blob transfer: HEAD-first uploads, resumable upload sessions, verified Range-resumed downloads.

Uploads (``upload_file``):
  (1) HEAD /v1/blobs/{digest}: present with the right size -> nothing to send.
  (2) size <= chunk_threshold -> one streamed PUT /v1/blobs/{digest}?repository=ORG/NAME.
  (3) otherwise a resumable session: an id remembered in ``state_dir`` (keyed by digest) is
      resumed from GET /v1/uploads/{id}'s offset, else POST /v1/uploads {digest, size,
      repository} opens one; chunks of ``chunk_size`` are streamed from the file with PATCH +
      Upload-Offset; then commit.
Every upload names the repository it is for (``BlobSource.repository``): the registry charges
the bytes to that repository's quota and refuses an upload that names none.
Downloads (``download``): streamed into ``.<dest>.partial``, resumed with Range after a cut,
hashed while streaming, verified (size and digest) before the rename; a mismatch deletes it.
The size the manifest states bounds the download: a body that goes past it is cut off there
(nothing past it written or hashed) and one that ends short of it is refused, both with
``BlobIntegrityError``. Memory stays bounded by ``read_size`` (and the transport's own read,
64 KiB for httpx) whatever the server sends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from modelward.client.connection import Connection, TransferOptions
from modelward.client.errors import (
    APIError,
    BlobIntegrityError,
    NotFoundError,
    TransportError,
)

__all__ = ["BlobSource", "BlobTransfer"]

Progress = Callable[[int], None]


@dataclass(frozen=True)
class BlobSource:
    """A blob to upload: its digest, size, where its bytes are (a file or bytes in memory),
    and the repository it is for (``ORG/NAME``, keyword only): the registry charges it to that
    repository's quota as it is uploaded, and refuses an upload that names none."""

    digest: str
    size: int
    path: Path | None = None
    data: bytes | None = None
    repository: str = field(kw_only=True)


def _read_chunks(
    fh: BinaryIO, length: int, read_size: int, progress: Progress | None
) -> Iterator[bytes]:
    remaining = length
    while remaining > 0:
        block = fh.read(min(read_size, remaining))
        if not block:
            return  # file shrank: the server sees a short body and refuses it
        remaining -= len(block)
        yield block
        if progress is not None:
            progress(len(block))


class BlobTransfer:
    """Uploads and downloads blobs through a client's ``_request``/``_stream`` methods."""

    def __init__(self, client: Connection, options: TransferOptions) -> None:
        self._client = client
        self._options = options
        self._state_lock = threading.Lock()

    # -- queries ---------------------------------------------------------------------------
    def blob_size(self, digest: str) -> int | None:
        """Size of the stored blob per HEAD, or None when the registry does not have it."""
        try:
            response = self._client._request("HEAD", f"/v1/blobs/{digest}")
        except NotFoundError:
            return None
        return int(response.headers.get("content-length", "-1"))

    # -- uploads ---------------------------------------------------------------------------
    def upload_many(self, blobs: list[BlobSource], progress: Progress | None = None) -> list[bool]:
        """Upload every blob not already present, ``workers`` at a time; True where sent."""
        lock = threading.Lock()

        def locked(n: int) -> None:
            if progress is not None:
                with lock:
                    progress(n)

        if len(blobs) <= 1 or self._options.workers <= 1:
            return [self.upload(b, locked) for b in blobs]
        with ThreadPoolExecutor(max_workers=self._options.workers) as pool:
            return list(pool.map(lambda b: self.upload(b, locked), blobs))

    def upload(self, blob: BlobSource, progress: Progress | None = None) -> bool:
        """Upload one blob unless present; return True when bytes were sent."""
        # (1) HEAD: already there with the right size -> nothing to do.
        if self.blob_size(blob.digest) == blob.size:
            if progress is not None:
                progress(blob.size)
            return False
        # (2) small: one streamed PUT.
        if blob.data is not None or blob.size <= self._options.chunk_threshold:
            self._put_whole(blob, progress)
            return True
        # (3) large: a resumable session.
        self._upload_session(blob, progress)
        return True

    def _put_whole(self, blob: BlobSource, progress: Progress | None) -> None:
        headers = {"Content-Length": str(blob.size), "Content-Type": "application/octet-stream"}
        path = f"/v1/blobs/{blob.digest}"
        params = {"repository": blob.repository}
        if blob.data is not None:
            self._client._request("PUT", path, content=blob.data, headers=headers, params=params)
            if progress is not None:
                progress(len(blob.data))
            return
        assert blob.path is not None  # noqa: S101 - BlobSource carries one of path/data
        with blob.path.open("rb") as fh:
            body = _read_chunks(fh, blob.size, self._options.read_size, progress)
            self._client._request("PUT", path, content=body, headers=headers, params=params)

    def _state_file(self, digest: str) -> Path | None:
        if self._options.state_dir is None:
            return None
        return self._options.state_dir / "uploads" / f"{digest.replace(':', '-')}.json"

    def _load_session(self, digest: str) -> str | None:
        path = self._state_file(digest)
        if path is None or not path.exists():
            return None
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if state.get("url") != self._client.base_url or not isinstance(state.get("id"), str):
            return None
        return str(state["id"])

    def _save_session(self, digest: str, upload_id: str | None) -> None:
        path = self._state_file(digest)
        if path is None:
            return
        with self._state_lock:
            if upload_id is None:
                path.unlink(missing_ok=True)
                return
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"url": self._client.base_url, "id": upload_id}))
            tmp.replace(path)

    def _open_session(self, blob: BlobSource) -> tuple[str, int]:
        upload_id = self._load_session(blob.digest)
        if upload_id is not None:
            try:
                state = self._client._request("GET", f"/v1/uploads/{upload_id}").json()
                return upload_id, int(state["offset"])
            except NotFoundError:
                self._save_session(blob.digest, None)
        body = {"digest": blob.digest, "size": blob.size, "repository": blob.repository}
        created = self._client._request("POST", "/v1/uploads", json_body=body).json()
        upload_id = str(created["id"])
        self._save_session(blob.digest, upload_id)
        return upload_id, int(created.get("offset", 0))

    def _upload_session(self, blob: BlobSource, progress: Progress | None) -> None:
        assert blob.path is not None  # noqa: S101 - large blobs always come from files
        upload_id, offset = self._open_session(blob)
        if progress is not None and offset:
            progress(offset)
        failures = 0
        with blob.path.open("rb") as fh:
            while offset < blob.size:
                length = min(self._options.chunk_size, blob.size - offset)
                fh.seek(offset)
                body = _read_chunks(fh, length, self._options.read_size, progress)
                headers = {
                    "Upload-Offset": str(offset),
                    "Content-Length": str(length),
                    "Content-Type": "application/octet-stream",
                }
                try:
                    answer = self._client._request(
                        "PATCH", f"/v1/uploads/{upload_id}", content=body, headers=headers
                    ).json()
                except (TransportError, APIError) as exc:
                    # A cut connection, or the server holds another offset (an earlier chunk
                    # landed after all): ask where the session stands and go on from there.
                    failures += 1
                    resumable = isinstance(exc, TransportError) or exc.status in (409, 416)
                    if not resumable or failures > self._options.max_retries:
                        raise
                    time.sleep(self._options.retry_backoff * 2 ** (failures - 1))
                    with contextlib.suppress(TransportError):
                        path = f"/v1/uploads/{upload_id}"
                        offset = int(self._client._request("GET", path).json()["offset"])
                    continue
                offset = int(answer["offset"])
        try:
            self._client._request("POST", f"/v1/uploads/{upload_id}/commit")
        except APIError:
            self._save_session(blob.digest, None)
            raise
        self._save_session(blob.digest, None)

    # -- downloads -------------------------------------------------------------------------
    def download(
        self,
        digest: str,
        dest: Path,
        *,
        expected_size: int,
        progress: Progress | None = None,
    ) -> Path:
        """Stream a blob of ``expected_size`` bytes to ``dest`` (Range-resumed, hashed,
        verified before the rename); see ``RegistryClient.download_blob`` for what it raises.
        """
        partial = dest.with_name(f".{dest.name}.partial")
        try:
            # (1) stream into the partial file, resumed after a cut, never past the size.
            hasher, have = self._download_into(digest, partial, expected_size, progress)
            # (2) verify size and digest before the blob becomes visible under its name.
            _check_complete(digest, hasher, have, expected_size)
        except BlobIntegrityError:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(dest)
        return dest

    def _download_into(
        self, digest: str, partial: Path, expected_size: int, progress: Progress | None
    ) -> tuple[Any, int]:
        attempts = 0
        while True:
            # resume: re-hash whatever an earlier attempt kept, then ask for the rest.
            hasher, have = self._rehash(partial, expected_size)
            if have == expected_size and partial.exists():
                return hasher, have
            try:
                return self._fetch_into(
                    digest, partial, hasher, have, expected_size=expected_size, progress=progress
                )
            except TransportError:
                attempts += 1
                if attempts > self._options.max_retries:
                    raise

    def _rehash(self, partial: Path, expected_size: int) -> tuple[Any, int]:
        hasher = hashlib.sha256()
        have = 0
        if partial.exists():
            with partial.open("rb") as fh:
                for block in iter(lambda: fh.read(self._options.read_size), b""):
                    hasher.update(block)
                    have += len(block)
            if have > expected_size:
                partial.unlink()
                return hashlib.sha256(), 0
        return hasher, have

    def _fetch_into(
        self,
        digest: str,
        partial: Path,
        hasher: Any,
        have: int,
        *,
        expected_size: int,
        progress: Progress | None,
    ) -> tuple[Any, int]:
        """Append the rest of the blob to ``partial``, never past ``expected_size`` bytes.

        Raises ``BlobIntegrityError`` (``actual=None``) as soon as the server sends (or
        declares) more than that, before a byte past it is written.
        """
        headers = {"Range": f"bytes={have}-"} if have else {}
        with self._client._stream("GET", f"/v1/blobs/{digest}", headers=headers) as response:
            if have and response.status_code != 206:  # server ignored Range: start over
                hasher, have = hashlib.sha256(), 0
                mode = "wb"
            else:
                mode = "ab" if have else "wb"
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and have + int(declared) > expected_size:
                raise BlobIntegrityError(digest, None, have + int(declared), expected_size)
            read_size = self._options.read_size
            reported = have  # progress is told every read_size bytes, and of the rest at the end
            with partial.open(mode) as out:
                try:
                    for block in _raw_blocks(response, read_size):
                        if have + len(block) > expected_size:
                            raise BlobIntegrityError(digest, None, have + len(block), expected_size)
                        out.write(block)
                        hasher.update(block)
                        have += len(block)
                        if progress is not None and have - reported >= read_size:
                            progress(have - reported)
                            reported = have
                except httpx.HTTPError as exc:
                    out.flush()
                    raise TransportError(f"download of {digest} cut short: {exc}") from exc
                finally:
                    if progress is not None and have > reported:
                        progress(have - reported)  # written bytes only, never past the size
        return hasher, have


def _raw_blocks(response: httpx.Response, read_size: int) -> Iterator[memoryview]:
    """The body's raw bytes as sent (the client asks for identity: nothing is decompressed),
    in the pieces the transport read, each cut to at most ``read_size`` bytes.

    Not ``iter_raw(read_size)``: that re-chunks through a buffer and copies every byte
    about three times (docs/performance.md#pull); a memoryview slice copies nothing.
    """
    for raw in response.iter_raw():
        view = memoryview(raw)
        for start in range(0, len(view), read_size):
            yield view[start : start + read_size]


def _check_complete(digest: str, hasher: Any, have: int, expected_size: int) -> None:
    """Raise ``BlobIntegrityError`` unless exactly ``expected_size`` bytes hashing to
    ``digest`` arrived."""
    actual = "sha256:" + hasher.hexdigest()
    if actual != digest or have != expected_size:
        raise BlobIntegrityError(digest, actual, have, expected_size)
