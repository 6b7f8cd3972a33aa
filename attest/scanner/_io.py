"""Bounded reads from a seekable binary stream."""

from __future__ import annotations

from typing import BinaryIO


def read_at(stream: BinaryIO, offset: int, count: int) -> bytes:
    """Read up to ``count`` bytes at ``offset``; fewer only at end of stream."""
    stream.seek(offset)
    chunks: list[bytes] = []
    left = count
    while left > 0:
        chunk = stream.read(min(left, 8 * 2**20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice."""


def reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` for json: an object must not repeat a key."""
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKeyError(f"duplicate key {key!r}")
        result[key] = value
    return result
