"""Quarantine belongs to a bundle DIGEST, in every repository (docs/registry.md#quarantine).

The table ``quarantined_digests`` (reason, who, when, through which repository) is the only
record, and this module the only place that answers "is this digest quarantined?". Every door
that hands out or builds on a bundle asks here, whatever repository it goes through:

- push (``bundles.service.push``): a quarantined digest is refused in every repository,
  a repository that held it before the quarantine and one that never did alike;
- alias moves, approvals and attestation attach (``require_not_quarantined``);
- manifest reads: ``GET .../manifest`` (``require_readable``) and the bundle record, which
  withholds the manifest (``manifest_readable``) but still says ``quarantined`` and why, so
  every worker refuses it (loader/pull.py step 2);
- blob downloads (``blobs.service.readable_blob_size``) read ``Bundle.quarantined``, a
  read-only view of this table (``models.Bundle``): every bundle row of the digest reads as
  quarantined;
- every ``/v2`` read door (docs/oci.md#quarantine-and-quotas), whatever state the manifest
  is stored in there: manifest GET/HEAD by tag and by digest (a bundle, a ``pending`` or
  ``accepted`` copy, a referrer of a quarantined subject), referrers of a quarantined subject,
  blob GET/HEAD (a blob whose own digest is quarantined too) and cross-repository mounts
  ask ``require_readable``; the tag list keeps out tags on quarantined digests
  (``readable_digest``, the check as a query).

Admins and reviewers keep their forensic view (``FORENSIC_ROLES``): they may read the
manifest and blobs of a quarantined digest. A quarantine cannot be lifted through the API.

Raises ``Quarantined`` (409, audited as ``denied`` by the app's one error handler).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, select, true
from sqlalchemy.orm import InstrumentedAttribute, Session

from modelward.registry.domains._state import iso
from modelward.registry.domains.attestations.rules import FORENSIC_ROLES
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound, Quarantined
from modelward.registry.models import Bundle, Principal, QuarantinedDigest, Repository

__all__ = [
    "FORENSIC_ROLES",
    "is_quarantined",
    "manifest_readable",
    "quarantine",
    "quarantine_json",
    "quarantine_of",
    "readable_digest",
    "require_not_quarantined",
    "require_readable",
]


def quarantine_of(session: Session, digest: str) -> QuarantinedDigest | None:
    """The quarantine of ``digest`` (any repository), or None."""
    return session.get(QuarantinedDigest, digest)


def is_quarantined(session: Session, digest: str) -> bool:
    return quarantine_of(session, digest) is not None


def quarantine_json(session: Session, row: QuarantinedDigest) -> dict[str, Any]:
    """``{digest, reason, quarantined_by, quarantined_at, quarantined_in}``."""
    by = session.get(Principal, row.quarantined_by) if row.quarantined_by else None
    repo = session.get(Repository, row.repo_id) if row.repo_id else None
    return {
        "digest": row.digest,
        "reason": row.reason,
        "quarantined_by": by.name if by else None,
        "quarantined_at": iso(row.quarantined_at),
        "quarantined_in": repo.name if repo else None,
    }


def require_not_quarantined(session: Session, digest: str) -> None:
    """Raise ``Quarantined`` (detail: the quarantine) when ``digest`` is quarantined
    in any repository."""
    row = quarantine_of(session, digest)
    if row is None:
        return
    raise Quarantined(
        f"bundle {digest} is quarantined: {row.reason}", detail=quarantine_json(session, row)
    )


def manifest_readable(session: Session, digest: str, caller: Caller) -> bool:
    """Whether ``caller`` may read the manifest (and so the files) of ``digest``: always
    for admins and reviewers (forensics), otherwise only when it is not quarantined."""
    return caller.role in FORENSIC_ROLES or not is_quarantined(session, digest)


def require_readable(session: Session, digest: str, caller: Caller) -> None:
    """Raise ``Quarantined`` unless ``caller`` may read the manifest of ``digest``
    (``manifest_readable``)."""
    if not manifest_readable(session, digest, caller):
        require_not_quarantined(session, digest)


def readable_digest(column: InstrumentedAttribute[str], caller: Caller) -> ColumnElement[bool]:
    """``manifest_readable`` as a WHERE clause: rows whose ``column`` names a digest
    ``caller`` may not read never come back (every row for admins and reviewers)."""
    if caller.role in FORENSIC_ROLES:
        return true()
    return column.not_in(select(QuarantinedDigest.digest))


def quarantine(
    session: Session, *, repo_name: str, digest: str, reason: str, caller: Caller
) -> QuarantinedDigest:
    """Quarantine ``digest`` everywhere, named through a repository that holds it (deleted
    bundles included); audited as ``bundle.quarantine``.

    Raises Forbidden (not an admin or reviewer), BadRequest (blank reason), NotFound (no
    bundle with that digest in the repository), Conflict (already quarantined).
    """
    if caller.role not in FORENSIC_ROLES:
        raise Forbidden("only admins and reviewers may quarantine bundles")
    if not reason.strip():
        raise BadRequest("a quarantine needs a reason")
    repo = get_repo(session, repo_name)
    held = session.execute(
        select(Bundle.id).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
    ).first()
    if held is None:
        raise NotFound(f"no bundle {digest} in {repo.name}")
    existing = quarantine_of(session, digest)
    if existing is not None:
        raise Conflict(
            f"bundle {digest} is already quarantined: {existing.reason}",
            detail=quarantine_json(session, existing),
        )
    row = QuarantinedDigest(
        digest=digest,
        reason=reason,
        repo_id=repo.id,
        quarantined_by=caller.id,
        quarantined_at=datetime.now(UTC),
    )
    session.add(row)
    session.flush()
    holders = session.execute(
        select(Repository.name)
        .join(Bundle, Bundle.repo_id == Repository.id)
        .where(Bundle.digest == digest)
        .order_by(Repository.name)
    ).scalars()
    append(
        session,
        actor=caller.name,
        action="bundle.quarantine",
        subject=f"{repo.name}@{digest}",
        details={"reason": reason, "repositories": list(holders)},
    )
    return row
