"""Attacks on fleet reports, one test each, against a real registry on SQLite and PostgreSQL
(docs/rollouts.md#fleet-reports): every refusal names what is at fault, keeps nothing (the
worker's next honest report with the same seq is still taken) and is audited
``rollout.report.refused``."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, select

from modelward.attest.dsse import sign_envelope
from modelward.attest.keys import generate_private_key, keyid, public_key_pem
from modelward.attest.statement import PredicateType, make_statement
from modelward.registry.models import Principal, SigningKey, utcnow
from tests.registry.conftest import Registry, push_new
from tests.rollouts.fleet_reports import (
    Canary,
    Worker,
    audit_mark,
    audited,
    canary_at,
    refused,
)


@pytest.fixture
def canary(registry: Registry, tmp_path: Path) -> Canary:
    return canary_at(registry, tmp_path)


def _refused_and_audited(
    canary: Canary, worker: Worker, envelope: bytes, status: int, code: str
) -> dict[str, Any]:
    """``envelope`` refused with ``status``/``code``, audited once, nothing kept: the
    worker's honest report at the same seq is taken afterwards."""
    mark = audit_mark(canary.reg)
    err = refused(lambda: worker.send(envelope), status, code)
    events = audited(canary.reg, mark, f"{canary.repo}@{canary.alias}")
    assert len(events) == 1, events
    assert events[0]["details"]["code"] == code
    assert events[0]["actor"] == worker.actor.name
    keys = {w["keyid"] for w in canary.status()["fleet"]["workers"]}
    assert worker.keyid not in keys  # nothing kept
    return {"error": err, "event": events[0]}


def test_report_signed_by_a_key_that_is_not_a_registered_worker_is_refused(
    canary: Canary,
) -> None:
    worker = canary.worker()
    stranger = generate_private_key()  # nobody registered it
    impostor = Worker(canary, worker.actor, stranger)
    found = _refused_and_audited(
        canary, impostor, impostor.envelope(canary.stable), 403, "report_untrusted"
    )
    assert "not a registered worker" in found["error"].message
    assert found["event"]["details"]["worker_keyid"] == impostor.keyid
    assert worker.report(canary.stable)["cohort"] == "stable"  # the real key still reports


def test_report_signed_by_a_key_registered_to_another_principal_is_refused(
    canary: Canary,
) -> None:
    alice, bob = canary.worker(), canary.worker()
    # bob's token, alice's key (and alice's signature): the key is not bob's to use
    as_bob = Worker(canary, bob.actor, alice.key)
    found = _refused_and_audited(
        canary, as_bob, as_bob.envelope(canary.stable), 403, "report_untrusted"
    )
    assert bob.actor.name in found["error"].message
    assert alice.report(canary.stable)["id"]


def test_report_signed_by_a_revoked_worker_key_is_refused(canary: Canary) -> None:
    worker = canary.worker()
    worker.report(canary.stable)
    canary.reg.admin.revoke_key(worker.keyid)
    mark = audit_mark(canary.reg)
    refused(lambda: worker.report(canary.stable), 403, "report_untrusted")
    assert audited(canary.reg, mark, f"{canary.repo}@{canary.alias}")


def test_report_signed_by_a_worker_key_a_database_writer_inserted_is_refused(
    canary: Canary,
) -> None:
    """A signing_keys row the registry did not write carries no seal: it is no worker's."""
    worker = canary.worker()
    key = generate_private_key()
    engine = create_engine(canary.reg.database_url)
    try:
        with engine.begin() as conn:
            owner = conn.execute(
                select(Principal.id).where(Principal.name == worker.actor.name)
            ).scalar_one()
            conn.execute(
                insert(SigningKey).values(
                    keyid=keyid(key.public_key()),
                    principal_id=owner,
                    public_key_pem=public_key_pem(key.public_key()).decode(),
                    created_at=utcnow(),
                )
            )
    finally:
        engine.dispose()
    planted = Worker(canary, worker.actor, key)
    found = _refused_and_audited(
        canary, planted, planted.envelope(canary.stable), 403, "report_untrusted"
    )
    assert "seal" in found["error"].message


def test_replayed_report_with_the_same_or_a_lower_seq_is_refused(canary: Canary) -> None:
    worker = canary.worker()
    worker.seq = 5
    first = worker.envelope(canary.stable)
    worker.send(first)  # seq 5 kept
    mark = audit_mark(canary.reg)
    err = refused(lambda: worker.send(first), 409, "report_replayed")  # the same bytes
    assert err.detail == {"worker_keyid": worker.keyid, "seq": 5, "last": 5}
    worker.seq = 3
    refused(lambda: worker.report(canary.stable), 409, "report_replayed")  # lower, signed anew
    assert len(audited(canary.reg, mark, f"{canary.repo}@{canary.alias}")) == 2
    worker.seq = 6
    assert worker.report(canary.stable)["id"]


def test_report_for_a_digest_outside_the_plan_is_refused(canary: Canary, tmp_path: Path) -> None:
    other = push_new(canary.publisher, canary.repo, tmp_path)  # pushed, never planned
    worker = canary.worker()
    found = _refused_and_audited(canary, worker, worker.envelope(other), 409, "report_refused")
    assert found["error"].detail["digest"] == other
    assert set(found["error"].detail["allowed"]) == {canary.stable, canary.candidate}
    assert worker.report(canary.stable)["id"]


