"""Rollouts against a real ``modelward serve`` (SQLite and PostgreSQL) and workers resolving
through the real loader code (``loader.tuf_resolve.resolve_alias``, ``tuf.ngclient``) from
the root the registry served when the test began (docs/rollouts.md#authority).

Workers are simulated identities: each is a key id and its own metadata cache (its memory
of the rollout), no process. The attackers write the registry's database
(``tests.tuf.test_registry_attacks_tuf.attacker``; the registry serves nothing from memory
here) and, where named, also hold the registry's online keys (``aliases``, ``snapshot``,
``timestamp``): the worst case the authority table allows for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, update
from tuf.api.metadata import Metadata, MetaFile, Snapshot, TargetFile, Targets, Timestamp

from modelward.attest.keys import generate_private_key
from modelward.attest.rollout import canonical_json, in_candidate_cohort, make_plan, parse_plan
from modelward.attest.rollout.paths import rollout_path, rollout_role, step_path
from modelward.attest.tuf import protected_role, tuf_signer
from modelward.client.api import APIError, RegistryClient
from modelward.client.config import parse_reference
from modelward.loader.rollout import RolloutRefused
from modelward.loader.tuf_resolve import (
    AliasTrust,
    TrustMetadataRefused,
    resolve_alias,
    resolve_reference,
)
from modelward.registry.domains.signing.tuf.keys import OnlineKeys
from modelward.registry.models import Rollout
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
    start_registry,
)
from tests.tuf.test_registry_attacks_tuf import Attacker, attacker, new_reviewer, sign

POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, reviewer], protected: true, approvals: 1}\n"
    "  - {pattern: '*', roles: [publisher]}\n"
)
ENV = {"MODELWARD_TUF_FRESHNESS_SECONDS": "0", "MODELWARD_TUF_REFRESH_INTERVAL_SECONDS": "3600"}
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
WORKERS = [hashlib.sha256(f"worker-{i}".encode()).hexdigest() for i in range(20)]


@pytest.fixture(scope="module", params=KINDS)
def reg(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """One registry per module and kind, nothing served from memory: the attackers rewrite
    stored rows and expect their forgery served at once."""
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    base = tmp_path_factory.mktemp(f"rollouts-{request.param}")
    registry = start_registry(request.param, base, pg, extra_env=ENV)
    try:
        yield registry
    finally:
        registry.close()
        registry.server.stop()


@dataclass
class Canary:
    """``prod`` (1 approval) signed at ``stable`` by reviewer ``r``; ``candidate`` pushed;
    a worker client and the root it pinned."""

    reg: Registry
    repo: str
    publisher: Publisher
    r: Publisher
    worker: RegistryClient
    root: bytes
    stable: str
    candidate: str
    tmp: Path

    def start(self, **kw: Any) -> dict[str, Any]:
        return self.publisher.actor.client.start_rollout(self.repo, "prod", self.candidate, **kw)

    def start_signed(self, **kw: Any) -> dict[str, Any]:
        started = self.start(**kw)
        assert sign(self.r, int(started["proposal"]))["state"] == "published"
        return started

    def advance(self, reason: str = "looks good") -> dict[str, Any]:
        return self.publisher.actor.client.advance_rollout(self.repo, "prod", reason)

    def abort(self, reason: str) -> dict[str, Any]:
        return self.publisher.actor.client.abort_rollout(self.repo, "prod", reason)

    def resolve(self, keyid: str | None, cache: str | None = None) -> str:
        """What the worker ``keyid`` (its cache: ``cache`` or its own) resolves prod to."""
        return resolve_alias(
            self.repo,
            "prod",
            metadata_url=self.worker.tuf_url,
            cache_dir=self.tmp / (cache or f"w-{keyid}"),
            trust_root=self.root,
            fetcher=self.worker.tuf_fetcher(),
            worker_keyid=keyid,
        ).digest

    def fleet(self) -> dict[str, str]:
        return {w: self.resolve(w) for w in WORKERS}


@pytest.fixture
def canary(reg: Registry, tmp_path: Path) -> Canary:
    publisher, r = new_publisher(reg), new_reviewer(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    stable = push_new(publisher, repo, tmp_path)
    proposal = publisher.actor.client.set_alias(repo, "prod", stable, propose=True)["pending"]
    assert sign(r, int(proposal["id"]))["state"] == "published"
    candidate = push_new(publisher, repo, tmp_path)
    worker = reg.actor("reader").client
    return Canary(
        reg, repo, publisher, r, worker, worker.tuf_file("1.root.json"), stable, candidate, tmp_path
    )


def _code(exc: APIError) -> str:
    return str(getattr(exc, "code", "") or exc)


# -- the happy path and abort ------------------------------------------------------------------
def test_canary_5_20_50_100_each_step_only_adds_workers_matching_their_cohorts(
    canary: Canary,
) -> None:
    started = canary.start()
    assert not started["plan_signed"]
    with pytest.raises(APIError, match="not signed"):  # reviewers sign the plan first
        canary.advance()
    assert set(canary.fleet().values()) == {canary.stable}  # a plan alone moves nobody
    assert sign(canary.r, int(started["proposal"]))["state"] == "published"
    rollout_id = started["rollout_id"]
    assert set(canary.fleet().values()) == {canary.stable}  # signed, not started
    previous: set[str] = set()
    for weight in (5, 20, 50, 100):
        state = canary.advance(f"to {weight}")
        assert state["signed_step"]["weight"] == weight
        fleet = canary.fleet()
        cohort = {w for w, digest in fleet.items() if digest == canary.candidate}
        assert cohort == {w for w in WORKERS if in_candidate_cohort(rollout_id, w, weight)}
        assert set(fleet.values()) <= {canary.stable, canary.candidate}
        assert previous <= cohort  # a step only adds workers
        previous = cohort
        weights = canary.worker.rollout_weights(canary.repo, "prod")
        assert weights["backends"] == [
            {"digest": canary.stable, "weight": 100 - weight},
            {"digest": canary.candidate, "weight": weight},
        ]
    assert previous == set(WORKERS)
    status = canary.worker.rollout_status(canary.repo, "prod")
    assert status["state"] == "completed"
    assert [h["weight"] for h in status["history"]] == [5, 20, 50, 100]
    assert all(h["at"] for h in status["history"])
    with pytest.raises(APIError):  # nothing after the last step
        canary.advance()
    with pytest.raises(APIError, match="completed"):  # a new plan would undo it
        canary.start()
    # the candidate becomes stable by a move of the alias, which ends the plan
    moved = canary.publisher.actor.client.set_alias(
        canary.repo, "prod", canary.candidate, propose=True
    )
    assert sign(canary.r, int(moved["pending"]["id"]))["state"] == "published"
    assert set(canary.fleet().values()) == {canary.candidate}


def test_abort_sends_every_worker_back_to_stable(canary: Canary) -> None:
    canary.start_signed()
    canary.advance()
    canary.advance()
    assert canary.candidate in canary.fleet().values()
    aborted = canary.abort("error rate 4% on the canary")
    assert aborted["signed_step"]["state"] == "aborted"
    assert set(canary.fleet().values()) == {canary.stable}
    assert canary.worker.rollout_weights(canary.repo, "prod")["backends"][1]["weight"] == 0
    assert canary.worker.rollout_status(canary.repo, "prod")["history"][-1]["reason"] == (
        "error rate 4% on the canary"
    )


# -- authority: the registry ---------------------------------------------------------------------
def test_restarting_an_aborted_plan_needs_a_new_plan_and_new_signatures(canary: Canary) -> None:
    first = canary.start_signed()
    canary.advance()
    canary.abort("bad")
    with pytest.raises(APIError):  # nothing to advance: the rollout is over
        canary.advance()
    again = canary.start()
    assert again["rollout_id"] != first["rollout_id"]
    assert not again["plan_signed"]  # new signatures, or nothing moves
    with pytest.raises(APIError, match="not signed"):
        canary.advance()
    assert set(canary.fleet().values()) == {canary.stable}


def test_a_db_writer_editing_the_rollout_row_moves_nothing(canary: Canary) -> None:
    started = canary.start_signed()
    canary.advance()  # 5%
    other = push_new(canary.publisher, canary.repo, canary.tmp)
    engine = create_engine(canary.reg.database_url)
    try:
        with engine.begin() as conn:  # jump to 100% at an unplanned digest, in the row
            conn.execute(
                update(Rollout)
                .where(Rollout.rollout_id == started["rollout_id"])
                .values(step_index=3, state="running", candidate=other)
            )
    finally:
        engine.dispose()
    fleet = canary.fleet()
    assert other not in fleet.values()
    rid = started["rollout_id"]
    assert {w for w, d in fleet.items() if d == canary.candidate} == {
        w for w in WORKERS if in_candidate_cohort(rid, w, 5)
    }
    # the registry advances from the signed step and plan, one step: 20% of the signed
    # candidate, never 100% nor the row's digest
    state = canary.advance()
    assert state["signed_step"]["weight"] == 20
    fleet = canary.fleet()
    assert other not in fleet.values()
    assert {w for w, d in fleet.items() if d == canary.candidate} == {
        w for w in WORKERS if in_candidate_cohort(rid, w, 20)
    }


# -- authority: the worker -----------------------------------------------------------------------
def _online(reg: Registry) -> OnlineKeys:
    return OnlineKeys(reg.server.data_dir / "tuf-keys")


def publish_with_online_keys(
    att: Attacker, reg: Registry, role: str, md: Metadata[Targets]
) -> None:
    """What a holder of the registry's online keys can do around the registry: sign ``md``
    as ``role``'s next version, and a snapshot and timestamp listing it."""
    keys = _online(reg)
    md.signed.version = att.latest(role) + 1
    md.signatures.clear()
    md.sign(keys.signer("aliases"))
    att.write(role, md.signed.version, md.to_bytes())
    snapshot = Metadata[Snapshot].from_bytes(att.metadata("snapshot"))
    snapshot.signed.meta[f"{role}.json"] = MetaFile(version=md.signed.version)
    snapshot.signed.version += 1
    snapshot.signatures.clear()
    snapshot.sign(keys.signer("snapshot"))
    att.write("snapshot", snapshot.signed.version, snapshot.to_bytes())
    timestamp = Metadata[Timestamp].from_bytes(att.metadata("timestamp"))
    timestamp.signed.snapshot_meta = MetaFile(version=snapshot.signed.version)
    timestamp.signed.version += 1
    timestamp.signatures.clear()
    timestamp.sign(keys.signer("timestamp"))
    att.write("timestamp", timestamp.signed.version, timestamp.to_bytes())


