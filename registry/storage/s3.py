"""Blob store on S3 (or any S3-compatible server) through boto3.

Endpoint and credentials come from the standard AWS settings (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID`` ...) unless ``endpoint_url`` is given. A blob is written as a multipart
upload straight to its final key and completed only when size and digest match; otherwise the
upload is aborted, so a half-written or wrong blob is never visible.
"""

from __future__ import annotations

import contextlib
import io
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO, cast

from modelward.registry.storage import StoredObject, StreamCheck

__all__ = ["S3Store"]

PART_SIZE = 16 * 2**20
READ_CHUNK = 1 << 20


class _RangeReader(io.RawIOBase):
    """A seekable reader over one object: each read is a ranged GET (the scanner seeks)."""

    def __init__(self, s3: Any, bucket: str, key: str, size: int) -> None:
        self._s3, self._bucket, self._key, self._size = s3, bucket, key, size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self._size or len(buffer) == 0:
            return 0
        last = min(self._size, self._pos + len(buffer)) - 1
        body = self._s3.get_object(
            Bucket=self._bucket, Key=self._key, Range=f"bytes={self._pos}-{last}"
        )["Body"]
        data = body.read()
        body.close()
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


class S3Store:
    """``<prefix>/blobs/sha256/<hex>``; upload-session parts under ``<prefix>/_uploads/``."""

    def __init__(self, bucket: str, prefix: str, *, endpoint_url: str | None = None) -> None:
        import boto3

        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self._s3: Any = boto3.client("s3", endpoint_url=endpoint_url)

    @property
    def client(self) -> Any:
        """The boto3 client (endpoint and credentials as configured): the TUF metadata
        mirror writes ``<prefix>/tuf/`` of the same bucket with it (tuf/mirror_files.py)."""
        return self._s3

    def _key(self, digest: str) -> str:
        return f"{self.prefix}blobs/sha256/{digest.removeprefix('sha256:')}"

    def _part_key(self, upload_id: str, part: str) -> str:
        return f"{self.prefix}_uploads/{upload_id}/{part}"

    def size(self, digest: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            head = self._s3.head_object(Bucket=self.bucket, Key=self._key(digest))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return int(head["ContentLength"])

    def _upload_checked(self, key: str, check: StreamCheck, chunks: Iterable[bytes]) -> None:
        upload = self._s3.create_multipart_upload(Bucket=self.bucket, Key=key)
        upload_id = upload["UploadId"]
        parts: list[dict[str, Any]] = []
        buffer = bytearray()
        try:
            for chunk in chunks:
                check.feed(chunk)
                buffer += chunk
                while len(buffer) >= PART_SIZE:
                    self._send_part(key, upload_id, parts, bytes(buffer[:PART_SIZE]))
                    del buffer[:PART_SIZE]
            check.finish()
            if buffer or not parts:
                self._send_part(key, upload_id, parts, bytes(buffer))
            self._s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except BaseException:
            with contextlib.suppress(Exception):
                self._s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            raise

    def _send_part(
        self, key: str, upload_id: str, parts: list[dict[str, Any]], data: bytes
    ) -> None:
        number = len(parts) + 1
        reply = self._s3.upload_part(
            Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
        )
        parts.append({"PartNumber": number, "ETag": reply["ETag"]})

    def put_verified(self, digest: str, size: int, chunks: Iterable[bytes]) -> None:
        self._upload_checked(self._key(digest), StreamCheck(digest, size), chunks)

    def _stream(self, key: str, range_header: str | None = None) -> Iterator[bytes]:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if range_header:
            kwargs["Range"] = range_header
        body = self._s3.get_object(**kwargs)["Body"]
        try:
            while chunk := body.read(READ_CHUNK):
                yield chunk
        finally:
            body.close()

    def read(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        if end is not None and end <= start:
            return iter(())
        rng = None
        if start or end is not None:
            rng = f"bytes={start}-{'' if end is None else end - 1}"
        return self._stream(self._key(digest), rng)

    @contextlib.contextmanager
    def open(self, digest: str) -> Iterator[BinaryIO]:
        size = self.size(digest)
        if size is None:
            raise FileNotFoundError(digest)
        raw = _RangeReader(self._s3, self.bucket, self._key(digest), size)
        reader = io.BufferedReader(raw, buffer_size=READ_CHUNK)
        try:
            yield cast(BinaryIO, reader)
        finally:
            reader.close()

    @contextlib.contextmanager
    def chunk_lock(self, upload_id: str) -> Iterator[bool]:
        """Always held: each chunk is its own object (a random part name), so a racing chunk
        never overwrites another; the loser's object is dropped (``discard_part``)."""
        yield True

    def put_part(self, upload_id: str, part: str, size: int, chunks: Iterable[bytes]) -> None:
        self._upload_checked(self._part_key(upload_id, part), StreamCheck(None, size), chunks)

    def discard_part(self, upload_id: str, part: str) -> None:
        self._s3.delete_object(Bucket=self.bucket, Key=self._part_key(upload_id, part))

    def assemble(self, upload_id: str, parts: Sequence[str], digest: str, size: int) -> None:
        """Stream the parts in order through the verified write, then delete them; when the
        blob is stored already, the parts are hashed all the same (they must be its bytes)."""
        chunks = itertools.chain.from_iterable(
            self._stream(self._part_key(upload_id, p)) for p in parts
        )
        if self.size(digest) != size:
            self.put_verified(digest, size, chunks)
        else:  # the same blob put meanwhile: check, keep the stored copy
            check = StreamCheck(digest, size)
            for chunk in chunks:
                check.feed(chunk)
            check.finish()
        self.delete_upload(upload_id, parts)

    def delete_upload(self, upload_id: str, parts: Iterable[str]) -> None:
        for part in parts:
            self._s3.delete_object(Bucket=self.bucket, Key=self._part_key(upload_id, part))

    def delete(self, digest: str) -> None:
        self._s3.delete_object(Bucket=self.bucket, Key=self._key(digest))

    def _listed(self, prefix: str) -> Iterator[dict[str, Any]]:
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        for page in pages:
            yield from page.get("Contents", [])

    def stored_blobs(self) -> Iterator[StoredObject]:
        prefix = f"{self.prefix}blobs/sha256/"
        for item in self._listed(prefix):
            hexd = item["Key"].removeprefix(prefix)
            if "/" not in hexd:
                yield StoredObject(
                    f"sha256:{hexd}", int(item["Size"]), item["LastModified"].timestamp()
                )

    def stored_uploads(self) -> Iterator[StoredObject]:
        prefix = f"{self.prefix}_uploads/"
        sessions: dict[str, StoredObject] = {}
        for item in self._listed(prefix):
            upload_id = item["Key"].removeprefix(prefix).split("/", 1)[0]
            seen = sessions.get(upload_id, StoredObject(upload_id, 0, 0.0))
            sessions[upload_id] = StoredObject(
                upload_id,
                seen.size + int(item["Size"]),
                max(seen.modified, item["LastModified"].timestamp()),
            )
        yield from sessions.values()

    def purge_upload(self, upload_id: str) -> None:
        for item in self._listed(f"{self.prefix}_uploads/{upload_id}/"):
            self._s3.delete_object(Bucket=self.bucket, Key=item["Key"])

    def presign(self, digest: str, expires: int) -> str | None:
        url = self._s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self._key(digest)},
            ExpiresIn=expires,
        )
        return str(url)

    def check(self) -> None:
        self._s3.head_bucket(Bucket=self.bucket)
