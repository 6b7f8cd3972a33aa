"""Decide whether bytes are a pickle the way CPython's own unpicklers would read them.

The question is never "do these bytes look like a pickle" but "would ``pickle.load`` (the C
``_pickle.Unpickler``: ``pickle.load``, ``torch.load``, ``numpy.load``) or the pure-Python
``pickle._Unpickler`` (``joblib.load``) run them". An opcode walk of our own answered the
first question and disagreed with the unpicklers: ``I0x0\\n`` is an integer to both (they
parse with base 0) and an error to ``pickletools.genops`` (base 10), so
``cos\\ngetcwd\\n(I0x0\\n0tR.`` ran under ``torch.load`` and was admitted as text.

Why the real unpicklers are not simply run on the bytes, with ``find_class`` refusing:
nothing else in them can start code (see below), but they are not bounded. ``Np20000000\\n``
(12 bytes) makes ``_pickle`` allocate and zero a 160 MB memo table; ``BYTEARRAY8`` makes
``pickle.py`` allocate its declared length up front; a dict key that is a tuple of tuples
shared through the memo costs 4**depth to hash in both (13 levels, 177 bytes: 0.25 s; 20
levels: hours). So ``judge_pickle`` runs a *model* of both unpicklers instead, written from
``Lib/pickle.py`` and ``Modules/_pickle.c`` of CPython 3.11:

1. the same opcodes, read from the same bytes the same way (lines, counted arguments, frames);
2. each line argument is decoded by the real unpicklers themselves, one opcode at a time
   (``_pickle.loads(b"I" + line + b".")`` and ``pickle._loads(...)``: a lone value and STOP,
   nothing else can run). The model follows both: a stream one of them accepts stays
   alive (``_pickle`` reads ``I010`` as 8, ``pickle.py`` refuses it; ``F1_0`` the reverse);
3. values are abstract: nothing is built, hashed or called. The model keeps the stack, the
   marks and the memo and fails only where *both* unpicklers fail whatever the values are
   (stack underflow, no MARK, a memo index never stored, an argument neither decodes, an
   unknown opcode). A type error is never assumed, so every stream either unpickler accepts,
   the model accepts too (tests/attest/test_scanner_pickle_differential.py holds it to that);
4. it is bounded: at most ``ScanLimits.max_pickle_walk`` bytes and ``max_pickle_ops``
   opcodes; every opcode adds at most one stack or memo cell; no argument longer than
   ``DECODE_LIMIT`` is held (it is skipped and assumed valid).

Only ``find_class`` hands the unpickler something it can call. REDUCE, BUILD (``__setstate__``),
NEWOBJ, NEWOBJ_EX, OBJ and INST call an object from the stack, and the stack holds only what
opcodes pushed: None, booleans, numbers, str, bytes, bytearray, tuples, lists, dicts, sets,
buffers (none callable, none with ``__setstate__``), plus what ``find_class`` returned (GLOBAL,
INST, STACK_GLOBAL, and EXT1/2/4 through ``copyreg._inverted_registry``) or the loader's own
``persistent_load`` returned (PERSID, BINPERSID). So, verdicts, in the order they are checked:

1. ``import``: GLOBAL, INST, STACK_GLOBAL or EXT reached (``find_class`` would run; EXT is an
   import whatever the registry holds: ``copyreg._extension_cache`` can hand out an object
   without ``find_class`` in a process that loaded it before). The import alone is enough:
   importing ``unittest.__main__`` or ``pip.__main__`` runs a program. A module name that
   is no dotted Python name (``") 2024"``) cannot be imported: no verdict;
2. ``call``: an object ``persistent_load`` returned is called, built or filled;
3. ``stop``: STOP reached: a complete pickle (it builds data and runs nothing);
4. ``framing``: an argument runs across the end of a FRAME, where ``pickle.py`` fails,
   ``_pickle`` over a peekable file reads on and ``_pickle`` over ``io.BytesIO`` drops the rest
   of the frame: three readings of one stream;
5. ``limit``: still unpickling at a limit: undecided, refused.

Anything else (an error before any of these) is no pickle: both unpicklers fail before they
could import or call anything.
"""

