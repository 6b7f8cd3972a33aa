"""The one way a domain makes its router (``domain_router``).

Every route of the registry's API refuses a NUL character before anything else
(``domains/_nul.py``) and documents the app's one error body. Both are set here, where the
router is made, so that the app adds each domain's routes as they are
(``registry.app.create_app``): ``FastAPI.include_router`` would build every route a second
time to attach them, which was a quarter of a server's start-up.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from modelward.registry.domains._nul import refuse_nul

__all__ = ["ERROR_RESPONSES", "ErrorBody", "domain_router"]


class _ErrorDetail(BaseModel):
    code: str
    message: str
    detail: Any = None


class ErrorBody(BaseModel):
    """The one error shape every endpoint answers with."""

    error: _ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in (
        (400, "bad input (digest_mismatch, truncated_body, invalid_manifest, missing_blobs ...)"),
        (401, "missing, unknown, revoked or expired token"),
        (403, "the caller's role or repository does not allow it"),
        (404, "not found"),
        (409, "stale_version (current state in detail), offset_mismatch, bundle_quarantined"),
        (410, "bundle_tombstoned"),
        (413, "too_large"),
        (422, "invalid_request, policy_denied, attestation_rejected ..."),
    )
}


def domain_router(
    prefix: str = "",
    *,
    tags: list[str],
    responses: dict[int | str, dict[str, Any]] | None = None,
) -> APIRouter:
    """A router whose routes refuse NUL first and answer errors as ``ErrorBody``
    (``responses`` replaces that documentation where a domain answers another shape)."""
    return APIRouter(
        prefix=prefix,
        tags=list(tags),
        dependencies=[Depends(refuse_nul)],
        responses=ERROR_RESPONSES if responses is None else responses,
    )