def step_version(att: Attacker, repo: str, doc_changes: dict[str, Any]) -> Metadata[Targets]:
    """The rollout role's current version with its step's fields changed (still canonical,
    its target hashing the new bytes)."""
    md = Metadata[Targets].from_bytes(att.metadata(rollout_role(repo)))
    path = step_path(repo, "prod")
    doc = json.loads(md.signed.targets[path].unrecognized_fields["custom"]["step"])
    doc.update(doc_changes)
    data = canonical_json(doc)
    target = TargetFile.from_data(path, data, ["sha256"])
    target.unrecognized_fields["custom"] = {"step": data.decode()}
    md.signed.targets[path] = target
    return md


def test_worker_that_missed_two_steps_follows_the_current_step(canary: Canary) -> None:
    started = canary.start_signed()
    rid = str(started["rollout_id"])
    canary.advance()  # 5%: both workers poll
    late, later = WORKERS[0], WORKERS[1]
    for w in (late, later):
        assert canary.resolve(w) in (canary.stable, canary.candidate)
    canary.advance()  # 20%: nobody polls
    canary.advance()  # 50%: nobody polls
    want = canary.candidate if in_candidate_cohort(rid, late, 50) else canary.stable
    assert canary.resolve(late) == want  # step 2, two after the step it saw
    assert canary.advance()["signed_step"]["state"] == "completed"
    # after completion both resolve the alias: the candidate, 100%
    assert canary.resolve(late) == canary.candidate
    assert canary.resolve(later) == canary.candidate  # from step 0 straight to the last
    # an older step, re-signed by the online keys as a newer version, is still refused
    with attacker(canary.reg) as att:
        old = step_version(att, canary.repo, {"index": 1, "weight": 20, "state": "running"})
        publish_with_online_keys(att, canary.reg, rollout_role(canary.repo), old)
        with pytest.raises(RolloutRefused, match="replay"):
            canary.resolve(later)


