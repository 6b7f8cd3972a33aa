"""The scanner against CPython's own unpicklers, on generated streams (docs/scanner.md).

Property: whenever a real unpickler, with ``find_class`` refusing, accepts a stream (``load``
returns) or reaches ``find_class`` for a module it could import, ``scan_blob`` reports a
pickle. Any disagreement fails. The real unpicklers are the four ways loaders run them:
``_pickle`` over a peekable file (``pickle.load(open(...))``, ``torch.load`` legacy), over
``io.BytesIO`` (``torch.load`` of a zip's ``data.pkl``, ``pickle.load(BytesIO(blob))``) and over
bytes (``pickle.loads``), and ``pickle._Unpickler`` (``joblib.load``); their
``persistent_load`` returns None, as a loader's returns something.

They run in a child process: nothing there can import (``find_class`` refuses, the copyreg
extension registry of a fresh interpreter is empty), its address space is capped (12 bytes
make ``_pickle`` allocate 160 MB) and an input that takes too long (a nested tuple key
costs 4**depth to hash) is abandoned: memory and time outcomes are inconclusive.

Quick in ``make test``; long with ``MODELWARD_DIFFERENTIAL_EXAMPLES=100000`` (the future
``make reliability``).
"""

from __future__ import annotations

import datetime
import io
import json
import os
import pickle
import select
import struct
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modelward.attest.scanner import scan_blob

EXAMPLES = int(os.environ.get("MODELWARD_DIFFERENTIAL_EXAMPLES", "250"))
TIMEOUT_S = 10.0
WORKER = r"""
import io, json, pickle, _pickle, resource, struct, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


class Refused(Exception):
    pass


def find_class(self, module, name):
    if all(part.isidentifier() for part in module.split(".")):
        raise Refused(module + "." + name)
    raise ModuleNotFoundError(module)  # what __import__ of such a name does


def persistent_load(self, pid):
    return None


C = type("C", (_pickle.Unpickler,), {"find_class": find_class,
                                     "persistent_load": persistent_load})
Py = type("Py", (pickle._Unpickler,), {"find_class": find_class,
                                       "persistent_load": persistent_load})
READERS = {
    "c-file": lambda data: C(io.BufferedReader(io.BytesIO(data))),
    "c-bytesio": lambda data: C(io.BytesIO(data)),
    "c-bytes": lambda data: C(io.BufferedReader(io.BytesIO(data), len(data) + 1)),
    "python": lambda data: Py(io.BytesIO(data)),
}


def outcome(reader, data):
    try:
        reader(data).load()
    except Refused:
        return "import"
    except (MemoryError, RecursionError):
        return "inconclusive"
    except Exception:
        return "error"
    return "accept"


out = sys.stdout.buffer
while True:
    head = sys.stdin.buffer.read(4)
    if len(head) < 4:
        break
    data = sys.stdin.buffer.read(struct.unpack("<I", head)[0])
    result = {name: outcome(reader, data) for name, reader in READERS.items()}
    out.write(json.dumps(result).encode() + b"\n")
    out.flush()
"""


