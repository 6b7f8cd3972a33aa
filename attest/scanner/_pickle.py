"""Recognize a pickle stream by its opcodes, without ever loading it.

``pickletools.genops`` only decodes opcodes and their arguments; it never imports, calls
or builds anything. We walk a bounded prefix of the file and call it a pickle when opcodes
decode from offset 0 and the walk either reaches STOP (at least two opcodes) or runs
cleanly to the end of the prefix: then a PROTO header is enough (the opcode after it may
be longer than the prefix), and a bare stream needs 16 opcodes and an import.
Every protocol is covered: 2-5 open with PROTO (``0x80 n``), 0 and 1 are bare opcode
streams (``cos\\nsystem\\n...``).

A bare stream can hide behind a first argument longer than the prefix (``S'<70 KB>'\\n0``
then the payload). When the prefix walk runs out cleanly and decides nothing,
``probe_pickle_stream`` walks on through the stream itself, up to a byte limit.
"""

from __future__ import annotations

import io
import pickletools
import re
from dataclasses import dataclass
from typing import IO, cast

STRING_OPS = frozenset({
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
    "SHORT_BINUNICODE", "BINUNICODE8",
})
MAX_IMPORTS = 8
MIN_BARE_OPS = 16
IDENTIFIER = re.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+$")


@dataclass(frozen=True)
class PickleProbe:
    """What the opcode walk saw: protocol, the imports it names, whether it was complete."""

    protocol: int
    imports: tuple[str, ...]
    complete: bool

    @property
    def joblib(self) -> bool:
        """True when the stream imports joblib's array wrappers."""
        return any(name.startswith(("joblib.", "sklearn.externals.joblib"))
                   for name in self.imports)

    def describe(self) -> str:
        """A one-line reason naming the protocol and the first imports."""
        text = f"pickle stream (protocol {self.protocol})"
        if self.imports:
            shown = ", ".join(self.imports[:MAX_IMPORTS])
            more = "" if len(self.imports) <= MAX_IMPORTS else ", ..."
            text += f" importing {shown}{more}"
        return text


class _Exhausted(Exception):  # noqa: N818 - control flow, never escapes this module
    """The walk reached the end of the prefix without a decoding error."""


class _Prefix(io.BytesIO):
    """A prefix of a longer file: reading past its end raises ``_Exhausted``."""

    def read(self, size: int | None = -1) -> bytes:
        want = -1 if size is None else size
        data = super().read(want)
        if want > 0 and len(data) < want:
            raise _Exhausted
        return data

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(-1 if size is None else size)
        if not line.endswith(b"\n"):
            raise _Exhausted
        return line


class _Bounded:
    """A stream read from its current position; reading past ``limit`` bytes raises
    ``_Exhausted`` before anything is read, so a huge declared length allocates nothing."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream = stream
        self._left = limit

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self._left:
            raise _Exhausted
        data = self._stream.read(size)
        self._left -= len(data)
        return data

    def readline(self, size: int = -1) -> bytes:
        del size  # genops never bounds a line; our limit does
        line = self._stream.readline(self._left + 1)
        if len(line) > self._left:
            raise _Exhausted
        self._left -= len(line)
        return line


@dataclass(frozen=True)
class _Walk:
    count: int
    protocol: int
    imports: tuple[str, ...]
    complete: bool
    ran_out: bool  # reached the end of the bytes it was allowed to read, cleanly


def _walk(stream: io.BytesIO | _Bounded) -> _Walk | None:
    """Decode opcodes from the start of ``stream``; None on a decoding error."""
    count = 0
    protocol = 0
    imports: list[str] = []
    strings: list[str] = []
    complete = ran_out = False
    try:
        for opcode, arg, _pos in pickletools.genops(cast("IO[bytes]", stream)):
            count += 1
            if opcode.name == "PROTO" and isinstance(arg, int):
                protocol = arg
            elif opcode.name in {"GLOBAL", "INST"} and isinstance(arg, str):
                imports.append(arg.replace(" ", "."))
            elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                imports.append(f"{strings[-2]}.{strings[-1]}")
            elif opcode.name in STRING_OPS:
                strings.append(arg if isinstance(arg, str) else repr(arg))
                del strings[:-2]
            if opcode.name == "STOP":
                complete = True
    except _Exhausted:
        ran_out = True
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError):
        return None
    return _Walk(count, protocol, tuple(dict.fromkeys(imports)), complete, ran_out)


def _verdict(walk: _Walk | None) -> PickleProbe | None:
    if walk is None:
        return None
    if walk.ran_out:
        # a PROTO header, then bytes that decode to the end: a pickle, even if
        # its first argument runs past what we read. Without one, text can do that too
        # ("aaaa..." is a run of APPENDs): then insist on a long run and an import.
        if walk.protocol >= 2:
            return PickleProbe(walk.protocol, walk.imports, complete=False)
        if walk.count < MIN_BARE_OPS or not any(IDENTIFIER.match(n) for n in walk.imports):
            return None
    if walk.count < 2:
        return None
    return PickleProbe(walk.protocol, walk.imports, walk.complete)


def probe_pickle(data: bytes, *, truncated: bool) -> PickleProbe | None:
    """Return a probe if ``data`` (the file, or its prefix when ``truncated``) is a pickle."""
    if not data:
        return None
    return _verdict(_walk(_Prefix(data) if truncated else io.BytesIO(data)))


def probe_pickle_stream(prefix: bytes, stream: IO[bytes], limit: int) -> PickleProbe | None:
    """Walk on through ``stream`` when the walk over its ``prefix`` ran out and decided nothing.

    ``stream`` is positioned at the start of the data whose first bytes are ``prefix``; at
    most ``limit`` bytes are read from it, and only when the prefix walk ran out cleanly (a
    decoding error in the prefix is one in the stream too). Returns a probe if the longer
    walk shows a pickle, else None.
    """
    first = _walk(_Prefix(prefix)) if prefix else None
    if first is None or not first.ran_out:
        return None
    return _verdict(first) or _verdict(_walk(_Bounded(stream, limit)))
