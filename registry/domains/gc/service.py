"""Garbage collection of blobs no held bundle names and of abandoned upload sessions.

``collect`` runs, in order (docs/registry.md#storage-hygiene), with ``cutoff = now - window``
(``gc_window_seconds``):
  (1) the caller is an admin;
  (2) upload sessions idle since before the cutoff are deleted (each by a conditional DELETE,
      so a chunk that lands meanwhile keeps its session), then their stored chunks;
  (3) blobs are collected in batches, each in one serialized write transaction (registry/db.py:
      the same lock every push's recording transaction takes), which selects them again under
      the lock and, for each, deletes the stored object and then the row. A blob is collected
      only when all of these hold at that moment:
        - no held bundle names it (``bundle_blobs``; a bundle is held unless it is tombstoned,
          and a quarantined bundle is held even then: its blobs stay for forensics);
        - its row is older than the cutoff;
        - no blob lease younger than the cutoff names it: every upload that stores a blob,
          or stores again one that exists, leases it (blobs.service.record_blob), so a push
          that has uploaded its blobs but not committed its manifest keeps them for a window;
  (4) leases older than the cutoff are deleted (they protect nothing any more);
  (5) strays: objects the store holds that the database never recorded or no longer does (a
      process killed between storing and recording a blob, or between deleting a session's
      row and its chunks), last modified before the cutoff: blobs with no row (checked again
      under the write lock) and upload chunks with no session;
  (6) one ``storage.gc`` audit event records what was done (or, dry run, what would be),
      with ``reclaimed_bytes_total``: the bytes every run so far deleted (blob, upload and
      stray bytes), which ``/metrics`` reads back (``reclaimed_total``).

Why a push never loses a blob: a push records its bundle (and its ``bundle_blobs`` rows) in a
write transaction that checks again that every blob row exists (bundles.service step 9), and
GC deletes under the same lock. Either the bundle was recorded first, and GC sees it holds the
blob, or GC deleted first, and the push is refused (400 ``missing_blobs``; send the blob again)
instead of recording a bundle whose bytes are gone. The window only decides how long an
uncommitted push may take before it has to upload again; it never decides safety.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.errors import Forbidden
from modelward.registry.models import (
    AuditRow,
    Blob,
    BlobLease,
    Bundle,
    BundleBlob,
    UploadSession,
)
from modelward.registry.storage import StoredObject

__all__ = ["GC_ACTION", "GcReport", "collect", "collectable", "reclaimed_total"]

GC_ACTION = "storage.gc"
_RECLAIMED = ("blob_bytes", "upload_bytes", "stray_bytes")

BATCH = 100  # blobs per write transaction
LISTED = 1000  # digests named in the answer (the counts are always complete)
log = logging.getLogger("modelward.registry.gc")


@dataclass
class GcReport:
    """What one run deleted (or, dry run, would delete)."""

    dry_run: bool
    window_seconds: int
    cutoff: str
    blobs: int = 0
    blob_bytes: int = 0
    uploads: int = 0
    upload_bytes: int = 0
    leases: int = 0
    stray_blobs: int = 0
    stray_uploads: int = 0
    stray_bytes: int = 0
    digests: list[str] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def collectable(cutoff: datetime) -> ColumnElement[bool]:
    """The condition on ``Blob`` rows that (3) collects (module docstring)."""
    held = exists().where(
        BundleBlob.digest == Blob.digest,
        Bundle.id == BundleBlob.bundle_id,
        or_(Bundle.tombstoned.is_(False), Bundle.quarantined),
    )
    leased = exists().where(BlobLease.digest == Blob.digest, BlobLease.created_at >= cutoff)
    return and_(Blob.created_at < cutoff, ~held, ~leased)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def collect(
    state: AppState, *, caller: Caller, dry_run: bool, now: datetime | None = None
) -> GcReport:
    """Collect (or, ``dry_run``, count) garbage; returns the report. Raises Forbidden unless
    ``caller`` is an admin. A blob whose stored object cannot be deleted keeps its row and is
    listed in ``failures``."""
    # (1): admins only.
    if not caller.is_admin:
        raise Forbidden(f"only an admin may collect garbage ({caller.name} is {caller.role})")
    window = state.settings.gc_window_seconds
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=window)
    report = GcReport(dry_run=dry_run, window_seconds=window, cutoff=_iso(cutoff))
    _uploads(state, cutoff, report)  # (2)
    _blobs(state, cutoff, report)  # (3)
    # (4): expired leases.
    expired = BlobLease.created_at < cutoff
    if dry_run:
        with state.db.read() as session:
            report.leases = session.execute(
                select(func.count()).select_from(BlobLease).where(expired)
            ).scalar_one()
    _strays(state, cutoff, report)  # (5)
    # (6): one audit event for the run.
    with state.db.write() as session:
        if not dry_run:
            result = session.execute(delete(BlobLease).where(expired))
            report.leases = result.rowcount  # type: ignore[attr-defined]
        details = report.as_dict()
        details.pop("digests")
        done = 0 if dry_run else sum(int(details[k]) for k in _RECLAIMED)
        details["reclaimed_bytes_total"] = reclaimed_total(session) + done
        append(session, actor=caller.name, action=GC_ACTION, subject="blobs", details=details)
    return report


def reclaimed_total(session: Session) -> int:
    """Bytes every garbage collection so far deleted: the latest ``storage.gc`` event's
    ``reclaimed_bytes_total``, or, before any event carried it, the sum of every run's."""
    latest = session.scalar(
        select(AuditRow.details)
        .where(AuditRow.action == GC_ACTION)
        .order_by(AuditRow.seq.desc())
        .limit(1)
    )
    if latest is None:
        return 0
    total = _details(latest).get("reclaimed_bytes_total")
    if isinstance(total, int):
        return total
    runs = (
        _details(d)
        for d in session.scalars(select(AuditRow.details).where(AuditRow.action == GC_ACTION))
    )
    return sum(
        v
        for run in runs
        if run.get("dry_run") is False
        for k in _RECLAIMED
        if isinstance(v := run.get(k), int)
    )


