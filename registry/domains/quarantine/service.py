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
- blob downloads (``blobs.service.readable_blob_size``) ask ``quarantined_blobs``: a blob
  that a quarantined digest names (a bundle of it holds it, or a ``/v2`` pending copy of it
  names it, ``named_blobs``) is readable only to forensic roles unless a
  live bundle recorded before the quarantine holds it too, so re-wrapping the layers in a
  new manifest serves nothing;
- a push (``bundles.service.push``, and so the ``/v2`` manifest PUT) naming such a blob as a
  layer or config is refused (``require_no_quarantined_blobs``);
- every ``/v2`` read door (docs/oci.md#quarantine-and-quotas), whatever state the manifest
  is stored in there: manifest GET/HEAD by tag and by digest (a bundle, a ``pending`` or
  ``accepted`` copy, a referrer of a quarantined subject), referrers of a quarantined subject,
  blob GET/HEAD (a blob whose own digest is quarantined too) and cross-repository mounts
  ask ``require_readable``; the tag list keeps out tags on quarantined digests
  (``readable_digest``, the check as a query).

Admins and reviewers keep their forensic view (``authz.Action.REVIEW``): they may read the
manifest and blobs of a quarantined digest. A quarantine is lifted the way it was set
(``require_liftable``, ``lift``; docs/registry.md#quarantine): by a reviewer, with a reason,
and signed by a reviewer when the signed quarantine role names it; never while an alias
points at the digest (moving it back is a normal alias decision).

Raises ``Quarantined`` (409, audited as ``denied`` by the app's one error handler).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, select, true
from sqlalchemy.orm import InstrumentedAttribute, Session

from modelward.registry.domains._state import iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import Action, allows, may, may_clause
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound, Quarantined
from modelward.registry.models import (
    Alias,
    Bundle,
    BundleBlob,
    OciManifest,
    Principal,
    QuarantinedDigest,
    Repository,
)

__all__ = [
    "held_where_readable",
    "is_quarantined",
    "lift",
    "manifest_readable",
    "named_blobs",
    "pending_record",
    "quarantine",
    "quarantine_json",
    "quarantine_of",
    "quarantined_blobs",
    "quarantined_manifest",
    "readable_digest",
    "require_liftable",
    "require_no_quarantined_blobs",
    "require_not_quarantined",
    "require_readable",
]


def quarantine_of(session: Session, digest: str) -> QuarantinedDigest | None:
    """The quarantine of ``digest`` (any repository), or None."""
    return session.get(QuarantinedDigest, digest)


def is_quarantined(session: Session, digest: str) -> bool:
    return quarantine_of(session, digest) is not None


def quarantine_json(
    session: Session, row: QuarantinedDigest, reader: Caller | None
) -> dict[str, Any]:
    """``{digest, reason, quarantined_by, quarantined_at, quarantined_in}`` for ``reader``:
    the repository the digest was quarantined through and the reviewer who did it are
    named only to a principal who may read that repository (``auth.authz`` ``READ``), null
    to anyone else, so that a 409/403 about a public bundle also held in a private
    repository does not name the private one (docs/tuf.md#private-repositories). None: the
    registry's own record (the audit log), every field."""
    repo = session.get(Repository, row.repo_id) if row.repo_id else None
    shown = reader is None or (repo is not None and may(session, reader, Action.READ, repo))
    by = session.get(Principal, row.quarantined_by) if shown and row.quarantined_by else None
    return {
        "digest": row.digest,
        "reason": row.reason,
        "quarantined_by": by.name if by else None,
        "quarantined_at": iso(row.quarantined_at),
        "quarantined_in": repo.name if shown and repo else None,
    }


def require_not_quarantined(session: Session, digest: str, reader: Caller) -> None:
    """Raise ``Quarantined`` (detail: the quarantine as ``reader`` may see it) when
    ``digest`` is quarantined in any repository."""
    row = quarantine_of(session, digest)
    if row is None:
        return
    raise Quarantined(
        f"bundle {digest} is quarantined: {row.reason}",
        detail=quarantine_json(session, row, reader),
    )


def quarantined_blobs(session: Session, digests: Iterable[str]) -> dict[str, str]:
    """Which of ``digests`` (blobs) the quarantine covers, each with the quarantined digest
    that covers it (docs/registry.md#quarantine):

    1. a blob whose own digest is quarantined;
    2. a blob that a bundle of a quarantined digest holds, unless a live bundle (neither
       tombstoned nor quarantined) recorded BEFORE that quarantine holds it too: a layer
       shared in good faith (a tokenizer, a base shard) stays readable, while a manifest
       pushed after the quarantine that re-wraps its layers does not bring them back.
       A quarantine older than migration 0004 has no time: its bundle's own creation
       stands in for it (a lower bound).

    Blobs absent from the answer are clear."""
    wanted = set(digests)
    if not wanted:
        return {}
    out: dict[str, str] = {}
    # (2): the earliest quarantine over each blob's quarantined holders (bundles, and
    # ``/v2`` pending manifests, which hold their blobs before any bundle does) ...
    earliest_q: dict[str, tuple[datetime, str]] = {}
    for blob, held_by, at, created in _quarantined_holders(session, wanted):
        when = at if at is not None else created
        if blob not in earliest_q or (when, held_by) < earliest_q[blob]:
            earliest_q[blob] = (when, held_by)
    # ... against the earliest live, unquarantined holder
    earliest_live: dict[str, datetime] = {}
    if earliest_q:
        for blob, created in session.execute(
            select(BundleBlob.digest, Bundle.created_at)
            .join(Bundle, Bundle.id == BundleBlob.bundle_id)
            .where(BundleBlob.digest.in_(set(earliest_q)))
            .where(Bundle.tombstoned.is_(False))
            .where(Bundle.digest.not_in(select(QuarantinedDigest.digest)))
        ).tuples():
            when = created
            if blob not in earliest_live or when < earliest_live[blob]:
                earliest_live[blob] = when
    for blob, (quarantined_at, held_by) in earliest_q.items():
        live = earliest_live.get(blob)
        if live is None or live >= quarantined_at:
            out[blob] = held_by
    # (1): the blob's own digest
    for own in session.execute(
        select(QuarantinedDigest.digest).where(QuarantinedDigest.digest.in_(wanted))
    ).scalars():
        out[own] = own
    return out


def _quarantined_holders(
    session: Session, wanted: set[str]
) -> Iterator[tuple[str, str, datetime | None, datetime]]:
    """(blob, quarantined digest, quarantined at, holder created at) for each blob of
    ``wanted`` that a bundle of a quarantined digest names (``bundle_blobs``), or that a
    ``/v2`` manifest stored without a subject (``pending`` or ``accepted``) under a
    quarantined digest names as its config or a layer."""
    yield from session.execute(
        select(
            BundleBlob.digest, Bundle.digest, QuarantinedDigest.quarantined_at, Bundle.created_at
        )
        .join(Bundle, Bundle.id == BundleBlob.bundle_id)
        .join(QuarantinedDigest, QuarantinedDigest.digest == Bundle.digest)
        .where(BundleBlob.digest.in_(wanted))
    ).tuples()
    for digest, manifest, at, created in session.execute(
        select(
            OciManifest.digest,
            OciManifest.manifest,
            QuarantinedDigest.quarantined_at,
            OciManifest.created_at,
        )
        .join(QuarantinedDigest, QuarantinedDigest.digest == OciManifest.digest)
        .where(OciManifest.subject.is_(None))
    ).tuples():
        for blob in named_blobs(bytes(manifest)) & wanted:
            yield blob, digest, at, created


def named_blobs(manifest: bytes) -> set[str]:
    """The blob digests a stored bundle manifest names (its config and layers). The bytes
    passed the strict manifest parse when they were stored; anything unreadable names
    nothing more."""
    try:
        doc = json.loads(manifest)
    except (ValueError, RecursionError):
        return set()
    if not isinstance(doc, dict):
        return set()
    descriptors = [doc.get("config"), *(doc.get("layers") or [])]
    return {
        str(d["digest"])
        for d in descriptors
        if isinstance(d, dict) and isinstance(d.get("digest"), str)
    }


def require_no_quarantined_blobs(session: Session, digests: Iterable[str], caller: Caller) -> None:
    """Raise ``Quarantined`` (detail: the blob and the quarantine that covers it) when the
    quarantine covers one of ``digests`` (``quarantined_blobs``), unless ``caller`` is an
    admin or reviewer: a new manifest cannot re-wrap quarantined weights."""
    if allows(caller.role, Action.REVIEW):
        return
    held = quarantined_blobs(session, digests)
    if not held:
        return
    blob = min(held)
    if not held_where_readable(session, held[blob], caller):
        # a bundle only repositories the caller may not read hold: its digest, reason and
        # repository are theirs (docs/tuf.md#private-repositories); the weights stay refused
        raise Quarantined(
            f"blob {blob} belongs to a quarantined bundle; a manifest may not name it",
            detail={"blob": blob},
        )
    row = quarantine_of(session, held[blob])
    reason = row.reason if row is not None else "quarantined"
    detail: dict[str, Any] = {"blob": blob, "quarantined_digest": held[blob]}
    if row is not None:
        detail["quarantine"] = quarantine_json(session, row, caller)
    raise Quarantined(
        f"blob {blob} belongs to quarantined bundle {held[blob]} ({reason}); a manifest "
        "may not name it",
        detail=detail,
    )


def held_where_readable(session: Session, digest: str, caller: Caller) -> bool:
    """Whether a repository ``caller`` may read holds bundle ``digest`` (deleted ones too)
    or its ``/v2`` pending manifest: what a quarantine of a digest may tell him of it."""
    readable = select(Repository.id).where(may_clause(caller, Action.READ))
    bundle = select(Bundle.id).where(Bundle.digest == digest, Bundle.repo_id.in_(readable))
    pending = select(OciManifest.id).where(
        OciManifest.digest == digest, OciManifest.repo_id.in_(readable)
    )
    return session.execute(bundle.union_all(pending).limit(1)).first() is not None


def manifest_readable(session: Session, digest: str, caller: Caller) -> bool:
    """Whether ``caller`` may read the manifest (and so the files) of ``digest``: always
    for admins and reviewers (forensics), otherwise only when it is not quarantined."""
    return allows(caller.role, Action.REVIEW) or not is_quarantined(session, digest)


def require_readable(session: Session, digest: str, caller: Caller) -> None:
    """Raise ``Quarantined`` unless ``caller`` may read the manifest of ``digest``
    (``manifest_readable``)."""
    if not manifest_readable(session, digest, caller):
        require_not_quarantined(session, digest, caller)


def readable_digest(column: InstrumentedAttribute[str], caller: Caller) -> ColumnElement[bool]:
    """``manifest_readable`` as a WHERE clause: rows whose ``column`` names a digest
    ``caller`` may not read never come back (every row for admins and reviewers)."""
    if allows(caller.role, Action.REVIEW):
        return true()
    return column.not_in(select(QuarantinedDigest.digest))


def quarantine(
    session: Session, *, repo_name: str, digest: str, reason: str, caller: Caller
) -> QuarantinedDigest:
    """Quarantine ``digest`` everywhere, named through a repository that holds it as a
    bundle (deleted bundles included) or only as a ``/v2`` pending manifest (no bundle
    anywhere yet: the quarantine list needs none); audited as ``bundle.quarantine``.

    Raises Forbidden (not an admin or reviewer), BadRequest (blank reason), NotFound (no
    bundle and no pending manifest with that digest in the repository), Conflict (already
    quarantined).
    """
    if not allows(caller.role, Action.REVIEW):
        raise Forbidden("only admins and reviewers may quarantine bundles")
    if not reason.strip():
        raise BadRequest("a quarantine needs a reason")
    repo = _holding_repo(session, repo_name, digest, caller)
    existing = quarantine_of(session, digest)
    if existing is not None:
        raise Conflict(
            f"bundle {digest} is already quarantined: {existing.reason}",
            detail=quarantine_json(session, existing, caller),
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
    its_blobs = _blobs_of(session, digest)
    covered = sorted(quarantined_blobs(session, its_blobs))
    append(
        session,
        actor=caller.name,
        action="bundle.quarantine",
        subject=f"{repo.name}@{digest}",
        details={
            "reason": reason,
            "repositories": list(holders),
            "shares_blobs_with": _sharing(session, its_blobs),
            # the files this quarantine takes out of circulation in every organization
            # (docs/registry.md#quarantine): read, mounted or named by a new manifest
            "covers_blobs": covered[:SHARING_LISTED],
            "covers_blobs_total": len(covered),
        },
    )
    return row


def _blobs_of(session: Session, digest: str) -> set[str]:
    """The blobs a bundle of ``digest`` (any repository) or a ``/v2`` copy of it names."""
    out = set(
        session.execute(
            select(BundleBlob.digest)
            .join(Bundle, Bundle.id == BundleBlob.bundle_id)
            .where(Bundle.digest == digest)
        ).scalars()
    )
    for manifest in session.execute(
        select(OciManifest.manifest).where(
            OciManifest.digest == digest, OciManifest.subject.is_(None)
        )
    ).scalars():
        out |= named_blobs(bytes(manifest))
    return out


def _holding_repo(session: Session, repo_name: str, digest: str, caller: Caller) -> Repository:
    """The repository ``repo_name`` when it holds ``digest`` as a bundle (deleted ones too) or
    a ``/v2`` pending manifest; NotFound otherwise (and when ``caller`` may not read it)."""
    repo = get_repo(session, repo_name, caller)
    held = session.execute(
        select(Bundle.id).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
    ).first()
    if held is None and _pending_copy(session, repo, digest) is None:
        raise NotFound(f"no bundle or pending manifest {digest} in {repo.name}")
    return repo


def _pending_copy(session: Session, repo: Repository, digest: str) -> OciManifest | None:
    """The ``/v2`` copy of bundle manifest ``digest`` stored in ``repo`` (pending its
    attestations), if any."""
    return session.execute(
        select(OciManifest).where(
            OciManifest.repo_id == repo.id,
            OciManifest.digest == digest,
            OciManifest.subject.is_(None),
        )
    ).scalar_one_or_none()


def quarantined_manifest(session: Session, repo: Repository, digest: str) -> bytes:
    """The manifest bytes of ``digest`` as ``repo`` holds it: its bundle's, else its pending
    ``/v2`` copy's (what the quarantine role's proposal names). Raises NotFound."""
    bundle = session.execute(
        select(Bundle).where(Bundle.repo_id == repo.id, Bundle.digest == digest)
    ).scalar_one_or_none()
    if bundle is not None:
        return bytes(bundle.manifest)
    pending = _pending_copy(session, repo, digest)
    if pending is None:
        raise NotFound(f"no bundle or pending manifest {digest} in {repo.name}")
    return bytes(pending.manifest)


def pending_record(session: Session, row: QuarantinedDigest) -> dict[str, Any]:
    """The answer to quarantining a digest no bundle holds (only a pending ``/v2`` copy):
    the bundle record's quarantine fields, ``manifest`` null, ``state`` ``pending``."""
    return {
        **quarantine_json(session, row, None),  # to the reviewer who quarantined it
        "manifest": None,
        "quarantined": True,
        "quarantine_reason": row.reason,
        "tombstoned": False,
        "state": "pending",
    }


SHARING_LISTED = 50  # the most bundles a quarantine's audit event names as sharing its blobs


def _sharing(session: Session, its_blobs: set[str]) -> list[str]:
    """``repo@digest`` of the live, unquarantined bundles (at most ``SHARING_LISTED``) that
    hold one of ``its_blobs`` (the quarantined digest's): they keep those blobs readable when
    recorded before the quarantine (``quarantined_blobs``), so a reviewer sees which to look
    at (a re-wrap pushed before the quarantine among them)."""
    rows = session.execute(
        select(Repository.name, Bundle.digest)
        .join(Bundle, Bundle.repo_id == Repository.id)
        .join(BundleBlob, BundleBlob.bundle_id == Bundle.id)
        .where(BundleBlob.digest.in_(its_blobs))
        .where(Bundle.tombstoned.is_(False))
        .where(Bundle.digest.not_in(select(QuarantinedDigest.digest)))
        .distinct()
        .order_by(Repository.name, Bundle.digest)
        .limit(SHARING_LISTED)
    ).tuples()
    return [f"{name}@{held}" for name, held in rows]


def require_liftable(
    session: Session, *, repo_name: str, digest: str, reason: str, caller: Caller
) -> QuarantinedDigest:
    """The quarantine of ``digest``, when ``caller`` may lift it now, named through a
    repository that holds it (as ``quarantine``).

    Raises Forbidden (not an admin or reviewer), BadRequest (blank reason), NotFound (no
    bundle or pending manifest with that digest in the repository, or no quarantine),
    Conflict ``alias_points_at_quarantined`` (an alias, in any repository, still points at
    the digest: a lift never puts a bundle back in service on its own; move the alias
    away first, and back later through the normal decision)."""
    if not allows(caller.role, Action.REVIEW):
        raise Forbidden("only admins and reviewers may lift a quarantine")
    if not reason.strip():
        raise BadRequest("lifting a quarantine needs a reason")
    _holding_repo(session, repo_name, digest, caller)
    row = quarantine_of(session, digest)
    if row is None:
        raise NotFound(
            f"bundle {digest} is not quarantined; nothing to lift", code="not_quarantined"
        )
    aliases = [
        f"{name}@{alias}"
        for name, alias in session.execute(
            select(Repository.name, Alias.name)
            .join(Alias, Alias.repo_id == Repository.id)
            .where(Alias.digest == digest)
            .order_by(Repository.name, Alias.name)
        ).tuples()
    ]
    if aliases:
        raise Conflict(
            f"bundle {digest} cannot be lifted while {', '.join(aliases)} still point(s) at "
            "it: a lift would put it back in service without an alias decision; move "
            f"{'them' if len(aliases) > 1 else 'it'} to another bundle first, and back later "
            "with `modelward alias set` (approvals as usual)",
            detail={"digest": digest, "aliases": aliases},
            code="alias_points_at_quarantined",
        )
    return row


def lift(session: Session, *, digest: str, reason: str, actor: str, signed_by: str | None) -> bool:
    """Take ``digest`` off the quarantine (the row goes; every door serves it again),
    audited ``bundle.quarantine.lift`` with the reason and who signed it (None: the
    quarantine was never signed for workers, so neither is its lift). Returns False when
    it was not quarantined (lifted meanwhile)."""
    row = quarantine_of(session, digest)
    if row is None:
        return False
    before = quarantine_json(session, row, None)  # the audit record
    session.delete(row)
    session.flush()
    append(
        session,
        actor=actor,
        action="bundle.quarantine.lift",
        subject=f"{before['quarantined_in'] or '?'}@{digest}",
        details={"reason": reason, "signed_by": signed_by, "quarantine": before},
    )
    return True