from __future__ import annotations

import _pickle
import io
import pickle
import re
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Final, TypeAlias

IMPORT: Final = "import"
CALL: Final = "call"
STOP: Final = "stop"
FRAMING: Final = "framing"
LIMIT: Final = "limit"
MAX_IMPORTS = 8
DECODE_LIMIT = 64 * 2**10  # longer arguments are skipped and assumed valid
DIGITS_LIMIT = 4000  # longer INT/LONG lines are assumed valid (int_max_str_digits varies)
NAME_LIMIT = 200  # longest str kept as a value (to name STACK_GLOBAL imports)
AFTER_VERDICT_OPS = 10_000  # opcodes walked past a verdict to name more imports
CHUNK = 64 * 2**10
_PY_LOADS = pickle._loads  # type: ignore[attr-defined]  # pure-Python pickle.py
# Spellings both unpicklers read, as the picklers write them: a line matching one is not
# sent to them (speed only: a match can only keep a stream alive, never refuse it).
PLAIN: Final = {
    pickle.INT: re.compile(rb"(?:-?(?:0|[1-9][0-9]{0,17})|0[01])\n"),
    pickle.LONG: re.compile(rb"-?(?:0|[1-9][0-9]{0,300})L?\n"),
    pickle.FLOAT: re.compile(rb"-?[0-9]{1,300}\.[0-9]{1,300}\n"),
    pickle.STRING: re.compile(rb"'[A-Za-z0-9 _.,:/+-]*'\n"),
    pickle.UNICODE: re.compile(rb"[^\\\n]*\n"),  # no escape: raw-unicode-escape reads anything
}


@dataclass(frozen=True)
class PickleProbe:
    """Why the bytes are a pickle: the verdict (``why``), the protocol, what it imports."""

    protocol: int
    imports: tuple[str, ...]
    why: str
    limit: str = ""  # the limit reached, for a ``limit`` verdict

    @property
    def joblib(self) -> bool:
        """True when the stream imports joblib's array wrappers."""
        return any(
            name.startswith(("joblib.", "sklearn.externals.joblib")) for name in self.imports
        )

    def describe(self) -> str:
        """A one-line reason naming the protocol, the verdict and the first imports."""
        text = f"pickle stream (protocol {self.protocol})"
        if self.imports:
            shown = ", ".join(self.imports[:MAX_IMPORTS])
            more = "" if len(self.imports) <= MAX_IMPORTS else ", ..."
            text += f" importing {shown}{more}"
        if self.why == CALL:
            text += " calling an object its persistent_load returned"
        elif self.why == STOP and not self.imports:
            text += " that the unpickler reads to its STOP"
        elif self.why == FRAMING:
            text += (
                " with an argument across the end of a FRAME (CPython's unpicklers "
                "read it differently)"
            )
        elif self.why == LIMIT:
            text += f" still unpickling at the limit of {self.limit}: undecided, refused"
        return text


def judge_pickle(
    stream: IO[bytes], size: int, *, max_bytes: int, max_ops: int, cut: str = ""
) -> PickleProbe | None:
    """Return a probe if CPython's unpicklers would import, call or finish on ``stream``.

    ``stream`` is positioned at the start of ``size`` bytes (``cut`` names why they are only
    a prefix of longer data); at most ``max_bytes`` are read and ``max_ops`` opcodes run.
    Still unpickling at a limit is a ``limit`` verdict. Returns None when both unpicklers
    fail before any verdict. Raises ``OSError`` if the stream cannot be read.
    """
    end = min(size, max_bytes)
    source = _Input(stream, end, cut="max_pickle_walk" if size > end else cut)
    return _Model(source, max_ops).run()


