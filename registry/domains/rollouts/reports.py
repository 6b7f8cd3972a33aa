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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, NoReturn, cast

from sqlalchemy import Table, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from modelward.attest.errors import KeyError_
from modelward.attest.keys import VerifyingKey, load_public_key
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
from modelward.registry.domains.signing.tuf.store import SessionStore
from modelward.registry.domains.signing.tuf.view import signed_plan, signed_step
from modelward.registry.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RegistryError,
)
from modelward.registry.models import (
    Principal,
    Repository,
    Rollout,
    RolloutReport,
    SigningKey,
    utcnow,
)

__all__ = [
    "Incoming",
    "Outcome",
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
class Incoming:
    """One report as the route hands it in: the path's repository and alias, the body
    verbatim, the authenticated caller."""

    repo_name: str
    alias: str
    envelope: bytes
    caller: Caller


@dataclass(frozen=True)
class _Assignment:
    rollout_pk: int | None
    digests: tuple[str, ...]  # what the report may name
    assigned: str
    candidate: str | None


@dataclass(frozen=True)
class _Fit:
    """What the alias holds for a batch: the signed digest, the plan and step in force,
    the latest rollout (id, public id, stable, candidate)."""

    stable_signed: str | None
    current: tuple[RolloutPlan, RolloutStep | None] | None
    latest: tuple[int, str, str, str] | None


@dataclass
class _Batch:
    """What one write transaction read for its reports, each at most once: the callers'
    repositories, the worker keys, the last ``seq`` per key (raised as reports are kept),
    what each alias holds."""

    session: Session
    state: AppState
    sealed: Callable[[SigningKey], bool]  # the row seals' signing_key_ok
    keys: dict[str, list[SigningKey]]
    last_seq: dict[str, int]
    repos: dict[tuple[str, int], Repository | NotFound] = field(default_factory=dict)
    fits: dict[tuple[int, str], _Fit] = field(default_factory=dict)


def _invalid(exc: ReportInvalid) -> BadRequest:
    return BadRequest(str(exc), code="invalid_report", detail={"field": exc.field})


def _untrusted(keyid: str, why: str) -> Forbidden:
    return Forbidden(
        f"a report signed by a key that is not a registered worker's: {why}",
        code="report_untrusted",
        detail={"worker_keyid": keyid, "why": why},
    )


def _worker_key(batch: _Batch, keyid: str, caller: Caller) -> SigningKey:
    """(2): the caller's own sealed, unrevoked key ``keyid`` (authorization in the query:
    the batch read the unrevoked rows of its key ids; the caller's is picked here)."""
    row = next((r for r in batch.keys.get(keyid, ()) if r.principal_id == caller.id), None)
    if row is None:
        raise _untrusted(keyid, f"no unrevoked key {keyid} is registered to {caller.name}")
    if not batch.sealed(row):
        raise _untrusted(keyid, f"key {keyid} does not carry the registry's seal")
    return row


def _public_key(state: AppState, row: SigningKey) -> VerifyingKey:
    """The parsed public key of ``row``, cached by its PEM (the bytes the seal covers)."""
    key = state.reports.public_keys.get(row.public_key_pem)
    if key is None:
        key = load_public_key(row.public_key_pem.encode(), f"key {row.keyid}")
        state.reports.public_keys.put(row.public_key_pem, key)
    return key


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


def _signed_state(session: Session, state: AppState, repo_name: str, alias: str) -> _Signed:
    """The alias's signed digest and the plan and step in force, verified from the TUF
    metadata; kept per process (``state.reports.signed``) by the versions they were
    verified at (the repository's roles, top-level targets and root: every signed change
    makes a new version), so a batch after the first costs one query until something is
    signed again."""
    prefix = protected_role(repo_name, "")
    versions = SessionStore(session).newest_versions(prefix, also=("targets", "root"))
    key = (repo_name, alias, versions)
    signed: _Signed | None = state.reports.signed.get(key)
    if signed is None:
        stable_signed = state.signed.aliases(session, repo_name).get(alias)
        repo = repository(session, state)
        signed = stable_signed, _current(repo, repo_name, alias, stable_signed)
        state.reports.signed.put(key, signed)
    return signed


def _fit(batch: _Batch, repo_id: int, repo_name: str, alias: str) -> _Fit:
    """What ``repo_name@alias`` holds, read once per batch."""
    found = batch.fits.get((repo_id, alias))
    if found is None:
        stable_signed, current = _signed_state(batch.session, batch.state, repo_name, alias)
        latest = batch.session.execute(
            select(Rollout.id, Rollout.rollout_id, Rollout.stable, Rollout.candidate)
            .where(Rollout.repo_id == repo_id, Rollout.alias == alias)
            .order_by(Rollout.id.desc())
            .limit(1)
        ).first()
        found = _Fit(
            stable_signed,
            current,
            None
            if latest is None
            else (latest.id, latest.rollout_id, latest.stable, latest.candidate),
        )
        batch.fits[(repo_id, alias)] = found
    return found


def _assignment(fit: _Fit, repo_name: str, alias: str, report: FleetReport) -> _Assignment:
    """(4): the digests the report may name and the digest the signed step assigns its key."""
    stable_signed, current, latest = fit.stable_signed, fit.current, fit.latest
    assigned = stable_signed
    if current is not None:
        assigned = resolve_digest(current[0], current[1], report.worker_keyid)
    if report.rollout_id is None:
        if stable_signed is None:
            raise ReportRefused(
                f"{repo_name}@{alias} has no signed target: a report without a rollout "
                "names the alias's signed digest",
                detail={"alias": alias, "digest": report.digest},
            )
        return _Assignment(None, (stable_signed,), assigned or stable_signed, None)
    if latest is None or latest[1] != report.rollout_id:
        raise ReportRefused(
            f"rollout {report.rollout_id} is not {repo_name}@{alias}'s latest rollout "
            f"({latest[1] if latest is not None else 'none'})",
            detail={
                "rollout_id": report.rollout_id,
                "latest": latest[1] if latest is not None else None,
            },
        )
    pk, rollout_id, stable, candidate = latest
    digests = (stable, candidate)
    if current is not None and current[0].rollout_id == rollout_id:
        digests = (current[0].stable, current[0].candidate)
    return _Assignment(pk, digests, assigned or stable, candidate)


def _check(
    batch: _Batch, item: Incoming, opened: OpenedReport
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Checks (2) to (5) of one report against what its batch read: the row to insert and
    the answer (less its id). Raises as ``ingest`` says."""
    report, caller, repo_name, alias = opened.report, item.caller, item.repo_name, item.alias
    repo_row = batch.repos.get((repo_name, caller.id))
    if repo_row is None:
        try:
            repo_row = get_repo(batch.session, repo_name, caller)
        except NotFound as exc:
            repo_row = exc
        batch.repos[(repo_name, caller.id)] = repo_row
    if isinstance(repo_row, NotFound):
        raise repo_row
    # (2): the caller's sealed, unrevoked worker key, and its signature over these bytes
    key_row = _worker_key(batch, report.worker_keyid, caller)
    try:
        verify_report(item.envelope, opened, _public_key(batch.state, key_row))
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
    fit = _assignment(_fit(batch, repo_row.id, repo_name, alias), repo_name, alias, report)
    if report.digest not in fit.digests:
        raise ReportRefused(
            f"{report.digest} is not a digest of {repo_name}@{alias}'s "
            + (f"rollout {report.rollout_id}" if report.rollout_id else "signed target")
            + f" ({', '.join(fit.digests)})",
            detail={"digest": report.digest, "allowed": list(fit.digests)},
        )
    # (5): no replay (the batch's reports from this key so far count as kept)
    last = batch.last_seq.get(report.worker_keyid)
    if last is not None and report.seq <= last:
        raise _replayed(report, last)
    batch.last_seq[report.worker_keyid] = report.seq
    row = {
        "repo_id": repo_row.id,
        "alias": alias,
        "rollout_pk": fit.rollout_pk,
        "worker_keyid": report.worker_keyid,
        "principal_id": caller.id,
        "digest": report.digest,
        "seq": report.seq,
        "received_at": utcnow(),
        "interval_seconds": report.interval_seconds,
        "requests": report.requests,
        "errors": report.errors,
        "retries": report.retries,
        "predicate": json.dumps(
            make_report_predicate(**{f.name: getattr(report, f.name) for f in fields(report)}),
            sort_keys=True,
        ),
        "envelope": item.envelope,
        "assigned": fit.assigned,
    }
    # kept either way (the fleet view shows a worker that has not switched yet), but only a
    # report of the digest its key is assigned is evidence, and only for that cohort
    if report.digest != fit.assigned:
        return row, {
            "assigned": fit.assigned,
            "cohort": None,
            "counted": False,
            "why": (
                f"the signed step assigns worker key {report.worker_keyid} {fit.assigned}, "
                f"not {report.digest}: kept as a fault, evidence for no cohort"
            ),
        }
    cohort = CANDIDATE if report.digest == fit.candidate else STABLE
    return row, {"assigned": fit.assigned, "cohort": cohort, "counted": True}


def _replayed(report: FleetReport, last: int) -> Conflict:
    return Conflict(
        f"report seq {report.seq} of worker key {report.worker_keyid} is not above the last "
        f"kept ({last}): a replay",
        code="report_replayed",
        detail={"worker_keyid": report.worker_keyid, "seq": report.seq, "last": last},
    )


Outcome = dict[str, Any] | RegistryError


def _keep(
    session: Session,
    state: AppState,
    todo: list[tuple[int, Incoming, OpenedReport]],
    out: list[Outcome | None],
) -> None:
    """Checks (2) to (5) of each opened report, in arrival order, and one insert of those
    that passed, in one write transaction: each report's outcome goes to ``out``."""
    keyids = {opened.report.worker_keyid for _, _, opened in todo}
    keys: dict[str, list[SigningKey]] = {}
    for key_row in session.scalars(
        select(SigningKey).where(SigningKey.keyid.in_(keyids), SigningKey.revoked_at.is_(None))
    ):
        keys.setdefault(key_row.keyid, []).append(key_row)
    last_seq = {
        str(k): int(v)
        for k, v in session.execute(
            select(RolloutReport.worker_keyid, func.max(RolloutReport.seq))
            .where(RolloutReport.worker_keyid.in_(keyids))
            .group_by(RolloutReport.worker_keyid)
        )
    }
    sealed = trust_of(state.settings).keys.row_seals().signing_key_ok
    batch = _Batch(session, state, sealed, keys, last_seq)
    rows: list[dict[str, Any]] = []
    answers: list[tuple[int, dict[str, Any]]] = []
    for index, item, opened in todo:
        try:
            row, answer = _check(batch, item, opened)
        except RegistryError as exc:
            out[index] = exc
            continue
        rows.append(row)
        answers.append((index, answer))
    if not rows:
        return
    table = cast(Table, RolloutReport.__table__)
    ids = (
        session.execute(insert(table).returning(table.c.id, sort_by_parameter_order=True), rows)
        .scalars()
        .all()
    )
    for (index, answer), row_id in zip(answers, ids, strict=True):
        out[index] = {"id": row_id, **answer}


def ingest(state: AppState, items: Sequence[Incoming]) -> list[Outcome]:
    """Keep fleet reports, each by the module's checks (1) to (5) in arrival order, those
    that pass in one write transaction: one outcome per item, its answer ``{id, assigned,
    cohort, counted}`` (``cohort`` None and ``why`` when the digest is not the assigned
    one) or its refusal: BadRequest ``invalid_report``, Forbidden ``report_untrusted``,
    ReportRefused, Conflict ``report_replayed`` (each audited ``rollout.report.refused``),
    NotFound for a repository the caller may not read. Other errors (the database's) are
    raised, and nothing of the batch is kept."""
    out: list[Outcome | None] = [None] * len(items)
    keyids: list[str | None] = [None] * len(items)
    todo: list[tuple[int, Incoming, OpenedReport]] = []
    for index, item in enumerate(items):
        # (1): envelope, statement, predicate type, predicate
        try:
            opened = open_report(item.envelope)
        except ReportInvalid as exc:
            out[index] = _invalid(exc)
            continue
        keyids[index] = opened.report.worker_keyid
        todo.append((index, item, opened))
    if todo:
        _write(state, todo, out)
    refused = [
        (item, keyid, outcome)
        for item, keyid, outcome in zip(items, keyids, out, strict=True)
        if isinstance(outcome, (BadRequest, Forbidden, Conflict))
    ]
    if refused:
        _audit_refusals(state, refused)
    return [outcome for outcome in out if outcome is not None]


def _write(
    state: AppState, todo: list[tuple[int, Incoming, OpenedReport]], out: list[Outcome | None]
) -> None:
    """``_keep`` in one write transaction. The write lock makes the last ``seq`` it reads
    exact; should the insert still collide with a row kept by a writer that bypassed it
    (the unique (worker key, seq) pair), each report is judged again alone, and a lone
    report that collides is a replay."""
    try:
        with state.db.write() as session:
            _keep(session, state, todo, out)
    except IntegrityError:
        if len(todo) > 1:
            for entry in todo:
                _write(state, [entry], out)
            return
        index, _, opened = todo[0]
        out[index] = _replayed(opened.report, opened.report.seq)


def refuse_too_large(state: AppState, *, repo_name: str, alias: str, caller: Caller) -> NoReturn:
    """(1): a body over MAX_REPORT_BYTES, refused unread (413 ``too_large``) and audited."""
    exc = PayloadTooLarge(f"a fleet report is at most {MAX_REPORT_BYTES} bytes")
    _audit_refusals(state, [(Incoming(repo_name, alias, b"", caller), None, exc)])
    raise exc


def _audit_refusals(
    state: AppState, refused: Sequence[tuple[Incoming, str | None, RegistryError]]
) -> None:
    with state.db.write() as session:
        for item, keyid, exc in refused:
            append(
                session,
                actor=item.caller.name,
                action="rollout.report.refused",
                subject=f"{item.repo_name}@{item.alias}",
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
        received_at=row.received_at,
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
        received = report.received_at
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
