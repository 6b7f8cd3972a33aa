"""Numbers the registry reads from request headers, parsed strictly and bounded.

A header is attacker-chosen text; Python's ``int()`` on it accepts Unicode digits, ``_``
separators and surrounding spaces, and raises ValueError past 4300 digits, which surfaces as a
500. Every number a handler reads from a header (``Content-Length``, ``Range``) goes through
``decimal``: ASCII digits only, and never converted beyond ``MAX_DIGITS`` significant digits
— a longer number *saturates* at ``SATURATED`` (2^63), above every limit and every size the
registry stores, so comparisons stay right (a first byte past the end, a body above the limit)
without reading it. Whatever is not a number is ``InvalidHeader`` (400 ``invalid_header``,
naming the header). Path, query and JSON numbers are pydantic's, each with explicit bounds in
its endpoint (422 ``invalid_request``).
"""

from __future__ import annotations

import re

from modelward.registry.errors import BadRequest

__all__ = ["MAX_DIGITS", "SATURATED", "InvalidHeader", "decimal", "header_decimal"]

MAX_DIGITS = 19  # 2**63 - 1 has 19 digits
SATURATED = 2**63
_DIGITS = re.compile(r"[0-9]+")


class InvalidHeader(BadRequest):
    """400: a header that should hold a number does not."""

    code = "invalid_header"


def decimal(text: str) -> int | None:
    """``text`` (ASCII digits, nothing else) as an int saturating at ``SATURATED``; None when
    it is not such a number."""
    if not _DIGITS.fullmatch(text):
        return None
    significant = text.lstrip("0")
    if len(significant) > MAX_DIGITS:
        return SATURATED
    return min(int(significant or "0"), SATURATED)


def header_decimal(name: str, value: str) -> int:
    """The number in header ``name`` (surrounding spaces allowed, as HTTP allows); raises
    InvalidHeader naming the header."""
    number = decimal(value.strip(" \t"))
    if number is None:
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise InvalidHeader(
            f"{name}: {shown!r} is not a non-negative decimal number", detail={"header": name}
        )
    return number