class Reference:
    """The real unpicklers in a child process; restarted after an input it cannot finish."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen(
                [sys.executable, "-I", "-c", WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self._child

    def outcomes(self, data: bytes) -> dict[str, str]:
        child = self._start()
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            child.stdin.write(struct.pack("<I", len(data)) + data)
            child.stdin.flush()
        except BrokenPipeError:
            self.close()
            return {"worker": "inconclusive"}
        ready, _, _ = select.select([child.stdout], [], [], TIMEOUT_S)
        line = child.stdout.readline() if ready else b""
        if not line:  # too slow, or killed by its memory cap
            self.close()
            return {"worker": "inconclusive"}
        result: dict[str, str] = json.loads(line)
        return result

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None


@pytest.fixture(scope="module")
def reference() -> Iterator[Reference]:
    ref = Reference()
    yield ref
    ref.close()


def _scanner_says_pickle(data: bytes) -> tuple[bool, object]:
    report = scan_blob("blob.dat", io.BytesIO(data), len(data))
    return any(f.rule in {"scan.pickle", "scan.joblib"} for f in report.findings), report


def check(reference: Reference, data: bytes) -> None:
    outcomes = reference.outcomes(data)
    if not any(value in {"accept", "import"} for value in outcomes.values()):
        return
    flagged, report = _scanner_says_pickle(data)
    assert flagged, f"unpicklers {outcomes} on {data!r}, scanner {report}"


# --- streams -----------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=20),
)
HASHABLE = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))


def _containers(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(children, max_size=5),
        st.tuples(children, children),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(HASHABLE, children, max_size=4),
        st.frozensets(HASHABLE, max_size=4),
        st.sets(HASHABLE, max_size=4),
        children.map(lambda x: [x, x]),  # shared references: the memo
        st.binary(max_size=8).map(bytearray),
    )


OBJECTS = st.recursive(SCALARS, _containers, max_leaves=20)
IMPORTING = st.sampled_from(
    [
        OrderedDict(a=1),
        datetime.date(2024, 1, 2),
        complex(1, 2),
        range(3),
        slice(1, 2),
        Exception("x"),
    ]
)


@st.composite
def pickled(draw: st.DrawFn) -> bytes:
    obj = draw(st.one_of(OBJECTS, IMPORTING, st.lists(st.one_of(OBJECTS, IMPORTING), max_size=3)))
    protocol = draw(st.integers(min_value=0, max_value=pickle.HIGHEST_PROTOCOL))
    dumps = draw(st.sampled_from([pickle.dumps, pickle._dumps]))  # type: ignore[attr-defined]
    data: bytes = dumps(obj, protocol=protocol)
    return data


def _arg_line(op: bytes, forms: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.sampled_from(forms).map(lambda form: op + form + b"\n")


INTS = [
    b"0",
    b"1",
    b"00",
    b"01",
    b"0x1f",
    b"010",
    b" 7",
    b"1_0",
    b"-3",
    b"1\x00z",
    b"",
    b"99999999999999999999",
    b"0o7",
    b"0b1",
    b"7 ",
    b"+1",
    b"1L",
    b"0x",
]
FLOATS = [b"1.5", b"inf", b"nan", b" 1", b"1_0", b"1e500", b"1.0\x00x", b"x", b"-0", b""]
STRINGS = [b"'a'", b'"b"', b"'", b"'\\x41'", b"'\\x'", b"a", b"'\xff'", b"''"]
UNICODES = [b"abc", b"\\u0041", b"\\u12", b"\xff", b"", b"\xc3\xa9"]
INDEXES = [b"0", b"1", b" 1", b"1\x00x", b"-1", b"01", b"1_0", b"2", b"", b"+0"]
MODULES = [
    b"os",
    b"builtins",
    b"\xc3\xa9",
    b"",
    b"a b",
    b"\xff",
    b"collections",
    b"os.path",
    b"os\r",
]
NAMES = [b"getcwd", b"", b"x", b"\xff", b"a.b"]


def _u32(n: int) -> bytes:
    return struct.pack("<I", n)


TOKENS = st.one_of(
    st.sampled_from(
        [bytes([op]) for op in b"(.012N)]}tldaesubRoQ"] + [bytes([op]) for op in range(0x85, 0x99)]
    ),
    _arg_line(b"I", INTS),
    _arg_line(b"L", INTS),
    _arg_line(b"F", FLOATS),
    _arg_line(b"S", STRINGS),
    _arg_line(b"V", UNICODES),
    _arg_line(b"P", UNICODES),
    _arg_line(b"g", INDEXES),
    _arg_line(b"p", INDEXES),
    st.tuples(st.sampled_from([b"c", b"i"]), st.sampled_from(MODULES), st.sampled_from(NAMES)).map(
        lambda t: t[0] + t[1] + b"\n" + t[2] + b"\n"
    ),
    st.tuples(st.sampled_from([b"h", b"q"]), st.integers(0, 3)).map(lambda t: t[0] + bytes([t[1]])),
    st.tuples(st.sampled_from([b"j", b"r"]), st.sampled_from([0, 1, 2, 2**31, 2**32 - 1])).map(
        lambda t: t[0] + _u32(t[1])
    ),
    st.integers(0, 255).map(lambda n: b"K" + bytes([n])),
    st.text(max_size=6).map(lambda s: b"\x8c" + bytes([len(s.encode())]) + s.encode()),
    st.sampled_from(["os", "getcwd", "builtins"]).map(lambda s: b"X" + _u32(len(s)) + s.encode()),
    st.binary(max_size=6).map(lambda b: b"C" + bytes([len(b)]) + b),
    st.binary(max_size=6).map(lambda b: b"U" + bytes([len(b)]) + b),
    st.integers(0, 6).map(lambda n: b"\x80" + bytes([n])),
    st.integers(0, 40).map(lambda n: b"\x95" + struct.pack("<Q", n)),
    st.integers(0, 3).map(lambda n: b"\x82" + bytes([n])),
)


@st.composite
def handmade(draw: st.DrawFn) -> bytes:
    tokens = draw(st.lists(TOKENS, max_size=24))
    return b"".join(tokens) + draw(st.sampled_from([b".", b"", b"tR.", b")R."]))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.one_of(pickled(), handmade())))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        kind = draw(st.sampled_from(["set", "insert", "delete", "truncate", "splice"]))
        if kind == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 4))]
        elif kind == "truncate":
            del data[at:]
        else:
            data[at:at] = draw(TOKENS)
    return bytes(data)


DIFFERENTIAL = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@DIFFERENTIAL
@given(pickled())
def test_scanner_flags_every_pickle_the_picklers_write(reference: Reference, data: bytes) -> None:
    check(reference, data)


@DIFFERENTIAL
@given(handmade())
def test_scanner_flags_handmade_streams_a_real_unpickler_runs(
    reference: Reference, data: bytes
) -> None:
    check(reference, data)


@DIFFERENTIAL
@given(mutated())
def test_scanner_flags_mutated_streams_a_real_unpickler_runs(
    reference: Reference, data: bytes
) -> None:
    check(reference, data)


@pytest.mark.parametrize(
    "data",
    [
        b"cos\ngetcwd\n(I0x0\n0tR.",
        b"cos\ngetcwd\n(I010\n0tR.",
        b"cos\ngetcwd\n(F1_0\n0tR.",
        b"\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00c\xffos\ngetcwd\n)R.",
        b"N.",
        pickle.dumps(OrderedDict(a=1), protocol=4),
    ],
)
def test_the_reference_sees_the_known_attacks(reference: Reference, data: bytes) -> None:
    """The harness itself: each of these is run (or finished) by at least one unpickler."""
    outcomes = reference.outcomes(data)
    assert any(value in {"accept", "import"} for value in outcomes.values()), outcomes
    check(reference, data)


def test_the_reference_gives_up_on_what_would_exhaust_it(reference: Reference) -> None:
    outcomes = reference.outcomes(b"Nr\xff\xff\xff\x7f0N.")  # _pickle: a 32 GiB memo
    assert outcomes["c-bytesio"] == "inconclusive"
    assert outcomes["python"] == "accept"
    check(reference, b"Nr\xff\xff\xff\x7f0N.")