def judge_pickle_bytes(
    data: bytes, *, cut: str, max_bytes: int, max_ops: int
) -> PickleProbe | None:
    """``judge_pickle`` over bytes in memory; ``cut`` names why they are only a prefix
    ("" when they are all of the data)."""
    return judge_pickle(io.BytesIO(data), len(data), max_bytes=max_bytes, max_ops=max_ops, cut=cut)


# --- reading ----------------------------------------------------------------------------


class _Limit(Exception):  # noqa: N818 - control flow, never escapes this module
    """A limit (bytes, opcodes) was reached while the stream was still being unpickled."""


class _Refused(Exception):  # noqa: N818 - control flow, never escapes this module
    """Both unpicklers fail here."""


class _Framing(Exception):  # noqa: N818 - control flow, never escapes this module
    """An argument runs across the end of a frame."""


class _Input:
    """The bytes the model reads: at most ``end`` of them, in chunks; reading past ``end``
    raises ``_Limit`` when the data goes on (``cut`` says why it was cut) and returns short
    (EOF) otherwise."""

    def __init__(self, stream: IO[bytes], end: int, *, cut: str) -> None:
        self._stream = stream
        self.end = end
        self.cut = cut
        self._buf = b""
        self._at = 0  # next byte in _buf
        self._base = 0  # offset of _buf[0] in the data

    @property
    def pos(self) -> int:
        return self._base + self._at

    def _more(self) -> bool:
        """Append the next chunk to the buffer; False at the end of what may be read."""
        loaded = self._base + len(self._buf)
        want = min(CHUNK, self.end - loaded)
        chunk = self._stream.read(want) if want > 0 else b""
        if not chunk:
            if self.cut:
                raise _Limit(f"{self.end} bytes ({self.cut})")
            return False
        self._buf = self._buf[self._at :] + chunk
        self._base += self._at
        self._at = 0
        return True

    def read(self, n: int) -> bytes:
        """``n`` bytes (n <= DECODE_LIMIT); fewer only at the end of the data."""
        while len(self._buf) - self._at < n and self._more():
            pass
        data = self._buf[self._at : self._at + n]
        self._at += len(data)
        return data

    def skip(self, n: int) -> int:
        """Consume ``n`` bytes without keeping them; fewer only at the end of the data."""
        done = 0
        while done < n:
            if self._at >= len(self._buf) and not self._more():
                break
            step = min(n - done, len(self._buf) - self._at)
            self._at += step
            done += step
        return done

    def readline(self) -> tuple[bytes | None, bool]:
        """One line as ``readline()`` returns it and whether it ends with a newline; the
        bytes are None for a line longer than DECODE_LIMIT (consumed, not kept)."""
        while True:
            nl = self._buf.find(b"\n", self._at)
            if nl >= 0:
                line = self._buf[self._at : nl + 1]
                self._at = nl + 1
                return (line if len(line) <= DECODE_LIMIT else None), True
            if len(self._buf) - self._at > DECODE_LIMIT:
                return None, self._skip_line()
            if not self._more():
                line = self._buf[self._at :]
                self._at = len(self._buf)
                return line, False

    def _skip_line(self) -> bool:
        while True:
            nl = self._buf.find(b"\n", self._at)
            if nl >= 0:
                self._at = nl + 1
                return True
            self._at = len(self._buf)
            if not self._more():
                return False


# --- the model --------------------------------------------------------------------------


class _Opaque:
    """What find_class, an extension or persistent_load returned: it may be callable."""

    __slots__ = ()


OPAQUE: Final = _Opaque()
DATA: Final = object()  # anything the opcodes themselves build: never callable

_Handler: TypeAlias = "Callable[[_Model], None]"