def test_the_online_key_skipping_steps_moves_workers_only_to_the_plans_weight(
    canary: Canary,
) -> None:
    canary.start_signed()
    canary.advance()  # 5%
    seen = canary.resolve(WORKERS[0])
    with attacker(canary.reg) as att:
        # a skipped step is the registry's to refuse (it never signs one); a worker that
        # saw 5% follows a later step of the signed plan: the plan's digests and weights
        jump = step_version(att, canary.repo, {"index": 3, "weight": 100, "state": "completed"})
        publish_with_online_keys(att, canary.reg, rollout_role(canary.repo), jump)
        assert canary.resolve(WORKERS[0]) == canary.candidate
        # but a weight the plan does not name at this index is refused by every worker
        wrong = step_version(att, canary.repo, {"index": 0, "weight": 100, "state": "running"})
        publish_with_online_keys(att, canary.reg, rollout_role(canary.repo), wrong)
        with pytest.raises(RolloutRefused, match="weight"):
            canary.resolve(WORKERS[1], cache="fresh-worker")
        with pytest.raises(RolloutRefused, match="weight"):
            canary.resolve(WORKERS[0])
    assert seen in (canary.stable, canary.candidate)


def test_a_db_writer_jumping_to_100_without_the_online_key_is_refused(canary: Canary) -> None:
    canary.start_signed()
    canary.advance()
    with attacker(canary.reg) as att:
        role = rollout_role(canary.repo)
        md = step_version(att, canary.repo, {"index": 3, "weight": 100, "state": "completed"})
        md.signatures.clear()
        md.sign(tuf_signer(generate_private_key()))  # any key but the online one
        att.write(role, att.latest(role), md.to_bytes())  # in place of the current version
        with pytest.raises(TrustMetadataRefused):
            canary.resolve(WORKERS[0], cache="db-writer-victim")


