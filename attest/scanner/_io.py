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