def _accepts(loads: Callable[..., object], op: bytes, line: bytes) -> bool:
    """Whether one unpickler decodes ``op`` with argument ``line`` (a lone value, then STOP).

    Safe to run: the stream is one value opcode, its line (no newline inside) and STOP.
    """
    try:
        loads(op + line + b".", encoding="latin1")
    except (pickle.UnpicklingError, ValueError, OverflowError, EOFError, IndexError):
        return False
    except Exception:  # noqa: BLE001 - not foreseen: counted as accepted (fail closed)
        return True
    return True


def _digits_limit() -> int:
    """Longest INT/LONG line decoded: loaders may raise ``int_max_str_digits``, so a line
    this process would refuse for its length alone is assumed valid."""
    process = sys.get_int_max_str_digits()
    return DIGITS_LIMIT if process == 0 else min(DIGITS_LIMIT, process)


def _py_index(line: bytes) -> int | None:
    """The memo index pickle.py reads from a GET/PUT line: ``int(line[:-1])``."""
    try:
        return int(line[:-1])
    except ValueError:
        return None


def _c_index(line: bytes) -> int | None:
    """The memo index _pickle reads: ``PyLong_FromString`` on the NUL-terminated line."""
    try:
        return int(line.split(b"\0", 1)[0])
    except ValueError:
        return None


class _Model:
    """Both unpicklers' reading of one stream, followed until a verdict or a failure."""

    def __init__(self, source: _Input, max_ops: int) -> None:
        self.inp = source
        self.max_ops = max_ops
        self.ops = 0
        self.stack: list[object] = []
        self.marks: list[list[object]] = []
        self.memo: dict[int, object] = {}
        self.memo_exact = True  # False once a PUT index was too long to read
        self.py = True  # pickle.py still accepts the stream
        self.c = True  # _pickle still accepts the stream
        self.frame_ends: list[int] = []  # where frames end, outermost first
        self.protocol = 0
        self.imports: list[str] = []
        self.why: str | None = None
        self.stopped = False
        self.limit = ""

    # -- the loop: verdicts are recorded, the walk goes on a little to name more imports

    def run(self) -> PickleProbe | None:
        try:
            self._loop()
        except _Limit as limit:
            if self.why is None:
                self.why, self.limit = LIMIT, str(limit)
        except _Framing:
            self._verdict(FRAMING)
        except _Refused:
            pass
        if self.why is None:
            return None
        return PickleProbe(self.protocol, tuple(dict.fromkeys(self.imports)), self.why, self.limit)

    def _loop(self) -> None:
        stop_at = self.max_ops
        while True:
            if self.ops >= stop_at:
                if self.why is None:
                    raise _Limit(f"{self.max_ops} opcodes (max_pickle_ops)")
                return
            if self.why is not None and len(self.imports) >= MAX_IMPORTS:
                return
            while self.frame_ends and self.inp.pos >= self.frame_ends[-1]:
                self.frame_ends.pop()
            key = self.inp.read(1)
            if not key:
                return  # EOF: both unpicklers raise EOFError
            self.ops += 1
            handler = DISPATCH.get(key[0])
            if handler is None:
                raise _Refused
            handler(self)
            if self.why is not None and stop_at == self.max_ops:
                stop_at = min(self.max_ops, self.ops + AFTER_VERDICT_OPS)
            if self.stopped:
                return

    def _verdict(self, why: str) -> None:
        if self.why is None:
            self.why = why

    # -- reading, with both unpicklers' rules

    def _both_fail_unless(self, py_ok: bool, c_ok: bool) -> None:
        self.py = self.py and py_ok
        self.c = self.c and c_ok
        if not (self.py or self.c):
            raise _Refused

    def _span(self, start: int) -> None:
        if any(start < end < self.inp.pos for end in self.frame_ends):
            raise _Framing

    def _fixed(self, n: int) -> bytes:
        start = self.inp.pos
        data = self.inp.read(n)
        self._span(start)
        if len(data) < n:
            raise _Refused  # EOF: nothing after it can run
        return data

    def _counted(self, n: int) -> bytes | None:
        """A counted argument of ``n`` bytes; None when longer than DECODE_LIMIT."""
        if n <= DECODE_LIMIT:
            return self._fixed(n)
        start = self.inp.pos
        got = self.inp.skip(n)
        self._span(start)
        if got < n:
            raise _Refused
        return None

    def _line(self) -> tuple[bytes | None, bool]:
        start = self.inp.pos
        line, newline = self.inp.readline()
        self._span(start)
        return line, newline

    def _value_line(self, op: bytes, *, digits: bool = False) -> bytes | None:
        """A line argument of a value opcode, decoded by both unpicklers."""
        line, newline = self._line()
        if not newline:
            raise _Refused  # at EOF: nothing after it can run
        if line is None or (digits and len(line) > _digits_limit()):
            return None  # assumed valid
        if PLAIN[op].fullmatch(line) is None:
            self._both_fail_unless(_accepts(_PY_LOADS, op, line), _accepts(_pickle.loads, op, line))
        return line

    # -- the stack, as pickle.py keeps it (a MARK starts a new list; _pickle's fence agrees)

    def push(self, value: object) -> None:
        self.stack.append(value)

    def need(self, n: int) -> None:
        if len(self.stack) < n:
            raise _Refused  # stack underflow (or a MARK in the way)

    def pop(self) -> object:
        self.need(1)
        return self.stack.pop()

    def pop_mark(self) -> list[object]:
        if not self.marks:
            raise _Refused  # could not find MARK
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def receiver(self, value: object) -> None:
        """``value`` is called, built or filled: only an object from persistent_load (or
        find_class, past an import verdict) can be; anything else fails in both."""
        if value is OPAQUE:
            self._verdict(CALL)

    def imported(self, name: str) -> None:
        self.imports.append(name)
        self._verdict(IMPORT)
        self.push(OPAQUE)

    def kept(self, text: str | None) -> object:
        return text if text is not None and len(text) <= NAME_LIMIT else DATA


