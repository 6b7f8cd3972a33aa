"""Authentication and role checks as FastAPI dependencies (``Annotated`` aliases)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from registry.domains._state import State
from registry.domains.auth.service import Caller, authenticate
from registry.errors import Forbidden, NotAuthenticated

__all__ = [
    "Admin",
    "AnyCaller",
    "Publisher",
    "Reviewer",
    "caller_from_request",
    "require_roles",
]


def caller_from_request(request: Request, state: State) -> Caller:
    """Authenticate the bearer token; remember the caller for logs and the denial audit."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthenticated("missing bearer token (Authorization: Bearer <token>)")
    with state.db.read() as session:
        caller = authenticate(session, token.strip())
    request.state.caller = caller
    return caller


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
Publisher = Annotated[Caller, Depends(require_roles("admin", "publisher"))]
Reviewer = Annotated[Caller, Depends(require_roles("admin", "reviewer"))]
