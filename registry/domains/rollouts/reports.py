"""Fleet reports: what serving workers sign about each interval, kept per rollout and
cohort (docs/rollouts.md#fleet-reports).

``ingest`` is the one door a report comes in by; it checks, in order, and keeps nothing
until every check passed (one signature verification, one insert):

1. the body is at most 64 KiB (413 ``too_large``, ``refuse_too_large``: the route reads no
   further), the envelope and its statement parse, the predicate type is a report's and
   the predicate parses (400 ``invalid_report``, ``detail.field`` naming the field);
2. it is signed by a sealed, unrevoked signing key registered to the calling principal,
   whose key id is the predicate's ``worker_keyid`` (403 ``report_untrusted``): the key is
   looked up by key id *and* caller in one query, so another principal's key, a revoked
   one or a row a database writer inserted (no seal) is no worker's;
3. its repository and alias are the path's, and its subject is its ``digest`` (400
   ``invalid_report``);
4. its ``rollout_id`` is null or the alias's latest rollout, and its ``digest`` one of
   that plan's two digests (the alias's signed digest when null) (409 ``report_refused``);
5. its ``seq`` is above the last kept from that key (409 ``report_replayed``; the
   unique (worker key, seq) pair decides a race).

A kept report whose digest is not the one the signed step assigns its key (``assigned``,
the cohort function workers use) is a fault: the answer says ``"counted": false`` and why,
and the analysis counts it in no cohort. Every refusal is audited
``rollout.report.refused`` with the reason; a kept report is not audited (its row keeps
the envelope verbatim). ``fleet`` and ``reports_in_window``
read them back for ``rollout status`` and the analysis.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from modelward.attest.errors import KeyError_
from modelward.attest.keys import load_public_key
from modelward.attest.rollout import (
    MAX_REPORT_BYTES,
    FleetReport,
    OpenedReport,
    ReportInvalid,
    ReportUntrusted,
    RolloutPlan,
    RolloutStep,
    StepRefused,
    make_report_predicate,
    open_report,
    parse_report_predicate,
    resolve_digest,
    verify_report,
    verify_step,
)
from modelward.attest.tuf import protected_role
from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.view import signed_plan, signed_step
from modelward.registry.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    PayloadTooLarge,
    RegistryError,
)
from modelward.registry.models import (
    Principal,
    Rollout,
    RolloutReport,
    SigningKey,
    TufMetadata,
    utcnow,
)

__all__ = [
    "ReportRefused",
    "StoredReport",
    "fleet",
    "ingest",
    "refuse_too_large",
    "reports_in_window",
]

CANDIDATE, STABLE = "candidate", "stable"


class ReportRefused(Conflict):
    """409: a verified report that does not fit the alias's rollout (``detail`` says
    what it names and what the alias holds)."""

    code = "report_refused"


@dataclass(frozen=True)
class StoredReport:
    """A kept report, as the analysis reads it: ``report`` is the verified predicate;
    ``cohort`` is by the reported digest (``candidate`` when it is the rollout's candidate,
    else ``stable``); ``assigned`` the digest the signed step assigned the key when the
    report arrived; ``received_at`` the registry's clock."""

    id: int
    worker_keyid: str
    principal_id: int
    rollout_pk: int | None
    digest: str
    assigned: str
    cohort: str
    seq: int
    received_at: datetime
    report: FleetReport


@dataclass(frozen=True)
class _Assignment:
    rollout: Rollout | None
    digests: tuple[str, ...]  # what the report may name
    assigned: str
    candidate: str | None


def _invalid(exc: ReportInvalid) -> BadRequest:
    return BadRequest(str(exc), code="invalid_report", detail={"field": exc.field})


def _untrusted(keyid: str, why: str) -> Forbidden:
    return Forbidden(
        f"a report signed by a key that is not a registered worker's: {why}",
        code="report_untrusted",
        detail={"worker_keyid": keyid, "why": why},
    )


def _worker_key(session: Session, state: AppState, keyid: str, caller: Caller) -> SigningKey:
    """(2): the caller's own sealed, unrevoked key ``keyid`` (authorization in the query)."""
    row = session.scalars(
        select(SigningKey).where(
            SigningKey.keyid == keyid,
            SigningKey.principal_id == caller.id,
            SigningKey.revoked_at.is_(None),
        )
    ).first()
    if row is None:
        raise _untrusted(keyid, f"no unrevoked key {keyid} is registered to {caller.name}")
    if not trust_of(state.settings).keys.row_seals().signing_key_ok(row):
        raise _untrusted(keyid, f"key {keyid} does not carry the registry's seal")
    return row


