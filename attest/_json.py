"""The one ``object_pairs_hook`` that refuses a JSON object naming a key twice (manifests,
statements and envelopes, scanned headers and configs): a parser must never pick one of
two values silently."""

from __future__ import annotations

from typing import Any

__all__ = ["DuplicateKeyError", "reject_duplicates"]


class DuplicateKeyError(ValueError):
    """A JSON object names the same key twice; ``key`` is that key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for json: an object must not repeat a key (DuplicateKeyError)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKeyError(key)
        result[key] = value
    return result
