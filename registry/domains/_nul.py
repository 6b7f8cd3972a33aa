"""No NUL character gets past the edge (docs/reliability.md, F6).

PostgreSQL cannot hold a NUL (U+0000) in text or JSON, and no name, alias, token, path or
reason of ours needs one. ``refuse_nul`` is an app-wide dependency: before any route reads
the database, it looks, in this order, at

  (1) every header name and value (a client may send any byte);
  (2) every path parameter (decoded: ``%00`` is a NUL) and the path itself;
  (3) every query parameter name and value (decoded);
  (4) the body of a request that is not a byte stream (``_body_limit.is_streaming``: blob
      and upload bytes, attestations, which are bytes, never text): a NUL byte anywhere,
      and in a JSON body every string, key or value, that holds one (``\\u0000``).

The first it finds is refused with 400 ``invalid_value``, whose message and ``detail.field``
name where it is (``header 'x-request-id'``, ``path parameter 'name'``, ``query parameter
'n'``, ``body field 'principal'``), on SQLite and PostgreSQL alike. A caller with a bearer
token is authenticated first (so a bad token stays a 401 and the refusal names who asked);
the app's one error handler answers and audits it (``registry.app``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from modelward.registry.domains._body_limit import is_streaming
from modelward.registry.domains.auth.deps import caller_from_request
from modelward.registry.errors import BadRequest

__all__ = ["NulCharacter", "refuse_nul"]

NUL = "\x00"
_MAX_SHOWN = 80


class NulCharacter(BadRequest):
    """400 ``invalid_value``: a NUL character in the named field."""

    code = "invalid_value"


def _shown(text: str) -> str:
    """A name safe to print and store: its NULs as ``%00``, at most ``_MAX_SHOWN`` chars."""
    shown = text.replace(NUL, "%00")
    return shown if len(shown) <= _MAX_SHOWN else shown[:_MAX_SHOWN] + "..."


def _json_path(value: Any, path: str) -> str | None:
    """The path of the first string (key or value) in ``value`` holding a NUL."""
    if isinstance(value, str):
        return path if NUL in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{path}.{_shown(key)}" if path else _shown(key)
            if NUL in key:
                return inner
            found = _json_path(item, inner)
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _json_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _body_field(body: bytes) -> str | None:
    """Where in ``body`` a NUL is: ``body`` for a NUL byte, the JSON field for an escape."""
    if b"\x00" in body:
        return "body"
    if b"\\u0000" not in body:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None  # not JSON: the route refuses it (422) without storing it
    found = _json_path(document, "")
    if found is None:
        return None
    return f"body field {found!r}" if found else "body"


async def _where(request: Request) -> str | None:
    # (1): headers
    for raw_name, raw_value in request.headers.raw:
        if b"\x00" in raw_name or b"\x00" in raw_value:
            return f"header {_shown(raw_name.decode('latin-1'))!r}"
    # (2): the path: a named parameter when a route matched it
    for name, value in request.path_params.items():
        if isinstance(value, str) and NUL in value:
            return f"path parameter {name!r}"
    if NUL in request.url.path:
        return "path"
    # (3): the query
    for name, value in request.query_params.multi_items():
        if NUL in name or NUL in value:
            return f"query parameter {_shown(name)!r}"
    # (4): the body, unless it is bytes streamed to a blob, an upload or an attestation
    if request.method in ("POST", "PUT", "PATCH", "DELETE") and not is_streaming(
        request.method, request.url.path
    ):
        return _body_field(await request.body())
    return None


async def refuse_nul(request: Request) -> None:
    """Raise NulCharacter (400 ``invalid_value``) naming the first field holding a NUL
    (module doc); a bearer token is authenticated first (NotAuthenticated, 401)."""
    where = await _where(request)
    if where is None:
        return
    if where != "header 'authorization'" and "authorization" in request.headers:
        await run_in_threadpool(caller_from_request, request, request.app.state.registry)
    raise NulCharacter(
        f"invalid request: {where} holds a NUL character, which no text field may contain",
        detail={"field": where},
    )
