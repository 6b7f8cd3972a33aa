"""Authentication and role checks as FastAPI dependencies (``Annotated`` aliases)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState, State
from modelward.registry.domains.auth.authz import Action, roles_for
from modelward.registry.domains.auth.service import Caller, authenticate
from modelward.registry.errors import Forbidden, NotAuthenticated

__all__ = [
    "Admin",
    "AnyCaller",
    "KeyHolder",
    "Publisher",
    "Reviewer",
    "Worker",
    "authenticated_read",
    "bearer_token",
    "caller_from_request",
    "require",
]


def bearer_token(request: Request) -> str:
    """The bearer token of ``request``; raises NotAuthenticated."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthenticated("missing bearer token (Authorization: Bearer <token>)")
    return token.strip()


def caller_from_request(request: Request, state: State) -> Caller:
    """Authenticate the bearer token; remember the caller for logs and the denial audit."""
    token = bearer_token(request)
    with state.db.read() as session:
        caller = authenticate(session, token)
    request.state.caller = caller
    return caller


@contextlib.contextmanager
def authenticated_read(request: Request) -> Iterator[tuple[Caller, Session]]:
    """Authenticate and read in one read transaction (one connection checkout, one thread).

    For hot read endpoints any authenticated role may call (alias resolves): the token is
    checked against the database in the same transaction as the read, on every request.
    Raises NotAuthenticated before anything is read.
    """
    token = bearer_token(request)
    state: AppState = request.app.state.registry
    with state.db.read() as session:
        caller = authenticate(session, token)
        request.state.caller = caller
        yield caller, session


def require(action: Action) -> Callable[[Caller], Caller]:
    """A dependency: the caller, when its role may do ``action`` (auth.authz), else 403."""
    roles = roles_for(action)

    def check(caller: Annotated[Caller, Depends(caller_from_request)]) -> Caller:
        if caller.role not in roles:
            raise Forbidden(
                f"role {caller.role!r} may not do this (needs one of {', '.join(roles)})",
                detail={"role": caller.role, "allowed": list(roles)},
            )
        return caller

    return check


AnyCaller = Annotated[Caller, Depends(caller_from_request)]
Admin = Annotated[Caller, Depends(require(Action.ADMINISTER))]
Publisher = Annotated[Caller, Depends(require(Action.PUBLISH))]
Reviewer = Annotated[Caller, Depends(require(Action.REVIEW))]
KeyHolder = Annotated[Caller, Depends(require(Action.HOLD_KEYS))]
Worker = Annotated[Caller, Depends(require(Action.REPORT))]