# --- opcodes (pickle.py 3.11 Unpickler.load_*; _pickle.c load_*) ------------------------


def _proto(m: _Model) -> None:
    proto = m._fixed(1)[0]
    if proto > pickle.HIGHEST_PROTOCOL:
        raise _Refused
    m.protocol = proto


def _frame(m: _Model) -> None:
    size = struct.unpack("<Q", m._fixed(8))[0]
    if size > sys.maxsize:
        raise _Refused
    start = m.inp.pos
    if m.frame_ends:  # a frame inside a frame: pickle.py refuses it
        if start + size > m.frame_ends[-1]:
            raise _Framing  # _pickle drops the rest of the outer frame (over io.BytesIO)
        m._both_fail_unless(False, True)
    elif not m.inp.cut and start + size > m.inp.end:
        m._both_fail_unless(True, False)  # _pickle cannot read the frame; pickle.py reads on
    # _pickle reads a frame it cannot find in its buffer with one read() and drops what is
    # left of it when an argument runs past its end: every frame end is a boundary
    m.frame_ends.append(start + size)


def _persid(m: _Model) -> None:
    line, newline = m._line()
    if line is not None:
        try:
            line[:-1].decode("ascii")
        except UnicodeDecodeError:
            raise _Refused from None
    if not newline:
        raise _Refused  # at EOF: nothing after it can run
    m.push(OPAQUE)


def _binpersid(m: _Model) -> None:
    m.pop()
    m.push(OPAQUE)


def _value(n: int) -> _Handler:
    def handler(m: _Model) -> None:
        m._fixed(n)
        m.push(DATA)

    return handler


def _counted_value(
    width: int, fmt: str, *, signed_py: bool = False, text: bool = False
) -> _Handler:
    def handler(m: _Model) -> None:
        n = struct.unpack(fmt, m._fixed(width))[0]
        if signed_py and n >= 2**31:
            m._both_fail_unless(False, True)  # pickle.py reads it signed: negative
        if n > sys.maxsize:
            raise _Refused
        data = m._counted(n)
        value: object = DATA
        if text and data is not None:
            try:
                value = m.kept(data.decode("utf-8", "surrogatepass"))
            except UnicodeDecodeError:
                raise _Refused from None
        m.push(value)

    return handler