def _details(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _uploads(state: AppState, cutoff: datetime, report: GcReport) -> None:
    """(2): sessions idle since before the cutoff, and their chunks."""
    with state.db.read() as session:
        idle = (
            session.execute(
                select(UploadSession)
                .where(UploadSession.updated_at < cutoff)
                .order_by(UploadSession.updated_at)
            )
            .scalars()
            .all()
        )
    for row in idle:
        if not report.dry_run:
            with state.db.write() as session:
                gone = session.execute(
                    delete(UploadSession).where(
                        UploadSession.id == row.id, UploadSession.updated_at == row.updated_at
                    )
                )
                if gone.rowcount == 0:  # type: ignore[attr-defined]
                    continue  # a chunk landed meanwhile, or it ended
            state.store.delete_upload(row.id, json.loads(row.parts))
        report.uploads += 1
        report.upload_bytes += row.offset


def _blobs(state: AppState, cutoff: datetime, report: GcReport) -> None:
    """(3): unheld, old, unleased blobs, a batch per serialized write transaction."""
    if report.dry_run:
        with state.db.read() as session:
            count, total = session.execute(
                select(func.count(), func.coalesce(func.sum(Blob.size), 0)).where(
                    collectable(cutoff)
                )
            ).one()
            report.digests = list(
                session.execute(
                    select(Blob.digest)
                    .where(collectable(cutoff))
                    .order_by(Blob.digest)
                    .limit(LISTED)
                ).scalars()
            )
        report.blobs, report.blob_bytes = int(count), int(total)
        return
    failed: set[str] = set()
    while True:
        with state.db.write() as session:
            query = select(Blob.digest, Blob.size).where(collectable(cutoff))
            if failed:
                query = query.where(Blob.digest.not_in(failed))
            batch = session.execute(query.order_by(Blob.digest).limit(BATCH)).all()
            for digest, size in batch:
                try:
                    state.store.delete(digest)
                except Exception as exc:  # noqa: BLE001 - any store error keeps the row
                    log.warning("gc: could not delete blob %s: %s", digest, exc)
                    failed.add(digest)
                    report.failures.append({"digest": digest, "error": str(exc)})
                    continue
                session.execute(delete(Blob).where(Blob.digest == digest))
                _count(report, digest, size)
        if len(batch) < BATCH:
            return


def _count(report: GcReport, digest: str, size: int) -> None:
    report.blobs += 1
    report.blob_bytes += size
    if len(report.digests) < LISTED:
        report.digests.append(digest)


def _strays(state: AppState, cutoff: datetime, report: GcReport) -> None:
    """(5): stored objects the database does not know, older than the cutoff."""
    oldest = cutoff.timestamp()
    # Upload chunks whose session row is gone.
    leftovers = [u for u in state.store.stored_uploads() if u.modified < oldest]
    with state.db.read() as session:
        live = (
            set(
                session.execute(
                    select(UploadSession.id).where(
                        UploadSession.id.in_([u.name for u in leftovers])
                    )
                ).scalars()
            )
            if leftovers
            else set()
        )
    for upload in leftovers:
        if upload.name in live:
            continue
        if not report.dry_run:
            state.store.purge_upload(upload.name)
        report.stray_uploads += 1
        report.stray_bytes += upload.size
    # Blobs without a row, a batch at a time, checked again under the write lock.
    batch: list[StoredObject] = []
    for stored in state.store.stored_blobs():
        if stored.modified < oldest:
            batch.append(stored)
        if len(batch) >= BATCH:
            _stray_blobs(state, batch, report)
            batch = []
    if batch:
        _stray_blobs(state, batch, report)


def _stray_blobs(state: AppState, batch: list[StoredObject], report: GcReport) -> None:
    names = [b.name for b in batch]
    if report.dry_run:
        with state.db.read() as session:
            known = set(
                session.execute(select(Blob.digest).where(Blob.digest.in_(names))).scalars()
            )
        strays = [b for b in batch if b.name not in known]
    else:
        with state.db.write() as session:
            known = set(
                session.execute(select(Blob.digest).where(Blob.digest.in_(names))).scalars()
            )
            strays = []
            for stored in batch:
                if stored.name in known:
                    continue
                try:
                    state.store.delete(stored.name)
                except Exception as exc:  # noqa: BLE001 - any store error: try again next run
                    log.warning("gc: could not delete stray blob %s: %s", stored.name, exc)
                    report.failures.append({"digest": stored.name, "error": str(exc)})
                    continue
                strays.append(stored)
    for stored in strays:
        report.stray_blobs += 1
        report.stray_bytes += stored.size
