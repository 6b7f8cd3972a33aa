"""Errors raised by registry/ (server side): the registry's HTTP answers.

Every error carries the HTTP status and a stable machine code; the app turns each into the one
JSON error shape ``{"error": {"code", "message", "detail"}}`` in a single handler. These are the
server's answers only: what the HTTP client raises on receiving them is its own tree
(client.errors), and what the library decides is attest's (attest.errors), which the
server maps to one of these where it answers (e.g. registry.domains.moves.refusals). The
tree::

    RegistryError                       500 internal
    ├── NotAuthenticated                401 unauthenticated
    ├── Forbidden                       403 forbidden
    ├── NotFound                        404 not_found
    ├── Gone                            410 gone (tombstoned bundle)
    ├── Conflict                        409 conflict
    │   ├── StaleVersion                409 stale_version (alias CAS; detail = current state),
    │   │                               or proposal_stale (a TUF proposal's role moved on:
    │   │                               attest.errors.StaleProposal on the wire)
    │   └── Quarantined                 409 bundle_quarantined (the detail: the quarantine)
    ├── BadRequest                      400 bad_request
    │   ├── DigestMismatchError         400 digest_mismatch
    │   ├── TruncatedBody               400 truncated_body
    │   └── InvalidManifest             400 invalid_manifest
    ├── PayloadTooLarge                 413 too_large
    ├── QuotaExceeded                   429 quota_exceeded (open upload sessions)
    ├── Refused                         422 refused (policy, scan or attestation verdicts)
    ├── ConfigurationError              a setting is invalid (CLI reports it, exit 1)
    └── DatabaseOutOfDate               the schema needs ``modelward db upgrade``

Other server errors, each in its domain: ``AuditLogInconsistent`` and ``TreeIncomplete``
(500 audit_log_inconsistent: the registry's own audit tables disagree),
``CheckpointKeyUnavailable`` (503), ``TufKeyUnavailable``, ``OciError``,
``RangeNotSatisfiable``, ``SignatureRefused`` (403), ``RoleUnverified`` (409). The audit
log's verifiers (attest.audit) raise ``attest.errors.AuditVerificationError``, never one of
these: a verdict about the log is not a server fault.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BadRequest",
    "ConfigurationError",
    "Conflict",
    "DatabaseOutOfDate",
    "DigestMismatchError",
    "Forbidden",
    "Gone",
    "InvalidManifest",
    "NotAuthenticated",
    "NotFound",
    "PayloadTooLarge",
    "Quarantined",
    "QuotaExceeded",
    "Refused",
    "RegistryError",
    "StaleVersion",
    "TruncatedBody",
]


class RegistryError(Exception):
    """Root of registry/ errors; ``status`` and ``code`` drive the HTTP error response."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"

    def __init__(self, message: str, *, detail: Any = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        if code is not None:
            self.code = code  # type: ignore[misc]

    def to_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "detail": self.detail}}


class NotAuthenticated(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 401
    code = "unauthenticated"


class Forbidden(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 403
    code = "forbidden"


class NotFound(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 404
    code = "not_found"


class Gone(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 410
    code = "gone"


class Conflict(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 409
    code = "conflict"


class StaleVersion(Conflict):
    code = "stale_version"


class Quarantined(Conflict):
    """409: the request touches a quarantined (or only-quarantined) bundle or blob. The
    worker's refusal of such a bundle is ``loader.errors.BundleQuarantined``."""

    code = "bundle_quarantined"


class BadRequest(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 400
    code = "bad_request"


class DigestMismatchError(BadRequest):
    code = "digest_mismatch"


class TruncatedBody(BadRequest):
    code = "truncated_body"


class InvalidManifest(BadRequest):
    code = "invalid_manifest"


class PayloadTooLarge(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 413
    code = "too_large"


class QuotaExceeded(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 429
    code = "quota_exceeded"


class Refused(RegistryError):  # noqa: N818 - named after the HTTP outcome
    status = 422
    code = "refused"


class ConfigurationError(RegistryError):
    code = "configuration"


class DatabaseOutOfDate(RegistryError):  # noqa: N818 - named after the HTTP outcome
    code = "database_out_of_date"