def test_a_replayed_old_step_is_refused(canary: Canary) -> None:
    canary.start_signed()
    canary.advance()  # 5%
    with attacker(canary.reg) as att:
        role = rollout_role(canary.repo)
        old = Metadata[Targets].from_bytes(att.metadata(role))  # the 5% step
        canary.advance()  # 20%
        assert canary.resolve(WORKERS[0]) in (canary.stable, canary.candidate)
        # the old step's bytes, re-signed by the online keys as a newer version
        publish_with_online_keys(att, canary.reg, role, old)
        with pytest.raises(RolloutRefused, match="replay"):
            canary.resolve(WORKERS[0])


def test_restarting_an_aborted_plan_with_the_online_key_is_refused_by_workers(
    canary: Canary,
) -> None:
    canary.start_signed()
    canary.advance()
    canary.abort("bad")
    assert canary.resolve(WORKERS[0]) == canary.stable
    with attacker(canary.reg) as att:
        restart = step_version(att, canary.repo, {"index": 1, "weight": 20, "state": "running"})
        publish_with_online_keys(att, canary.reg, rollout_role(canary.repo), restart)
        with pytest.raises(RolloutRefused, match="aborted"):
            canary.resolve(WORKERS[0])


def test_a_worker_given_a_forged_plan_refuses_it(canary: Canary) -> None:
    """A plan naming an unplanned digest, written into the alias's role by a database writer
    (who holds the online keys too: they do not sign the protected role)."""
    started = canary.start_signed()
    canary.advance()
    other = push_new(canary.publisher, canary.repo, canary.tmp)
    role = protected_role(canary.repo, "prod")
    with attacker(canary.reg) as att:
        md = Metadata[Targets].from_bytes(att.metadata(role))
        path = rollout_path(canary.repo, "prod")
        plan = parse_plan(md.signed.targets[path].unrecognized_fields["custom"]["plan"].encode())
        forged = make_plan(
            rollout_id=plan.rollout_id,
            repository=plan.repository,
            alias="prod",
            stable=plan.stable,
            candidate=other,
        )
        target = TargetFile.from_data(path, forged.raw, ["sha256"])
        target.unrecognized_fields["custom"] = {"plan": forged.raw.decode()}
        md.signed.targets[path] = target
        publish_with_online_keys(att, canary.reg, role, md)
        with pytest.raises(TrustMetadataRefused):  # not the reviewers' signature
            canary.resolve(WORKERS[0], cache="forged-plan")
    assert started["plan_sha256"] != forged.sha256