def _long4(m: _Model) -> None:
    n = struct.unpack("<i", m._fixed(4))[0]
    if n < 0:
        raise _Refused
    m._counted(n)
    m.push(DATA)


def _line_value(op: bytes, *, digits: bool = False, text: bool = False) -> _Handler:
    def handler(m: _Model) -> None:
        line = m._value_line(op, digits=digits)
        value: object = DATA
        if text and line is not None:
            value = m.kept(str(line[:-1], "raw-unicode-escape"))
        m.push(value)

    return handler


def _push(value: object) -> _Handler:
    def handler(m: _Model) -> None:
        m.push(value)

    return handler


def _global(m: _Model) -> None:
    module, module_nl = m._line()
    name, name_nl = m._line() if module_nl else (b"", False)
    py_ok = _importable(module, "utf-8") and _decodes(name, "utf-8")
    c_ok = module_nl and name_nl and (name is None or len(name) >= 2) and py_ok
    m._both_fail_unless(py_ok, c_ok)
    m.imported(_import_name(module, name))


def _inst(m: _Model) -> None:
    module, module_nl = m._line()
    name, name_nl = m._line() if module_nl else (b"", False)
    py_ok = _importable(module, "ascii") and _decodes(name, "ascii")  # find_class first
    c_ok = module_nl and name_nl and bool(m.marks) and py_ok
    m._both_fail_unless(py_ok, c_ok)
    m.imports.append(_import_name(module, name))
    m._verdict(IMPORT)
    m.pop_mark()
    m.push(OPAQUE)


def _stack_global(m: _Model) -> None:
    name = m.pop()
    module = m.pop()
    if isinstance(module, str) and not _dotted(module):
        raise _Refused  # find_class cannot import it (see _importable)
    named = isinstance(module, str) and isinstance(name, str)
    m.imported(f"{module}.{name}" if named else "(a name built on the stack)")


def _ext(width: int, fmt: str) -> _Handler:
    def handler(m: _Model) -> None:
        code = struct.unpack(fmt, m._fixed(width))[0]
        m.imported(f"copyreg extension {code}")

    return handler


def _decodes(line: bytes | None, encoding: str) -> bool:
    if line is None:
        return True  # too long to decode: assumed valid
    try:
        line[:-1].decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _importable(module: bytes | None, encoding: str) -> bool:
    """Whether ``find_class`` could import the module a GLOBAL/INST line names: it decodes,
    and is a dotted Python name. ``__import__`` of anything else (``") 2024"``, ``""``,
    ``"os\\r"``) fails before any module code runs: no finder has a module of that name,
    short of a file with that very name on the loader's path (code files never enter a
    bundle), and ``_compat_pickle`` maps only dotted names."""
    if module is None:
        return True  # too long to decode: assumed importable
    try:
        return _dotted(module[:-1].decode(encoding))
    except UnicodeDecodeError:
        return False


def _dotted(module: str) -> bool:
    return all(part.isidentifier() for part in module.split("."))


def _import_name(module: bytes | None, name: bytes | None) -> str:
    def text(part: bytes | None) -> str:
        if part is None:
            return "(a long name)"
        return part[:-1].decode("utf-8", "replace")[:NAME_LIMIT]

    return f"{text(module)}.{text(name)}"


def _memo_get(m: _Model, index: int | None) -> None:
    if not m.memo_exact:  # a PUT index was too long to read: the memo may hold anything
        m.push(OPAQUE)
    elif index is not None and index in m.memo:
        m.push(m.memo[index])
    else:
        raise _Refused  # Memo value not found


