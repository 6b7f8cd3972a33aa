"""Run one fuzz input through one target and judge the outcome.

A target's function takes the input bytes and returns nothing. It may raise only its
*documented* exceptions (the classes its docstring promises for bad input, e.g.
``VerificationError``); anything else — ``TypeError``, ``KeyError``, ``RecursionError``,
``MemoryError``, a library's internal error leaking, a broken invariant the target checks
(``InvariantViolation``), any attempt to open a network connection — is a ``Finding``.

Findings are de-duplicated by (exception type, innermost frame): a campaign keeps fuzzing
after one and reports each distinct one once, with the smallest input that raised it.
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import socket
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from importlib import import_module
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = [
    "Finding",
    "Hang",
    "InvariantViolation",
    "Judge",
    "no_network",
    "resolve",
]


class InvariantViolation(AssertionError):  # noqa: N818 - the name is the finding
    """A target returned normally but its result breaks a property the target checks."""


class Hang(BaseException):
    """One input ran past the per-input timeout (raised by the in-process alarm)."""


class _NetworkRefused(OSError):  # noqa: N818 - reads as the event
    """Raised into code that tries to open a network connection during fuzzing."""


@dataclass(frozen=True)
class Finding:
    """One distinct failure: where, what, and the input that shows it."""

    target: str
    kind: str  # "exception", "invariant", "network", "hang"
    signature: str
    exception: str
    message: str
    traceback: str
    input_sha256: str
    input_len: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve(dotted: str) -> type[BaseException]:
    """``package.module.Class`` -> the class (imported late, after instrumentation)."""
    module, _, name = dotted.rpartition(".")
    found = getattr(import_module(module), name)
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise TypeError(f"{dotted} is not an exception class")
    return found


# -- network guard -------------------------------------------------------------------------
_network_attempts: list[str] = []


@contextlib.contextmanager
def no_network() -> Iterator[list[str]]:
    """Refuse every outgoing connection and name resolution inside the block.

    Yields the list every attempt is recorded in (a swallowed refusal is still recorded).
    """
    saved = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.create_connection,
        socket.getaddrinfo,
    )

    def refuse(*args: Any, **_kwargs: Any) -> Any:
        where = "".join(traceback.format_stack(limit=6)[:-1])
        _network_attempts.append(f"{args[1:3]!r}\n{where}")
        raise _NetworkRefused("reliability.fuzz: network access refused while fuzzing")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse  # type: ignore[method-assign]
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    try:
        yield _network_attempts
    finally:
        (
            socket.socket.connect,  # type: ignore[method-assign]
            socket.socket.connect_ex,  # type: ignore[method-assign]
            socket.create_connection,
            socket.getaddrinfo,
        ) = saved


# -- the judge -----------------------------------------------------------------------------
def _signature(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/reliability/" not in f.filename] or frames
    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno} {ours[-1].name}" if ours else "?"
    return f"{type(exc).__module__}.{type(exc).__qualname__} at {where}"


class Judge:
    """Runs inputs through one target; keeps every distinct finding (smallest input wins).

    ``timeout`` (seconds, main thread only) arms an alarm per input so a hang is a finding
    instead of a stuck run; under atheris, libFuzzer's ``-timeout`` does that instead.
    """

    def __init__(
        self,
        target: str,
        function: Callable[[bytes], None],
        documented: tuple[type[BaseException], ...],
        *,
        findings_dir: Path | None = None,
        timeout: float | None = None,
    ) -> None:
        self.target = target
        self.function = function
        self.documented = documented
        self.findings_dir = findings_dir
        self.timeout = timeout
        self.findings: dict[str, Finding] = {}
        self.executions = 0
        self.documented_raised = 0

    def __call__(self, data: bytes) -> Finding | None:
        """Run one input; return the finding it shows (new or not), or None."""
        self.executions += 1
        before = len(_network_attempts)
        try:
            with self._alarm():
                self.function(data)
        except self.documented:
            self.documented_raised += 1
            found = None
        except InvariantViolation as exc:
            found = self._record(data, "invariant", exc)
        except Hang as exc:
            found = self._record(data, "hang", exc)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            kind = "network" if isinstance(exc, _NetworkRefused) else "exception"
            found = self._record(data, kind, exc)
        else:
            found = None
        swallowed = found is None or found.kind != "network"
        if len(_network_attempts) > before and swallowed:  # a refusal the target caught
            attempt = _network_attempts[-1]
            found = self._add(
                Finding(
                    self.target,
                    "network",
                    f"network attempt {attempt.splitlines()[0]}",
                    "network",
                    "the target tried to open a network connection",
                    attempt,
                    hashlib.sha256(data).hexdigest(),
                    len(data),
                ),
                data,
            )
        return found

    @contextlib.contextmanager
    def _alarm(self) -> Iterator[None]:
        if not self.timeout:
            yield
            return

        def fire(_signum: int, _frame: FrameType | None) -> None:
            raise Hang(f"one input ran longer than {self.timeout} s")

        previous = signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def _record(self, data: bytes, kind: str, exc: BaseException) -> Finding:
        text = "".join(traceback.format_exception(exc))
        finding = Finding(
            target=self.target,
            kind=kind,
            signature=_signature(exc),
            exception=f"{type(exc).__module__}.{type(exc).__qualname__}",
            message=str(exc)[:500],
            traceback=text[-6000:],
            input_sha256=hashlib.sha256(data).hexdigest(),
            input_len=len(data),
        )
        return self._add(finding, data)

    def _add(self, finding: Finding, data: bytes) -> Finding:
        known = self.findings.get(finding.signature)
        if known is not None and known.input_len <= finding.input_len:
            return known
        self.findings[finding.signature] = finding
        if self.findings_dir is not None:
            self.findings_dir.mkdir(parents=True, exist_ok=True)
            key = hashlib.sha256(finding.signature.encode()).hexdigest()[:12]
            stem = self.findings_dir / f"{self.target}-{key}"
            stem.with_suffix(".input").write_bytes(data)
            stem.with_suffix(".txt").write_text(
                f"target: {finding.target}\nkind: {finding.kind}\n"
                f"signature: {finding.signature}\ninput: {finding.input_len} bytes, "
                f"sha256 {finding.input_sha256}\n\n{finding.traceback}"
            )
        return finding