def _current(
    repo: MetadataRepository, repo_name: str, alias: str, stable_signed: str | None
) -> tuple[RolloutPlan, RolloutStep | None] | None:
    """The signed plan in force for the alias and its verified step, as a worker reads
    them (loader/rollout.py): None when no plan is signed or the alias moved since."""
    plan = signed_plan(repo, repo_name, alias)
    if plan is None or plan.stable != stable_signed:
        return None
    current = signed_step(repo, repo_name, alias)
    if current is None or current[0].rollout_id != plan.rollout_id:
        return plan, None
    try:
        return plan, verify_step(plan, current[0])
    except StepRefused:
        return plan, None


_Signed = tuple[str | None, tuple[RolloutPlan, RolloutStep | None] | None]
_SIGNED_CACHE: OrderedDict[tuple[str, str, tuple[tuple[str, int], ...]], _Signed] = OrderedDict()
_SIGNED_CACHE_SIZE = 256
_SIGNED_LOCK = threading.Lock()


def _signed_state(session: Session, state: AppState, repo_name: str, alias: str) -> _Signed:
    """The alias's signed digest and the plan and step in force, verified from the TUF
    metadata; kept per process by the versions they were verified at (the repository's
    roles, top-level targets and root: every signed change makes a new version), so the
    report after the first costs one query until something is signed again."""
    prefix = protected_role(repo_name, "")
    versions = tuple(
        (str(role), int(version))
        for role, version in session.execute(
            select(TufMetadata.role, func.max(TufMetadata.version))
            .where(
                or_(
                    TufMetadata.role.startswith(prefix, autoescape=True),
                    TufMetadata.role.in_(("targets", "root")),
                )
            )
            .group_by(TufMetadata.role)
            .order_by(TufMetadata.role)
        )
    )
    key = (repo_name, alias, versions)
    with _SIGNED_LOCK:
        if key in _SIGNED_CACHE:
            _SIGNED_CACHE.move_to_end(key)
            return _SIGNED_CACHE[key]
    stable_signed = state.signed.aliases(session, repo_name).get(alias)
    signed = stable_signed, _current(repository(session, state), repo_name, alias, stable_signed)
    with _SIGNED_LOCK:
        _SIGNED_CACHE[key] = signed
        while len(_SIGNED_CACHE) > _SIGNED_CACHE_SIZE:
            _SIGNED_CACHE.popitem(last=False)
    return signed


def _assignment(
    session: Session,
    state: AppState,
    *,
    repo_id: int,
    repo_name: str,
    alias: str,
    report: FleetReport,
) -> _Assignment:
    """(4): the digests the report may name and the digest the signed step assigns its key."""
    stable_signed, current = _signed_state(session, state, repo_name, alias)
    assigned = stable_signed
    if current is not None:
        assigned = resolve_digest(current[0], current[1], report.worker_keyid)
    latest = session.scalars(
        select(Rollout)
        .where(Rollout.repo_id == repo_id, Rollout.alias == alias)
        .order_by(Rollout.id.desc())
        .limit(1)
    ).first()
    if report.rollout_id is None:
        if stable_signed is None:
            raise ReportRefused(
                f"{repo_name}@{alias} has no signed target: a report without a rollout "
                "names the alias's signed digest",
                detail={"alias": alias, "digest": report.digest},
            )
        return _Assignment(None, (stable_signed,), assigned or stable_signed, None)
    if latest is None or latest.rollout_id != report.rollout_id:
        raise ReportRefused(
            f"rollout {report.rollout_id} is not {repo_name}@{alias}'s latest rollout "
            f"({latest.rollout_id if latest is not None else 'none'})",
            detail={
                "rollout_id": report.rollout_id,
                "latest": latest.rollout_id if latest is not None else None,
            },
        )
    digests = (latest.stable, latest.candidate)
    if current is not None and current[0].rollout_id == latest.rollout_id:
        digests = (current[0].stable, current[0].candidate)
    return _Assignment(latest, digests, assigned or latest.stable, latest.candidate)