def _get(m: _Model) -> None:
    line, newline = m._line()
    if line is None:
        m._both_fail_unless(True, newline)
        _memo_get(m, None)
        return
    py, c = _py_index(line), _c_index(line) if newline else None
    m._both_fail_unless(py is not None, c is not None)
    _memo_get(m, py if m.py else c)  # when both read it, they read the same index


def _binget(width: int, fmt: str) -> _Handler:
    def handler(m: _Model) -> None:
        _memo_get(m, struct.unpack(fmt, m._fixed(width))[0])

    return handler


def _put(m: _Model) -> None:
    line, newline = m._line()
    m.need(1)
    if line is None:
        m._both_fail_unless(True, newline)
        m.memo_exact = False
        return
    py, c = _py_index(line), _c_index(line) if newline else None
    m._both_fail_unless(py is not None and py >= 0, c is not None and c >= 0)
    index = py if m.py else c  # when both read it, they read the same index
    if index is not None:
        m.memo[index] = m.stack[-1]


def _binput(width: int, fmt: str) -> _Handler:
    def handler(m: _Model) -> None:
        index = struct.unpack(fmt, m._fixed(width))[0]
        m.need(1)
        m.memo[index] = m.stack[-1]

    return handler


def _memoize(m: _Model) -> None:
    m.need(1)
    m.memo[len(m.memo)] = m.stack[-1]


def _mark(m: _Model) -> None:
    m.marks.append(m.stack)
    m.stack = []


def _stop(m: _Model) -> None:
    m.pop()
    m._verdict(STOP)
    m.stopped = True


def _pop(m: _Model) -> None:
    if m.stack:
        m.stack.pop()
    else:
        m.pop_mark()


def _pop_mark(m: _Model) -> None:
    m.pop_mark()


def _dup(m: _Model) -> None:
    m.need(1)
    m.push(m.stack[-1])


def _from_mark(m: _Model) -> None:  # TUPLE, LIST, FROZENSET
    m.pop_mark()
    m.push(DATA)


def _dict(m: _Model) -> None:
    if len(m.pop_mark()) % 2:
        raise _Refused  # odd number of items
    m.push(DATA)


def _tuple_n(n: int) -> _Handler:
    def handler(m: _Model) -> None:
        m.need(n)
        del m.stack[-n:]
        m.push(DATA)

    return handler


def _append(m: _Model) -> None:
    m.need(2)
    m.stack.pop()
    m.receiver(m.stack[-1])


def _appends(m: _Model) -> None:  # also ADDITEMS
    m.pop_mark()
    m.need(1)
    m.receiver(m.stack[-1])


def _setitem(m: _Model) -> None:
    m.need(3)
    del m.stack[-2:]
    m.receiver(m.stack[-1])


def _setitems(m: _Model) -> None:
    if len(m.pop_mark()) % 2:
        raise _Refused  # odd number of items
    m.need(1)
    m.receiver(m.stack[-1])


def _build(m: _Model) -> None:
    m.need(2)
    m.stack.pop()
    m.receiver(m.stack[-1])


def _called(m: _Model, callee: object) -> None:
    """REDUCE, NEWOBJ, NEWOBJ_EX, OBJ: both unpicklers fail unless ``callee`` can be called."""
    if callee is not OPAQUE:
        raise _Refused
    m.receiver(callee)
    m.push(OPAQUE)


def _reduce(m: _Model) -> None:
    m.need(2)
    m.stack.pop()
    _called(m, m.stack.pop())


def _newobj(m: _Model) -> None:
    m.need(2)
    del m.stack[-1]
    _called(m, m.stack.pop())


def _newobj_ex(m: _Model) -> None:
    m.need(3)
    del m.stack[-2:]
    _called(m, m.stack.pop())


def _obj(m: _Model) -> None:
    items = m.pop_mark()
    if not items:
        raise _Refused
    _called(m, items[0])


def _readonly_buffer(m: _Model) -> None:
    m.need(1)