def test_the_plan_needs_the_reviewers_not_its_proposer(canary: Canary) -> None:
    """The two-person rule of a protected alias holds for its plan: a reviewer who starts a
    rollout cannot sign it alone."""
    started = canary.r.actor.client.start_rollout(canary.repo, "prod", canary.candidate)
    with pytest.raises(APIError, match="signature"):
        sign(canary.r, int(started["proposal"]))
    canary.r.actor.client.abort_rollout(canary.repo, "prod", "test over")


def test_a_bad_analysis_document_is_refused_naming_the_field(canary: Canary) -> None:
    with pytest.raises(APIError) as caught:
        canary.start(analysis="thresholds:\n  made_up: {max: 1}\n")
    assert "thresholds.made_up" in str(caught.value)
    with pytest.raises(APIError, match="never had a rollout"):  # nothing recorded
        canary.worker.rollout_status(canary.repo, "prod")
    state = canary.start(analysis="thresholds:\n  error_rate: {max: 0.01}\n", allow_no_fleet=True)
    assert state["analysis"] == "thresholds:\n  error_rate: {max: 0.01}\n"  # verbatim
    assert state["plan"]["analysis"]["thresholds"] == {"error_rate": {"max": 0.01}}


def test_a_worker_key_given_to_resolution_puts_the_worker_in_its_cohort(canary: Canary) -> None:
    """``resolve_reference`` (what ``pull`` and ``boot`` call) carries the worker's key id
    (``AliasTrust.worker_keyid``, from boot's ``--worker-key``) to the cohort; without one a
    worker stays on the stable digest until 100%."""
    started = canary.start_signed()
    for _ in range(3):
        canary.advance()  # 50%
    inside = next(w for w in WORKERS if in_candidate_cohort(started["rollout_id"], w, 50))
    root = canary.tmp / "root.json"
    root.write_bytes(canary.root)
    ref = parse_reference(f"{canary.repo}@prod")
    keyed = AliasTrust(root=root, worker_keyid=inside)
    assert resolve_reference(canary.worker, ref, canary.tmp / "keyed", keyed) == canary.candidate
    keyless = AliasTrust(root=root)
    assert resolve_reference(canary.worker, ref, canary.tmp / "keyless", keyless) == canary.stable


def test_a_quarantined_candidate_is_not_advanced(canary: Canary) -> None:
    """Each step runs the alias decision again for the candidate: a quarantine since the
    start refuses the next step (aborting is always possible)."""
    canary.start_signed()
    canary.advance()
    canary.r.actor.client.quarantine(canary.repo, canary.candidate, "bad weights")
    with pytest.raises(APIError, match="quarantine"):
        canary.advance()
    assert canary.abort("quarantined")["signed_step"]["state"] == "aborted"
    assert set(canary.fleet().values()) == {canary.stable}
