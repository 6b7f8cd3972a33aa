"""Request bodies as sync iterators (for stores running in the threadpool), and Range parsing.

Header numbers go through ``registry.domains._numbers`` (ASCII digits, saturating): an absurd
``Content-Length`` or ``Range`` is a 400, 413 or 416 naming the header, never a 500."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator

import anyio.from_thread
from fastapi import Request
from starlette.requests import ClientDisconnect

from modelward.registry.domains._numbers import SATURATED, decimal, header_decimal
from modelward.registry.errors import BadRequest, PayloadTooLarge, RegistryError, TruncatedBody

__all__ = ["DIGEST_RE", "body_chunks", "check_digest", "declared_length", "parse_range"]

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
BATCH_BYTES = 1 << 20  # body bytes gathered per thread-to-event-loop hop
_RANGE_RE = re.compile(r"bytes=([0-9]*)-([0-9]*)")


class RangeNotSatisfiable(RegistryError):  # noqa: N818 - the HTTP outcome
    status = 416
    code = "range_not_satisfiable"


def check_digest(digest: str) -> str:
    if not DIGEST_RE.fullmatch(digest):
        raise BadRequest(
            f"invalid digest {digest!r}: expected sha256:<64 lowercase hex>", code="invalid_digest"
        )
    return digest


def declared_length(request: Request, limit: int) -> int:
    """The Content-Length (required: 400 ``length_required``; a non-number: 400
    ``invalid_header``), refused with 413 above ``limit``."""
    raw = request.headers.get("content-length")
    if raw is None:
        raise BadRequest("Content-Length is required", code="length_required")
    length = header_decimal("Content-Length", raw)
    if length > limit:
        shown = "more than 2^63" if length >= SATURATED else str(length)
        raise PayloadTooLarge(
            f"Content-Length: body of {shown} bytes exceeds the limit of {limit} bytes",
            detail={"header": "Content-Length", "size": min(length, SATURATED), "limit": limit},
        )
    return length


async def _gather(stream: AsyncIterator[bytes], target: int) -> tuple[bytes, bool]:
    """Up to about ``target`` bytes of the body (one server chunk past it at most), and
    whether the body ended."""
    parts: list[bytes] = []
    size = 0
    while size < target:
        try:
            chunk = await stream.__anext__()
        except StopAsyncIteration:
            return b"".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts), False


def body_chunks(request: Request, batch: int = BATCH_BYTES) -> Iterator[bytes]:
    """Iterate the request body from a worker thread; a disconnect is a truncated body.

    The server hands the body over in small pieces (64 KiB); each hop from the thread to
    the event loop gathers about ``batch`` bytes of them, so a large upload costs one hop
    per MiB rather than one per piece. Memory stays about ``batch`` per request.
    """
    stream = request.stream()
    ended = False
    while not ended:
        try:
            data, ended = anyio.from_thread.run(_gather, stream, batch)
        except ClientDisconnect as exc:
            raise TruncatedBody("the client disconnected before sending the whole body") from exc
        if data:
            yield data


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end_exclusive)`` for a single ``bytes=`` range, None for the whole blob.

    Positions of any length are compared, never converted past 19 digits (``decimal``
    saturates): a first byte past the end is 416, a last byte past it means the end.
    """
    if header is None:
        return None
    match = _RANGE_RE.fullmatch(header.strip())
    if match is None or (not match.group(1) and not match.group(2)):
        raise RangeNotSatisfiable(
            f"Range: unsupported {_shown(header)} (one bytes= range only)",
            detail={"header": "Range", "size": size},
        )
    first, last = decimal(match.group(1)), decimal(match.group(2))
    if first is None:  # suffix range: the last N bytes
        assert last is not None  # noqa: S101 - the regex and the check above
        start, end = max(0, size - last), size
    else:
        start = first
        end = size if last is None else min(size, last + 1)
    if start >= size or start >= end:
        raise RangeNotSatisfiable(
            f"Range: {_shown(header)} is outside the blob of {size} bytes",
            detail={"header": "Range", "size": size},
        )
    return start, end


def _shown(header: str) -> str:
    return repr(header if len(header) <= 60 else header[:60] + "...")