P = pickle
DISPATCH: dict[int, _Handler] = {
    P.MARK[0]: _mark,
    P.STOP[0]: _stop,
    P.POP[0]: _pop,
    P.POP_MARK[0]: _pop_mark,
    P.DUP[0]: _dup,
    P.FLOAT[0]: _line_value(P.FLOAT),
    P.INT[0]: _line_value(P.INT, digits=True),
    P.BININT[0]: _value(4),
    P.BININT1[0]: _value(1),
    P.LONG[0]: _line_value(P.LONG, digits=True),
    P.BININT2[0]: _value(2),
    P.NONE[0]: _push(DATA),
    P.PERSID[0]: _persid,
    P.BINPERSID[0]: _binpersid,
    P.REDUCE[0]: _reduce,
    P.STRING[0]: _line_value(P.STRING, text=False),
    P.BINSTRING[0]: _counted_value(4, "<I", signed_py=True),
    P.SHORT_BINSTRING[0]: _counted_value(1, "<B"),
    P.UNICODE[0]: _line_value(P.UNICODE, text=True),
    P.BINUNICODE[0]: _counted_value(4, "<I", text=True),
    P.APPEND[0]: _append,
    P.BUILD[0]: _build,
    P.GLOBAL[0]: _global,
    P.DICT[0]: _dict,
    P.EMPTY_DICT[0]: _push(DATA),
    P.APPENDS[0]: _appends,
    P.GET[0]: _get,
    P.BINGET[0]: _binget(1, "<B"),
    P.INST[0]: _inst,
    P.LONG_BINGET[0]: _binget(4, "<I"),
    P.LIST[0]: _from_mark,
    P.EMPTY_LIST[0]: _push(DATA),
    P.OBJ[0]: _obj,
    P.PUT[0]: _put,
    P.BINPUT[0]: _binput(1, "<B"),
    P.LONG_BINPUT[0]: _binput(4, "<I"),
    P.SETITEM[0]: _setitem,
    P.TUPLE[0]: _from_mark,
    P.EMPTY_TUPLE[0]: _push(DATA),
    P.SETITEMS[0]: _setitems,
    P.BINFLOAT[0]: _value(8),
    # protocol 2
    P.PROTO[0]: _proto,
    P.NEWOBJ[0]: _newobj,
    P.EXT1[0]: _ext(1, "<B"),
    P.EXT2[0]: _ext(2, "<H"),
    P.EXT4[0]: _ext(4, "<i"),
    P.TUPLE1[0]: _tuple_n(1),
    P.TUPLE2[0]: _tuple_n(2),
    P.TUPLE3[0]: _tuple_n(3),
    P.NEWTRUE[0]: _push(DATA),
    P.NEWFALSE[0]: _push(DATA),
    P.LONG1[0]: _counted_value(1, "<B"),
    P.LONG4[0]: _long4,
    # protocol 3
    P.BINBYTES[0]: _counted_value(4, "<I"),
    P.SHORT_BINBYTES[0]: _counted_value(1, "<B"),
    # protocol 4
    P.SHORT_BINUNICODE[0]: _counted_value(1, "<B", text=True),
    P.BINUNICODE8[0]: _counted_value(8, "<Q", text=True),
    P.BINBYTES8[0]: _counted_value(8, "<Q"),
    P.EMPTY_SET[0]: _push(DATA),
    P.ADDITEMS[0]: _appends,
    P.FROZENSET[0]: _from_mark,
    P.NEWOBJ_EX[0]: _newobj_ex,
    P.STACK_GLOBAL[0]: _stack_global,
    P.MEMOIZE[0]: _memoize,
    P.FRAME[0]: _frame,
    # protocol 5
    P.BYTEARRAY8[0]: _counted_value(8, "<Q"),
    P.NEXT_BUFFER[0]: _push(DATA),
    P.READONLY_BUFFER[0]: _readonly_buffer,
}
