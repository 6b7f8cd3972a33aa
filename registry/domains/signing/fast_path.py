"""``GET /tuf/{file}`` answered from memory in front of the app's routing
(docs/tuf.md#serving; the figures: docs/performance.md#tuf-from-memory-issue-29-item-3).

A poll of ``timestamp.json`` by a worker whose token authenticated a moment ago, for a file
this process holds, needs none of the framework: no route matching, no dependency
injection, no request object. ``TufFastPath`` is an ASGI middleware between the request
logger (``registry.app._Observe``: request id, log line, metrics, unchanged) and the rest of
the app. It answers a request itself only when every step below passes, and otherwise hands
it to the app untouched, where the ``/tuf/{file_name}`` route (domains/signing/endpoints.py)
gives the same answer or the error, its audit event and its log line, as for any route:

  (1) ``GET /tuf/NAME``, NAME a metadata file name (``store.parse_file_name``), no root path,
      of a top-level role: a repository's role ``N.ORG:NAME@….json`` goes to the route,
      which serves a private repository's only to its readers (``role_access``);
  (2) no NUL in the path, the query or any header, and no request body (``refuse_nul``
      would refuse it: the app answers);
  (3) ``tuf_public``, or a bearer token the token cache (``tuf_token_cache_seconds``)
      holds: an unknown, revoked or new token is checked by the app, which remembers it
      (``authenticate_reader``); a remembered one past three quarters of its time is
      checked again by a background thread while its entry still answers;
  (4) the file in memory (``MetadataFiles.peek``): a file to read, or one known missing,
      goes to the app;
  (5) the answer: ``304 Not Modified`` for a matching ``If-None-Match``, else the bytes,
      with the headers the route sends (``ServedFile.head``); the caller is recorded for
      the log line and the route for the metrics, as the route would.

Before any other request's response starts, ``MetadataFiles.announce`` tells the processes
sharing the TUF generation (registry/domains/signing/tuf/generation.py) that this one committed new
metadata, so a publish answered by one ``serve`` worker is served by every worker at once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI

from modelward.registry.domains._state import AppState
from modelward.registry.domains.auth.service import Caller, authenticate_until
from modelward.registry.domains.signing.role_access import repository_of_role
from modelward.registry.domains.signing.tuf.generation import GENERATION_FILE, SharedGeneration
from modelward.registry.domains.signing.tuf.served import ServedFile, etag_matches
from modelward.registry.domains.signing.tuf.store import parse_file_name
from modelward.registry.errors import NotAuthenticated
from modelward.registry.kit.logs import log_failure

__all__ = ["PREFIX", "TufFastPath", "authenticate_reader", "install"]

log = logging.getLogger("modelward.registry")

PREFIX = "/tuf/"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TufFastPath:
    """ASGI middleware: the ``/tuf/`` reads memory can answer (module doc)."""

    def __init__(self, app: ASGIApp, state: AppState, route: object) -> None:
        self.app = app
        self.state = state
        self.route = route  # the /tuf/{file_name} route: its template labels the metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif scope["method"] == "GET":
            answer = self._answer(scope) if scope["path"].startswith(PREFIX) else None
            if answer is None:
                await self.app(scope, receive, send)
                return
            status, served = answer
            head = served.head if status == 200 else served.head_304
            await send({"type": "http.response.start", "status": status, "headers": list(head)})
            await send(
                {"type": "http.response.body", "body": served.data if status == 200 else b""}
            )
        else:
            await self.app(scope, receive, self._announcing(send))

    def _announcing(self, send: Send) -> Send:
        files = self.state.tuf_files

        async def announcing(message: Message) -> None:
            if message["type"] == "http.response.start":
                files.announce()  # a write this request committed reaches the other processes
            await send(message)

        return announcing

    def _answer(self, scope: Scope) -> tuple[int, ServedFile] | None:
        """(status, file) when memory answers; None: the app answers."""
        # (1) a metadata file name, as the route matches it
        path: str = scope["path"]
        name = path[len(PREFIX) :]
        if scope.get("root_path") or "/" in name or "\x00" in path:
            return None
        parsed = parse_file_name(name)
        if parsed is None or repository_of_role(parsed[0]) is not None:
            return None  # a repository's role: the route asks who may read it
        # (2) nothing refuse_nul would refuse, no body
        query: bytes = scope.get("query_string", b"")
        if b"\x00" in query or b"%00" in query:
            return None
        authorization = if_none_match = None
        for key, value in scope["headers"]:
            if b"\x00" in key or b"\x00" in value:
                return None
            if key == b"authorization":
                authorization = value if authorization is None else authorization
            elif key == b"if-none-match":
                if_none_match = value if if_none_match is None else if_none_match
            elif key == b"transfer-encoding" or (key == b"content-length" and value != b"0"):
                return None
        # (3) who reads: tuf_public, or a token authenticated within the cache's time
        caller = None
        if not self.state.settings.tuf_public:
            if authorization is None:
                return None
            scheme, _, token = authorization.decode("latin-1").partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                return None
            caller, renew = self.state.tuf_tokens.lookup(token)
            if caller is None:
                return None
            if renew:  # checked again in the background while the entry still answers
                threading.Thread(target=_renew, args=(self.state, token), daemon=True).start()
        # (4) the file, from memory only
        found = self.state.tuf_files.peek(*parsed)
        if not isinstance(found, ServedFile):
            return None
        # (5) the answer, recorded as the route records it
        if caller is not None:
            scope.setdefault("state", {})["caller"] = caller
        scope["route"] = self.route
        if if_none_match is not None and etag_matches(if_none_match.decode("latin-1"), found.etag):
            return 304, found
        return 200, found


def authenticate_reader(state: AppState, token: str) -> Caller:
    """The token checked against the database, remembered for ``tuf_token_cache_seconds``
    on success and forgotten on failure; raises NotAuthenticated."""
    try:
        with state.db.read() as session:
            caller, expires_at = authenticate_until(session, token)
    except NotAuthenticated:
        state.tuf_tokens.forget(token)
        raise
    state.tuf_tokens.put(token, caller, expires_at)
    return caller


def _renew(state: AppState, token: str) -> None:
    """``authenticate_reader`` off the request path: a failure has dropped the entry (the
    next request is refused by the route) or is logged (the entry ends at its time)."""
    try:
        authenticate_reader(state, token)
    except NotAuthenticated:
        pass
    except Exception as exc:  # noqa: BLE001 - logged by type; the entry ends at its time
        log_failure(log, "tuf_token_renew_failed", exc, level=logging.WARNING, message=None)


def install(app: FastAPI, state: AppState) -> None:
    """Put ``TufFastPath`` in front of ``app`` (call it between the middlewares it goes
    between: ``add_middleware`` stacks outwards), sharing the TUF generation of the keys
    directory when memory serves (``tuf_freshness_seconds`` above 0)."""
    route = next(r for r in app.routes if getattr(r, "path", None) == PREFIX + "{file_name}")
    if state.settings.tuf_freshness_seconds > 0:
        path = state.settings.resolved_tuf_keys_dir() / GENERATION_FILE
        try:
            state.tuf_files.share(SharedGeneration(path))
        except OSError as exc:
            # served within tuf_freshness_seconds of a sibling's publish instead of at once
            log.warning(
                json.dumps(
                    {"event": "tuf_generation_unavailable", "path": str(path), "error": str(exc)}
                )
            )
    app.add_middleware(TufFastPath, state=state, route=route)
