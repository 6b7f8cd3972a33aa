"""Findings the campaigns already found and docs/reliability.md writes up, not yet fixed.

Matched by exception type, file and function (not line: the files keep changing). The
campaigns still report every one of them; only the smoke tests in ``make test`` treat a
known finding as an expected failure (``xfail``) instead of a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KNOWN", "Known", "known_for"]


@dataclass(frozen=True)
class Known:
    ref: str  # the finding's heading in docs/reliability.md
    exception: str  # exact qualified name
    file: str
    function: str

    def matches(self, signature: str) -> bool:
        # a signature reads "EXCEPTION at FILE:LINE FUNCTION"
        exception, _, where = signature.partition(" at ")
        file_line, _, function = where.partition(" ")
        return (
            exception == self.exception
            and file_line.rsplit(":", 1)[0] == self.file
            and function == self.function
        )


# F1, F2, F3 and F5 were fixed in 2ece83e (their inputs in reliability/findings/ are now
# regression tests); nothing the fuzzers found is open.
KNOWN: tuple[Known, ...] = ()


def known_for(signature: str) -> Known | None:
    """The write-up of a known finding with this signature, if there is one."""
    return next((k for k in KNOWN if k.matches(signature)), None)