def test_report_for_a_rollout_that_is_not_the_aliases_latest_is_refused(canary: Canary) -> None:
    worker = canary.worker()
    stale = worker.predicate(canary.stable, rollout_id="0" * 32)
    _refused_and_audited(
        canary, worker, worker.envelope(canary.stable, predicate=stale), 409, "report_refused"
    )


def test_report_whose_subject_and_digest_disagree_is_refused(canary: Canary) -> None:
    worker = canary.worker(candidate=True)
    # the statement is about the candidate, the predicate says it serves the stable digest
    envelope = worker.envelope(canary.stable, subject=canary.candidate)
    found = _refused_and_audited(canary, worker, envelope, 400, "invalid_report")
    assert found["error"].detail == {"field": "subject"}
    assert worker.report(canary.candidate)["cohort"] == "candidate"


def test_report_for_another_repository_or_alias_than_the_path_is_refused(
    canary: Canary,
) -> None:
    worker = canary.worker()
    for name, value in (("alias", "staging"), ("repository", "acme/elsewhere")):
        doc = worker.predicate(canary.stable, **{name: value})
        err = _refused_and_audited(
            canary, worker, worker.envelope(canary.stable, predicate=doc), 400, "invalid_report"
        )["error"]
        assert err.detail == {"field": name}


def test_forged_envelope_whose_signature_is_over_other_bytes_is_refused(canary: Canary) -> None:
    worker = canary.worker()
    honest = json.loads(worker.envelope(canary.stable))
    # the signature of an honest report, over a payload that says something else
    forged_doc = worker.predicate(canary.stable, errors=0, requests=5000)
    payload = make_statement(canary.repo, canary.stable, PredicateType.ROLLOUT_REPORT, forged_doc)
    honest["payload"] = base64.b64encode(payload).decode()
    forged = json.dumps(honest).encode()
    found = _refused_and_audited(canary, worker, forged, 403, "report_untrusted")
    assert "signature" in found["error"].message
    assert worker.report(canary.stable)["id"]


def test_report_signed_by_a_second_key_beside_a_forged_one_is_refused(canary: Canary) -> None:
    """A valid signature by another key does not make up for the worker key's own."""
    worker = canary.worker()
    doc = worker.predicate(canary.stable)
    payload = make_statement(canary.repo, canary.stable, PredicateType.ROLLOUT_REPORT, doc)
    envelope = sign_envelope(payload, [generate_private_key()])
    _refused_and_audited(canary, worker, envelope, 403, "report_untrusted")


BAD_PREDICATES = [
    ("requests", {"requests": -1}),
    ("errors", {"errors": 500}),  # more errors than requests
    ("interval_seconds", {"interval_seconds": 0}),
    ("ttft_ms", {"ttft_ms": {"p50": 1.0}}),
    ("ttft_ms.p95", {"ttft_ms": {"p50": 1.0, "p95": "fast"}}),
    ("stable_warm", {"stable_warm": "yes"}),
    ("seq", {"seq": 1.5}),
    ("made_up", {"made_up": 1}),
    ("digest", {"digest": "sha256:abc"}),
]


@pytest.mark.parametrize(("field", "change"), BAD_PREDICATES, ids=[b[0] for b in BAD_PREDICATES])
def test_report_with_a_bad_predicate_is_refused_naming_the_field(
    canary: Canary, field: str, change: dict[str, Any]
) -> None:
    worker = canary.worker()
    doc = {**worker.predicate(canary.stable), **change}
    found = _refused_and_audited(
        canary, worker, worker.envelope(canary.stable, predicate=doc), 400, "invalid_report"
    )
    assert found["error"].detail == {"field": field}
    assert field in found["error"].message


def test_report_of_another_predicate_type_is_refused(canary: Canary) -> None:
    worker = canary.worker()
    payload = make_statement(
        canary.repo, canary.stable, PredicateType.BASELINE, worker.predicate(canary.stable)
    )
    envelope = sign_envelope(payload, [worker.key])
    err = _refused_and_audited(canary, worker, envelope, 400, "invalid_report")["error"]
    assert err.detail == {"field": "predicateType"}


def test_a_publisher_token_cannot_send_reports(canary: Canary) -> None:
    """Reports come from serving workers (REPORT: readers and admins), not publishers."""
    worker = canary.worker()
    envelope = worker.envelope(canary.stable)
    client = canary.publisher.actor.client
    refused(lambda: client.send_report(canary.repo, canary.alias, envelope), 403, "forbidden")


def test_an_oversized_report_is_refused_unread(canary: Canary) -> None:
    worker = canary.worker()
    doc = worker.predicate(canary.stable)
    honest = json.loads(worker.envelope(canary.stable, predicate=doc))
    honest["padding"] = "x" * (64 * 1024)
    mark = audit_mark(canary.reg)
    refused(lambda: worker.send(json.dumps(honest).encode()), 413, "too_large")
    assert len(audited(canary.reg, mark, f"{canary.repo}@{canary.alias}")) == 1
    assert worker.report(canary.stable)["id"]