def _keep(
    session: Session,
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    envelope: bytes,
    opened: OpenedReport,
    caller: Caller,
) -> dict[str, Any]:
    """Checks (2) to (5) and the insert, in one write transaction."""
    report = opened.report
    repo_row = get_repo(session, repo_name, caller)
    # (2): the caller's sealed, unrevoked worker key, and its signature over these bytes
    key_row = _worker_key(session, state, report.worker_keyid, caller)
    try:
        public_key = load_public_key(key_row.public_key_pem.encode(), f"key {key_row.keyid}")
        verify_report(envelope, opened, public_key)
    except (ReportUntrusted, KeyError_) as exc:
        raise _untrusted(report.worker_keyid, getattr(exc, "why", str(exc))) from exc
    # (3): about this alias, and about the digest it names
    for name, said, path in (
        ("repository", report.repository, repo_name),
        ("alias", report.alias, alias),
    ):
        if said != path:
            raise _invalid(ReportInvalid(name, f"{said!r} is not {path!r}, the path's"))
    if opened.subjects != (report.digest,):
        raise _invalid(
            ReportInvalid("subject", f"{opened.subjects[0]} is not the digest {report.digest}")
        )
    # (4): the alias's rollout and its digests
    fit = _assignment(
        session, state, repo_id=repo_row.id, repo_name=repo_name, alias=alias, report=report
    )
    if report.digest not in fit.digests:
        raise ReportRefused(
            f"{report.digest} is not a digest of {repo_name}@{alias}'s "
            + (f"rollout {report.rollout_id}" if report.rollout_id else "signed target")
            + f" ({', '.join(fit.digests)})",
            detail={"digest": report.digest, "allowed": list(fit.digests)},
        )
    # (5): no replay
    last = session.scalar(
        select(func.max(RolloutReport.seq)).where(RolloutReport.worker_keyid == report.worker_keyid)
    )
    if last is not None and report.seq <= last:
        raise _replayed(report, last)
    row = RolloutReport(
        repo_id=repo_row.id,
        alias=alias,
        rollout_pk=fit.rollout.id if fit.rollout is not None else None,
        worker_keyid=report.worker_keyid,
        principal_id=caller.id,
        digest=report.digest,
        seq=report.seq,
        received_at=utcnow(),
        interval_seconds=report.interval_seconds,
        requests=report.requests,
        errors=report.errors,
        retries=report.retries,
        predicate=json.dumps(make_report_predicate(**asdict(report)), sort_keys=True),
        envelope=envelope,
        assigned=fit.assigned,
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:  # another request kept this seq first
        raise _replayed(report, report.seq) from exc
    # kept either way (the fleet view shows a worker that has not switched yet), but only a
    # report of the digest its key is assigned is evidence, and only for that cohort
    if report.digest != fit.assigned:
        return {
            "id": row.id,
            "assigned": fit.assigned,
            "cohort": None,
            "counted": False,
            "why": (
                f"the signed step assigns worker key {report.worker_keyid} {fit.assigned}, "
                f"not {report.digest}: kept as a fault, evidence for no cohort"
            ),
        }
    cohort = CANDIDATE if report.digest == fit.candidate else STABLE
    return {"id": row.id, "assigned": fit.assigned, "cohort": cohort, "counted": True}


def _replayed(report: FleetReport, last: int) -> Conflict:
    return Conflict(
        f"report seq {report.seq} of worker key {report.worker_keyid} is not above the last "
        f"kept ({last}): a replay",
        code="report_replayed",
        detail={"worker_keyid": report.worker_keyid, "seq": report.seq, "last": last},
    )


def ingest(
    state: AppState, *, repo_name: str, alias: str, envelope: bytes, caller: Caller
) -> dict[str, Any]:
    """Keep one fleet report (the module's checks (1) to (5), in order): ``{id, assigned,
    cohort, counted}`` (``cohort`` None and ``why`` when the digest is not the assigned
    one). Raises BadRequest ``invalid_report``, Forbidden ``report_untrusted``, ReportRefused,
    Conflict ``report_replayed`` (each audited ``rollout.report.refused``),
    NotFound for a repository the caller may not read."""
    keyid: str | None = None
    try:
        # (1): envelope, statement, predicate type, predicate
        try:
            opened = open_report(envelope)
        except ReportInvalid as exc:
            raise _invalid(exc) from exc
        keyid = opened.report.worker_keyid
        with state.db.write() as session:
            return _keep(
                session,
                state,
                repo_name=repo_name,
                alias=alias,
                envelope=envelope,
                opened=opened,
                caller=caller,
            )
    except (BadRequest, Forbidden, Conflict) as exc:
        _audit_refusal(state, repo_name=repo_name, alias=alias, caller=caller, keyid=keyid, exc=exc)
        raise


def refuse_too_large(state: AppState, *, repo_name: str, alias: str, caller: Caller) -> NoReturn:
    """(1): a body over MAX_REPORT_BYTES, refused unread (413 ``too_large``) and audited."""
    exc = PayloadTooLarge(f"a fleet report is at most {MAX_REPORT_BYTES} bytes")
    _audit_refusal(state, repo_name=repo_name, alias=alias, caller=caller, keyid=None, exc=exc)
    raise exc


def _audit_refusal(
    state: AppState,
    *,
    repo_name: str,
    alias: str,
    caller: Caller,
    keyid: str | None,
    exc: RegistryError,
) -> None:
    with state.db.write() as session:
        append(
            session,
            actor=caller.name,
            action="rollout.report.refused",
            subject=f"{repo_name}@{alias}",
            details={
                "code": exc.code,
                "reason": exc.message[:1000],
                "worker_keyid": keyid,
                "detail": exc.detail,
            },
        )


def _stored(row: RolloutReport, candidate: str | None) -> StoredReport:
    return StoredReport(
        id=row.id,
        worker_keyid=row.worker_keyid,
        principal_id=row.principal_id,
        rollout_pk=row.rollout_pk,
        digest=row.digest,
        assigned=row.assigned,
        cohort=CANDIDATE if row.digest == candidate else STABLE,
        seq=row.seq,
        received_at=_aware(row.received_at),
        report=parse_report_predicate(json.loads(row.predicate)),
    )


def reports_in_window(  # noqa: PLR0917 - the contract with the analysis (spec section 2)
    session: Session,
    repo_id: int,
    alias: str,
    rollout_pk: int | None,
    since: datetime,
    until: datetime,
) -> list[StoredReport]:
    """The reports of ``repo_id``'s ``alias`` received in ``[since, until)`` (the registry's
    clock), oldest first: those about rollout ``rollout_pk`` (its cohorts by its candidate),
    or every report of the alias when ``rollout_pk`` is None (all ``stable`` then)."""
    query = select(RolloutReport).where(
        RolloutReport.repo_id == repo_id,
        RolloutReport.alias == alias,
        RolloutReport.received_at >= since,
        RolloutReport.received_at < until,
    )
    candidate = None
    if rollout_pk is not None:
        query = query.where(RolloutReport.rollout_pk == rollout_pk)
        candidate = session.scalar(select(Rollout.candidate).where(Rollout.id == rollout_pk))
    rows = session.scalars(query.order_by(RolloutReport.received_at, RolloutReport.id))
    return [_stored(row, candidate) for row in rows]


def _aware(value: datetime) -> datetime:
    """SQLite hands back naive datetimes, which are UTC here."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def fleet(
    session: Session,
    row: Rollout,
    plan: RolloutPlan | None,
    step: RolloutStep | None,
    *,
    now: datetime,
    silent_after_seconds: float,
) -> dict[str, Any]:
    """Which workers run which digest during rollout ``row``: the latest report of each
    worker key since the rollout began (``workers``: keyid, principal, digest, assigned,
    cohort, last_report_at, silent) and per-cohort totals (``cohorts``: workers, silent,
    requests, errors, capacity of the workers' latest reports, stable_warm).

    ``plan`` and ``step`` are the signed plan of ``row`` and its verified step (None: not
    signed, not started): ``assigned`` is what they assign each key now. A worker is
    ``silent`` when its latest report is older than ``silent_after_seconds``."""
    latest_ids = (
        select(func.max(RolloutReport.id))
        .where(
            RolloutReport.repo_id == row.repo_id,
            RolloutReport.alias == row.alias,
            RolloutReport.received_at >= row.created_at,
        )
        .group_by(RolloutReport.worker_keyid)
    )
    rows = session.execute(
        select(RolloutReport, Principal.name)
        .join(Principal, Principal.id == RolloutReport.principal_id)
        .where(RolloutReport.id.in_(latest_ids))
        .order_by(RolloutReport.worker_keyid)
    ).all()
    cutoff = now - timedelta(seconds=silent_after_seconds)
    workers: list[dict[str, Any]] = []
    cohorts: dict[str, dict[str, int]] = {
        name: {"workers": 0, "silent": 0, "requests": 0, "errors": 0, "capacity": 0,
               "stable_warm": 0}
        for name in (CANDIDATE, STABLE)
    }  # fmt: skip
    for report, principal in rows:
        cohort = CANDIDATE if report.digest == row.candidate else STABLE
        received = _aware(report.received_at)
        silent = received < cutoff
        predicate = json.loads(report.predicate)
        assigned = row.stable
        if plan is not None:
            assigned = resolve_digest(plan, step, report.worker_keyid)
        workers.append(
            {
                "keyid": report.worker_keyid,
                "principal": principal,
                "digest": report.digest,
                "assigned": assigned,
                "cohort": cohort,
                "last_report_at": iso(received),
                "silent": silent,
            }
        )
        totals = cohorts[cohort]
        totals["workers"] += 1
        totals["silent"] += int(silent)
        totals["requests"] += report.requests
        totals["errors"] += report.errors
        totals["capacity"] += 0 if silent else int(predicate.get("capacity", 0))
        totals["stable_warm"] += int(bool(predicate.get("stable_warm")))
    return {
        "silent_after_seconds": silent_after_seconds,
        "workers": workers,
        "cohorts": cohorts,
    }
