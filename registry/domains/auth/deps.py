"""Authentication and role checks as FastAPI dependencies (``Annotated`` aliases)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState, State
from modelward.registry.domains.auth.authz import APPROVER_ROLES, PUBLISHER_ROLES
from modelward.registry.domains.auth.service import Caller, authenticate
from modelward.registry.errors import Forbidden, NotAuthenticated

__all__ = [
    "Admin",
    "AnyCaller",
    "Publisher",
    "Reviewer",
    "authenticated_read",
    "caller_from_request",
    "require_roles",
]


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthenticated("missing bearer token (Authorization: Bearer <token>)")
    return token.strip()


def caller_from_request(request: Request, state: State) -> Caller:
    """Authenticate the bearer token; remember the caller for logs and the denial audit."""
    token = _bearer(request)
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
    token = _bearer(request)
    state: AppState = request.app.state.registry
    with state.db.read() as session:
        caller = authenticate(session, token)
        request.state.caller = caller
        yield caller, session


def require_roles(*roles: str) -> Callable[[Caller], Caller]:
    def check(caller: Annotated[Caller, Depends(caller_from_request)]) -> Caller:
        if caller.role not in roles:
            raise Forbidden(
                f"role {caller.role!r} may not do this (needs one of {', '.join(roles)})",
                detail={"role": caller.role, "allowed": list(roles)},
            )
        return caller

    return check


AnyCaller = Annotated[Caller, Depends(caller_from_request)]
Admin = Annotated[Caller, Depends(require_roles("admin"))]
Publisher = Annotated[Caller, Depends(require_roles(*PUBLISHER_ROLES))]
Reviewer = Annotated[Caller, Depends(require_roles(*APPROVER_ROLES))]
