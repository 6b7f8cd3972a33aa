"""Recognize a pickle stream by its opcodes, without ever loading it.

``pickletools.genops`` only decodes opcodes and their arguments; it never imports, calls
or builds anything. We walk a bounded prefix of the file and call it a pickle when at least
two opcodes decode from offset 0 and the walk either reaches STOP or runs cleanly to the
end of the prefix (then after a PROTO header, or 16 opcodes and an import). Every protocol is
covered: 2-5 open with PROTO (``0x80 n``), 0 and 1 are bare opcode streams (``cos\\nsystem\\n...``).
"""

from __future__ import annotations

import io
import pickletools
import re
from dataclasses import dataclass

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


def probe_pickle(data: bytes, *, truncated: bool) -> PickleProbe | None:
    """Return a probe if ``data`` (the file, or its prefix when ``truncated``) is a pickle."""
    if not data:
        return None
    stream: io.BytesIO = _Prefix(data) if truncated else io.BytesIO(data)
    count = 0
    protocol = 0
    imports: list[str] = []
    strings: list[str] = []
    complete = False
    try:
        for opcode, arg, _pos in pickletools.genops(stream):
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
        # ran cleanly to the end of the prefix: without a PROTO header, text can do that
        # too ("aaaa..." is a run of APPENDs); then insist on a long run and an import
        if protocol < 2 and (count < MIN_BARE_OPS
                             or not any(IDENTIFIER.match(name) for name in imports)):
            return None
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError):
        return None
    if count < 2:
        return None
    return PickleProbe(protocol, tuple(dict.fromkeys(imports)), complete)
