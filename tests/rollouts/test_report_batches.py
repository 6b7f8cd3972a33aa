"""Fleet reports written in batches (issue 40, ``domains._report_queue``): every report of a
batch is judged by every check, in arrival order, as if it came alone; the per-key ``seq``
stays strictly increasing when one key's reports race; refusals in a batch are audited and
keep nothing. Against a real registry on SQLite and PostgreSQL; the batch test calls the
registry's own ``reports.ingest`` over the same database, so the batch is the one asked for.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from modelward.attest.keys import generate_private_key
from modelward.client.api import APIError
from modelward.registry.app import build_state
from modelward.registry.domains._state import AppState
from modelward.registry.domains.auth.service import Caller, authenticate
from modelward.registry.domains.rollouts import reports
from modelward.registry.errors import BadRequest, Conflict, Forbidden, RegistryError
from modelward.registry.models import RolloutReport
from modelward.registry.settings import Settings
from tests.registry.conftest import Registry
from tests.rollouts.fleet_reports import Canary, Worker, audit_mark, audited, canary_at


@pytest.fixture
def canary(registry: Registry, tmp_path: Path) -> Canary:
    return canary_at(registry, tmp_path)


@pytest.fixture
def state(registry: Registry) -> Iterator[AppState]:
    """The registry's own code over the running registry's database and keys."""
    server = registry.server
    app_state = build_state(Settings(data_dir=server.data_dir, database_url=server.database_url))
    try:
        yield app_state
    finally:
        app_state.db.dispose()


def _caller(state: AppState, worker: Worker) -> Caller:
    with state.db.read() as session:
        return authenticate(session, worker.actor.token)


def _next(worker: Worker, digest: str, seq: int) -> bytes:
    worker.seq = seq
    return worker.envelope(digest)


def _broken_signature(envelope: bytes) -> bytes:
    doc = json.loads(envelope)
    sig = base64.b64decode(doc["signatures"][0]["sig"])
    doc["signatures"][0]["sig"] = base64.b64encode(bytes([sig[0] ^ 1]) + sig[1:]).decode()
    return json.dumps(doc).encode()


def _kept_seqs(registry: Registry, keyid: str) -> list[int]:
    """The seqs kept for ``keyid``, in the order they were kept."""
    url = registry.server.database_url or f"sqlite:///{registry.server.data_dir / 'registry.db'}"
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            return list(
                conn.scalars(
                    select(RolloutReport.seq)
                    .where(RolloutReport.worker_keyid == keyid)
                    .order_by(RolloutReport.id)
                )
            )
    finally:
        engine.dispose()


def test_one_batch_judges_each_report_in_order_as_if_alone(
    registry: Registry, canary: Canary, state: AppState
) -> None:
    a, b = canary.worker(), canary.worker()
    stranger = generate_private_key()  # registered to nobody
    forged = Worker(canary, a.actor, stranger)
    broken = _broken_signature(_next(a, canary.stable, 9))
    batch = [
        (a, _next(a, canary.stable, 2)),  # kept
        (a, _next(a, canary.stable, 2)),  # the same seq again, in the same batch: a replay
        (a, _next(a, canary.stable, 1)),  # lower than one kept earlier in the batch
        (b, _next(b, canary.stable, 1)),  # another key's seq is its own
        (b, _next(a, canary.stable, 3)),  # a's key, sent by b's principal: not b's worker
        (a, _next(forged, canary.stable, 1)),  # a key registered to nobody
        (a, broken),  # a's key id, a signature that fails
        (a, b"{not json"),  # (1): refused before any signature check
        (a, _next(a, canary.stable, 3)),  # still kept: nothing above broke a's sequence
    ]
    mark = audit_mark(registry)
    items = [
        reports.Incoming(canary.repo, canary.alias, body, _caller(state, w)) for w, body in batch
    ]
    out = reports.ingest(state, items)
    assert len(out) == len(batch)

    def code(outcome: dict[str, Any] | RegistryError) -> str:
        return outcome.code if isinstance(outcome, RegistryError) else "kept"

    assert [code(o) for o in out] == [
        "kept",
        "report_replayed",
        "report_replayed",
        "kept",
        "report_untrusted",
        "report_untrusted",
        "report_untrusted",
        "invalid_report",
        "kept",
    ]
    assert isinstance(out[1], Conflict)
    assert out[1].detail["last"] == 2
    assert isinstance(out[2], Conflict)
    assert out[2].detail == {
        "worker_keyid": a.keyid,
        "seq": 1,
        "last": 2,
    }
    assert isinstance(out[4], Forbidden)
    assert isinstance(out[7], BadRequest)
    kept = [o for o in out if isinstance(o, dict)]
    assert all(o["counted"] and o["cohort"] == "stable" for o in kept)
    assert len({o["id"] for o in kept}) == 3
    assert _kept_seqs(registry, a.keyid) == [2, 3]
    assert _kept_seqs(registry, b.keyid) == [1]
    events = audited(registry, mark, f"{canary.repo}@{canary.alias}")
    assert [e["details"]["code"] for e in events] == [code(o) for o in out if code(o) != "kept"]
    # a lower seq after a higher one of the same batch, with no pair to collide on
    later = [_next(a, canary.stable, 6), _next(a, canary.stable, 5)]
    out = reports.ingest(
        state,
        [reports.Incoming(canary.repo, canary.alias, body, items[0].caller) for body in later],
    )
    assert [code(o) for o in out] == ["kept", "report_replayed"]
    assert _kept_seqs(registry, a.keyid) == [2, 3, 6]
    # the next report over HTTP continues a's sequence from what the batches kept
    a.seq = 6
    with pytest.raises(APIError) as info:
        a.send(a.envelope(canary.stable))
    assert info.value.code == "report_replayed"
    a.seq = 7
    assert a.report(canary.stable)["counted"]


def test_racing_reports_of_one_key_keep_its_seq_strictly_increasing(
    registry: Registry, canary: Canary
) -> None:
    worker = canary.worker()
    # 48 reports from one key, seqs 1..16 three times each, sent 16 at a time
    bodies = [_next(worker, canary.stable, 1 + n % 16) for n in range(48)]

    def send(body: bytes) -> str:
        client = registry.client(worker.actor.token)
        try:
            client.send_report(canary.repo, canary.alias, body)
        except APIError as exc:
            return exc.code or str(exc.status)
        finally:
            client.close()
        return "kept"

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(send, bodies))
    assert set(codes) <= {"kept", "report_replayed"}, codes
    kept = _kept_seqs(registry, worker.keyid)
    assert codes.count("kept") == len(kept) >= 1
    assert kept == sorted(set(kept)), kept  # strictly increasing in the order kept
