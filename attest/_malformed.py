"""What third-party parsers raise on malformed untrusted bytes.

cryptography parses certificates lazily (a certificate that loads can still fail when its key,
subject or extensions are read), and several of its errors are not ``ValueError``s;
sigstore-python lets cryptography's and rfc3161-client's errors through. Every call into one
of those parsers with untrusted bytes catches ``MALFORMED`` and raises our own error naming
what was malformed (reliability campaign, docs/reliability.md F1-F3, F5).
"""

from __future__ import annotations

from typing import Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm

__all__ = ["MALFORMED", "describe"]

MALFORMED: Final[tuple[type[Exception], ...]] = (
    ValueError,
    TypeError,
    UnsupportedAlgorithm,
    x509.InvalidVersion,
    x509.DuplicateExtension,
    x509.ExtensionNotFound,
    x509.UnsupportedGeneralNameType,
    x509.AttributeNotFound,
)


def describe(exc: BaseException) -> str:
    """``Type: message`` of a parser's error, for our own error's message."""
    return f"{type(exc).__name__}: {exc}"
