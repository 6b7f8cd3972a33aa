"""Fleet reports (docs/rollouts.md#fleet-reports): the predicate's parser, ingestion by a
real registry, and what ``rollout status`` shows of the fleet: which workers run which
digest, per cohort, and which went silent."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from modelward.attest.rollout import (
    REPORT_FORMAT,
    FleetReport,
    ReportInvalid,
    make_report_predicate,
    parse_plan,
    parse_report_predicate,
)
from modelward.registry.domains.rollouts.reports import fleet, reports_in_window
from modelward.registry.models import Rollout, utcnow
from tests.registry.conftest import Registry
from tests.rollouts.fleet_reports import Canary, canary_at

KEYID = "ab" * 32
DIGEST = "sha256:" + "cd" * 32


def _doc(**change: Any) -> dict[str, Any]:
    doc = make_report_predicate(
        repository="acme/m",
        alias="prod",
        rollout_id="0" * 32,
        digest=DIGEST,
        worker_keyid=KEYID,
        seq=0,
        interval_seconds=10,
        requests=10,
        errors=2,
    )
    doc.update(change)
    return doc


# -- the predicate (pure) ------------------------------------------------------------------------
def test_a_report_predicate_round_trips_with_every_field() -> None:
    doc = _doc(ttft_ms={"p50": 12.5, "p95": None}, stable_warm=True, rollout_id=None)
    report = parse_report_predicate(doc)
    assert isinstance(report, FleetReport)
    assert (report.requests, report.errors, report.ttft_p50_ms, report.ttft_p95_ms) == (
        10,
        2,
        12.5,
        None,
    )
    assert report.rollout_id is None
    assert report.stable_warm is True
    assert doc["format"] == REPORT_FORMAT
    assert parse_report_predicate(_doc(seq=2**63 - 1)).seq == 2**63 - 1  # a clock reading will do


BAD = [
    ("format", {"format": "modelward.rollout-report/v2"}),
    ("rollout_id", {"rollout_id": "not-hex"}),
    ("worker_keyid", {"worker_keyid": "AB" * 32}),
    ("repository", {"repository": ""}),
    ("interval_seconds", {"interval_seconds": 3601}),
    ("interval_seconds", {"interval_seconds": True}),
    ("retries", {"retries": 1.0}),
    ("itl_p95_ms", {"itl_p95_ms": -1}),
    ("queue_age_p95_ms", {"queue_age_p95_ms": math.inf}),
    ("task_checks", {"task_checks": {"passed": 1}}),
    ("task_checks.failed", {"task_checks": {"passed": 1, "failed": -2}}),
    ("capacity", {"capacity": None}),
    ("inflight_peak", {"inflight_peak": "3"}),
    ("device_faults", {"device_faults": 10**13}),
    ("seq", {"seq": 2**63}),
    ("seq", {"seq": -1}),
]


@pytest.mark.parametrize(("field", "change"), BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_a_bad_report_predicate_names_its_field(field: str, change: dict[str, Any]) -> None:
    with pytest.raises(ReportInvalid) as info:
        parse_report_predicate(_doc(**change))
    assert info.value.field == field


def test_a_missing_report_field_is_named() -> None:
    doc = _doc()
    del doc["capacity"]
    with pytest.raises(ReportInvalid) as info:
        parse_report_predicate(doc)
    assert info.value.field == "capacity"


# -- ingestion and the fleet view ----------------------------------------------------------------
@pytest.fixture
def canary(registry: Registry, tmp_path: Path) -> Canary:
    return canary_at(registry, tmp_path, steps=3)  # 5, 20, 50%


def test_reports_are_kept_with_the_assignment_and_cohort(canary: Canary) -> None:
    on_candidate = canary.worker(candidate=True, weight=50)
    on_stable = canary.worker(candidate=False, weight=50)
    kept = on_candidate.report(canary.candidate)
    assert kept["assigned"] == canary.candidate
    assert kept["cohort"] == "candidate"
    # a worker still on the stable digest that the step assigns the candidate
    lagging = canary.worker(candidate=True, weight=50)
    behind = lagging.report(canary.stable)
    # kept (the fleet view shows it has not switched yet), but evidence for no cohort
    assert (behind["assigned"], behind["cohort"], behind["counted"]) == (
        canary.candidate,
        None,
        False,
    )
    assert on_stable.report(canary.stable)["assigned"] == canary.stable


@pytest.mark.sqlite_only
def test_status_shows_which_workers_run_which_digest_per_cohort(canary: Canary) -> None:
    a = canary.worker(candidate=True, weight=50)
    b = canary.worker(candidate=False, weight=50)
    c = canary.worker(candidate=False, weight=50)
    a.report(canary.candidate, requests=100, errors=3, capacity=32)
    a.report(canary.candidate, requests=50, errors=1, capacity=32)  # the latest counts
    b.report(canary.stable, requests=80, errors=0, capacity=64)
    c.report(canary.stable, requests=20, errors=2, capacity=64, rollout_id=None)
    view = canary.status()["fleet"]
    by_key = {w["keyid"]: w for w in view["workers"]}
    assert set(by_key) == {a.keyid, b.keyid, c.keyid}
    assert by_key[a.keyid]["digest"] == canary.candidate
    assert by_key[a.keyid]["cohort"] == "candidate"
    assert by_key[a.keyid]["principal"] == a.actor.name
    assert {by_key[k]["cohort"] for k in (b.keyid, c.keyid)} == {"stable"}
    assert not any(w["silent"] for w in view["workers"])
    assert all(w["assigned"] == w["digest"] for w in view["workers"])
    assert view["cohorts"]["candidate"] == {
        "workers": 1, "silent": 0, "requests": 50, "errors": 1, "capacity": 32, "stable_warm": 1,
    }  # fmt: skip
    assert view["cohorts"]["stable"]["workers"] == 2
    assert view["cohorts"]["stable"]["capacity"] == 128
    assert view["silent_after_seconds"] == 30
    # the command line shows the same
    out = canary.reg.cli("rollout", "status", f"{canary.repo}@prod", check=True).stdout
    assert "fleet candidate: 1 workers (0 silent), capacity 32" in out
    assert "fleet stable: 2 workers (0 silent), capacity 128" in out
    assert f"{a.keyid[:16]}  {a.actor.name}  candidate  {canary.candidate}" in out


def _rollout(session: Session, rollout_id: str) -> Rollout:
    return session.scalars(select(Rollout).where(Rollout.rollout_id == rollout_id)).one()


@pytest.mark.sqlite_only
def test_a_worker_that_stops_reporting_is_silent_after_the_setting(canary: Canary) -> None:
    """``fleet`` judged ``silent_after_seconds`` after the last report that arrived: the
    worker that kept reporting is not silent, the one that stopped earlier is (the times
    are the registry's clock, read back with ``reports_in_window``)."""
    quiet = canary.worker(candidate=True, weight=50)
    chatty = canary.worker(candidate=False, weight=50)
    quiet.report(canary.candidate, capacity=8)
    chatty.report(canary.stable, capacity=16)
    chatty.report(canary.stable, capacity=16)  # reports again; ``quiet`` does not
    engine = create_engine(canary.reg.database_url)
    try:
        with Session(engine) as session:
            row = _rollout(session, canary.rollout_id)
            start, end = row.created_at, utcnow() + timedelta(seconds=1)
            kept = reports_in_window(session, row.repo_id, "prod", row.id, start, end)
            assert [(r.worker_keyid, r.cohort) for r in kept] == [
                (quiet.keyid, "candidate"),
                (chatty.keyid, "stable"),
                (chatty.keyid, "stable"),
            ]
            assert [r.report.capacity for r in kept] == [8, 16, 16]
            assert kept[0].assigned == canary.candidate
            assert kept[0].report.digest == canary.candidate
            last = kept[-1].received_at
            assert kept[0].received_at < last
            plan = parse_plan(row.plan_json)
            fresh = fleet(session, row, plan, None, now=last, silent_after_seconds=30)
            later = fleet(
                session, row, plan, None, now=last + timedelta(seconds=30), silent_after_seconds=30
            )
            # every report of the alias when no rollout is named
            everything = reports_in_window(session, row.repo_id, "prod", None, start, end)
            assert [r.id for r in everything] == [r.id for r in kept]
            assert {r.cohort for r in everything} == {"stable"}
    finally:
        engine.dispose()
    assert not any(w["silent"] for w in fresh["workers"])
    silent = {w["keyid"]: w["silent"] for w in later["workers"]}
    assert silent == {quiet.keyid: True, chatty.keyid: False}
    assert later["cohorts"]["candidate"]["silent"] == 1
    assert later["cohorts"]["candidate"]["capacity"] == 0  # a silent worker's capacity is gone
    assert later["cohorts"]["stable"]["capacity"] == 16
    # with no step given, every worker is assigned the stable digest
    assert {w["assigned"] for w in later["workers"]} == {canary.stable}
