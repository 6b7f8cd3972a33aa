"""OCI error bodies for ``/v2`` (docs/oci.md#errors).

Every RegistryError raised under ``/v2`` goes through the app's one handler (and its denial
audit) and is answered here as ``{"errors": [{"code", "message", "detail"}]}`` with the
distribution-spec code for what went wrong. Errors raised by this package carry their OCI
code already (``OciError``); the registry's own codes are mapped by status, code and the kind
of route (manifest, blob, upload)::

    RegistryError
    └── OciError                 an OCI code (NAME_UNKNOWN, MANIFEST_UNKNOWN, UNSUPPORTED ...)

A 401 carries the Bearer challenge: ``realm`` (this server's ``/v2/token``), ``service``
and, on repository routes, the ``scope`` the request needs.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from modelward.registry.errors import RegistryError

__all__ = [
    "API_VERSION_HEADER",
    "OCI_RESPONSES",
    "SERVICE",
    "OciError",
    "challenge",
    "is_oci_path",
    "oci_code",
    "oci_error_response",
]

SERVICE = "modelward"
API_VERSION_HEADER = {"Docker-Distribution-API-Version": "registry/2.0"}
OCI_CODES = frozenset(
    {
        "BLOB_UNKNOWN",
        "BLOB_UPLOAD_INVALID",
        "BLOB_UPLOAD_UNKNOWN",
        "DIGEST_INVALID",
        "MANIFEST_BLOB_UNKNOWN",
        "MANIFEST_INVALID",
        "MANIFEST_UNKNOWN",
        "NAME_INVALID",
        "NAME_UNKNOWN",
        "SIZE_INVALID",
        "UNAUTHORIZED",
        "DENIED",
        "UNSUPPORTED",
        "TOOMANYREQUESTS",
        "RANGE_INVALID",
    }
)


class _OciErrorItem(BaseModel):
    code: str
    message: str
    detail: Any = None


class OciErrorBody(BaseModel):
    """The OCI error shape every ``/v2`` refusal answers with."""

    errors: list[_OciErrorItem]


OCI_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": OciErrorBody, "description": text}
    for status, text in (
        (400, "MANIFEST_INVALID, MANIFEST_BLOB_UNKNOWN, DIGEST_INVALID, BLOB_UPLOAD_INVALID"),
        (401, "UNAUTHORIZED (with the Bearer challenge)"),
        (403, "DENIED (role, scope, policy, alias rules, quarantine)"),
        (404, "NAME_UNKNOWN, MANIFEST_UNKNOWN, BLOB_UNKNOWN, BLOB_UPLOAD_UNKNOWN"),
        (405, "UNSUPPORTED (DELETE)"),
        (409, "DENIED (a concurrent alias move)"),
        (411, "SIZE_INVALID (Content-Length required)"),
        (413, "SIZE_INVALID; DENIED (a repository's storage quota: the upload is ended)"),
        (415, "UNSUPPORTED (not an OCI image manifest, not a ModelPack bundle or attestation)"),
        (416, "RANGE_INVALID"),
        (422, "request validation (a query parameter out of range)"),
        (429, "TOOMANYREQUESTS (open upload sessions)"),
    )
}
_REPO_ROUTE = re.compile(r"^/v2/([^/]+/[^/]+)/(manifests|blobs|tags|referrers)(/.*)?$")


class OciError(RegistryError):
    """An error whose ``code`` is already an OCI code; ``status`` given per instance."""

    def __init__(self, status: int, code: str, message: str, *, detail: Any = None) -> None:
        if code not in OCI_CODES:
            raise ValueError(f"not an OCI error code: {code}")
        super().__init__(message, detail=detail, code=code)
        self.status = status  # type: ignore[misc]


def is_oci_path(path: str) -> bool:
    return path == "/v2" or path.startswith("/v2/")


def _route_kind(path: str) -> tuple[str | None, str]:
    """(repository or None, kind: manifest, blob, upload, tags, token, catalog, base)."""
    match = _REPO_ROUTE.match(path)
    if match is None:
        if path.startswith("/v2/token"):
            return None, "token"
        if path.startswith("/v2/_catalog"):
            return None, "catalog"
        return None, "base"
    repo, what, rest = match.group(1), match.group(2), match.group(3) or ""
    if what == "blobs":
        return repo, "upload" if rest.startswith("/uploads") else "blob"
    if what == "tags":
        return repo, "tags"
    return repo, "manifest"


_BY_CODE = {
    "digest_mismatch": (400, "DIGEST_INVALID"),
    "invalid_digest": (400, "DIGEST_INVALID"),
    "invalid_manifest": (400, "MANIFEST_INVALID"),
    "missing_blobs": (400, "MANIFEST_BLOB_UNKNOWN"),
    "upload_incomplete": (400, "BLOB_UPLOAD_INVALID"),
    "truncated_body": (400, "BLOB_UPLOAD_INVALID"),
    "length_required": (411, "SIZE_INVALID"),
    "offset_mismatch": (416, "RANGE_INVALID"),
    "upload_expired": (404, "BLOB_UPLOAD_UNKNOWN"),
    "bundle_quarantined": (403, "DENIED"),
    "bundle_tombstoned": (404, "MANIFEST_UNKNOWN"),
    # no OCI code for a quota; DENIED with the message (repository, quota, usage, size),
    # as other registries answer it
    "repository_quota_exceeded": (413, "DENIED"),
    # garbage collection removed the blob while this upload ran: send it again
    "blob_collected": (400, "BLOB_UPLOAD_INVALID"),
}
_BY_STATUS = {
    401: "UNAUTHORIZED",
    403: "DENIED",
    405: "UNSUPPORTED",
    409: "DENIED",
    413: "SIZE_INVALID",
    416: "RANGE_INVALID",
    422: "DENIED",
    429: "TOOMANYREQUESTS",
}
_NOT_FOUND = {
    "manifest": "MANIFEST_UNKNOWN",
    "blob": "BLOB_UNKNOWN",
    "upload": "BLOB_UPLOAD_UNKNOWN",
}
_BAD = {"manifest": "MANIFEST_INVALID", "blob": "DIGEST_INVALID", "upload": "BLOB_UPLOAD_INVALID"}


def oci_code(path: str, status: int, code: str, message: str) -> tuple[int, str]:
    """The HTTP status and OCI code for a registry error answered under ``path``."""
    if code in OCI_CODES:
        return status, code
    if code in _BY_CODE:
        return _BY_CODE[code]
    _, kind = _route_kind(path)
    if status == 404:
        if message.startswith("no repository"):
            return 404, "NAME_UNKNOWN"
        return 404, _NOT_FOUND.get(kind, "NAME_UNKNOWN")
    if status == 422:  # a refusal by policy, scanner or attestation rules
        return 403, "DENIED"
    if status in _BY_STATUS:
        return status, _BY_STATUS[status]
    if status == 400:
        return 400, _BAD.get(kind, "UNSUPPORTED")
    return status, "UNSUPPORTED"


def challenge(request: Request, path: str | None = None) -> str:
    """``Bearer realm=...,service=...[,scope=...]`` for a request to ``path``."""
    path = path if path is not None else request.url.path
    base = str(request.base_url).rstrip("/")
    value = f'Bearer realm="{base}/v2/token",service="{SERVICE}"'
    repo, kind = _route_kind(path)
    if repo is not None:
        actions = "pull" if request.method in ("GET", "HEAD") else "pull,push"
        value += f',scope="repository:{repo}:{actions}"'
    elif kind == "catalog":
        value += ',scope="registry:catalog:*"'
    return value


def oci_error_response(
    request: Request,
    status: int,
    code: str,
    message: str,
    detail: Any,
    *,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The OCI error body for a refused ``/v2`` request (the app's handler audits first)."""
    path = request.url.path
    status, oci = oci_code(path, status, code, message)
    extra: dict[str, Any] = {"code": code} if code != oci else {}
    if detail is not None:
        extra["detail"] = detail
    out = {**(headers or {}), **API_VERSION_HEADER}
    if status == 401:
        out["WWW-Authenticate"] = challenge(request, path)
    elif isinstance(detail, dict) and detail.get("error") == "insufficient_scope":
        out["WWW-Authenticate"] = challenge(request, path) + ',error="insufficient_scope"'

    body = {"errors": [{"code": oci, "message": message, "detail": extra or None}]}
    return JSONResponse(body, status_code=status, headers=out)
