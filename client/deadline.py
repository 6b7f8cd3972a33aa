"""Deadlines for a whole HTTP operation, not for each read (docs/loader.md#deadlines).

httpx bounds each connect, read and write on its own: a peer that sends one byte just
before every read times out (a drip) holds a call for as long as it likes. Here every
socket operation of a bounded client is given the smaller of its own timeout and the time
left before the deadline of the operation it belongs to, and none starts once that has
passed (``ReadTimeout`` / ``WriteTimeout`` / ``ConnectTimeout`` naming the deadline, which
httpx raises as its own ``TimeoutException``):

1. ``bounded(client)`` puts the check under every connection pool of an ``httpx.Client``
   (its transport, and the proxy transports its environment mounts) once, when it is made;
2. ``deadline(seconds)`` opens an operation: connect, send, wait, the whole answer, in
   the calling thread; an inner one never outlives an outer one;
3. ``extend(seconds)`` gives the operation in progress more time once it knows how much
   data there is (a streamed body of a declared length), never past an outer deadline.

Outside ``deadline`` nothing changes: httpx's own timeouts apply. Resolving a host name is
the system resolver's and is not bounded here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import httpcore
import httpx

__all__ = ["bounded", "deadline", "extend"]


@dataclass(frozen=True)
class _Operation:
    ends: float  # time.monotonic()
    seconds: float  # as stated, for messages
    outer: _Operation | None


_T = TypeVar("_T")
_current: ContextVar[_Operation | None] = ContextVar("modelward_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every socket operation of a ``bounded`` client inside ends ``seconds`` from now at the
    latest (or at an outer deadline, whichever comes first)."""
    outer = _current.get()
    ends = time.monotonic() + seconds
    if outer is not None and outer.ends < ends:
        ends, seconds = outer.ends, outer.seconds
    token = _current.set(_Operation(ends, seconds, outer))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # closed from another context (a GC'd generator)
            _current.reset(token)


def extend(seconds: float) -> None:
    """Give the operation in progress ``seconds`` more (bounded by an outer deadline)."""
    now = _current.get()
    if now is None or seconds <= 0:
        return
    ends = now.ends + seconds
    if now.outer is not None:
        ends = min(ends, now.outer.ends)
    _current.set(_Operation(ends, now.seconds + seconds, now.outer))


_Error = type[httpcore.TimeoutException]


def _bounded(call: Callable[[float | None], _T], timeout: float | None, error: _Error) -> _T:
    """``call(timeout)``, ``timeout`` capped by the time the operation has left: ``error``
    naming the deadline once it has passed, or when the capped wait runs out."""
    now = _current.get()
    if now is None:
        return call(timeout)
    left = now.ends - time.monotonic()
    stated = f"{now.seconds:.1f}".removesuffix(".0")
    past = f"the whole operation ran past its deadline of {stated} s"
    if left <= 0:
        raise error(past)
    if timeout is not None and timeout < left:
        return call(timeout)  # the stream's own timeout comes first: its own error
    try:
        return call(left)
    except httpcore.TimeoutException as exc:
        raise error(past) from exc


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return _bounded(lambda t: self._inner.read(max_bytes, t), timeout, httpcore.ReadTimeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _bounded(lambda t: self._inner.write(buffer, t), timeout, httpcore.WriteTimeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        def start(t: float | None) -> httpcore.NetworkStream:
            return self._inner.start_tls(ssl_context, server_hostname, t)

        return _Stream(_bounded(start, timeout, httpcore.ConnectTimeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        def connect(t: float | None) -> httpcore.NetworkStream:
            return self._inner.connect_tcp(host, port, t, local_address, socket_options)

        return _Stream(_bounded(connect, timeout, httpcore.ConnectTimeout))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        def connect(t: float | None) -> httpcore.NetworkStream:
            return self._inner.connect_unix_socket(path, t, socket_options)

        return _Stream(_bounded(connect, timeout, httpcore.ConnectTimeout))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bound_pool(transport: httpx.BaseTransport | None) -> None:
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is None:
        raise RuntimeError(
            f"cannot bound the whole operations of {type(transport).__name__}: no connection "
            "pool where this httpx/httpcore keeps one (modelward.client.deadline)"
        )
    if not isinstance(backend, _Backend):
        pool._network_backend = _Backend(backend)  # type: ignore[union-attr]


def bounded(client: httpx.Client) -> httpx.Client:
    """``client``, its connection pools checking the ``deadline`` of each operation: its
    own transport and every proxy transport its environment mounted. A transport that is
    not httpx's own (an ``httpx.MockTransport`` given by a test, a harness's transport that
    wraps one) is the caller's to bound and is left as it is. Returns it."""
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        if isinstance(transport, httpx.HTTPTransport):
            _bound_pool(transport)
    return client
