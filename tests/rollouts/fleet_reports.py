"""Helpers for the fleet report tests: an alias under a rollout on a running registry and
serving workers that sign reports with their own registered keys
(docs/rollouts.md#fleet-reports).

A worker here is a reader principal (the serving worker's token) with a worker key an
admin registered to it, as an operator enrols one; it signs with the loader's own
``sign_predicate``. No process: the reports are the bytes a worker sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.keys import generate_private_key, keyid, public_key_pem, trusted_key
from modelward.attest.rollout import in_candidate_cohort, make_report_predicate
from modelward.attest.statement import PredicateType
from modelward.attest.trust import TrustSet
from modelward.client.api import APIError
from modelward.loader.statements import WorkerKey, sign_predicate
from tests.registry.conftest import Actor, Publisher, Registry, new_publisher, push_new

__all__ = ["Canary", "Worker", "audit_mark", "audited", "canary_at", "refused", "worker_key"]

# ``prod`` is signed by the online key: a plan is signed at start, a step at advance
POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: '*', roles: [publisher], online: true}\n"
)


def worker_key(rollout_id: str, *, candidate: bool, weight: int) -> Any:
    """A fresh key whose cohort at ``weight`` in ``rollout_id`` is the one asked for."""
    while True:
        key = generate_private_key()
        if in_candidate_cohort(rollout_id, keyid(key.public_key()), weight) == candidate:
            return key


@dataclass
class Worker:
    """A serving worker: its principal, its registered key, the next ``seq`` it sends."""

    canary: Canary
    actor: Actor
    key: Any
    seq: int = 0

    @property
    def keyid(self) -> str:
        return keyid(self.key.public_key())

    def predicate(self, digest: str, **fields: Any) -> dict[str, Any]:
        c = self.canary
        doc: dict[str, Any] = {
            "repository": c.repo,
            "alias": c.alias,
            "rollout_id": c.rollout_id,
            "digest": digest,
            "worker_keyid": self.keyid,
            "seq": self.seq,
            "interval_seconds": 10,
            "requests": 120,
            "errors": 1,
            "retries": 0,
            "ttft_p50_ms": 80.0,
            "ttft_p95_ms": 210.5,
            "itl_p95_ms": 21.0,
            "queue_age_p95_ms": 4.0,
            "task_checks_passed": 3,
            "capacity": 64,
            "inflight_peak": 9,
            "stable_warm": True,
        }
        doc.update(fields)
        return make_report_predicate(**doc)

    def envelope(
        self, digest: str, *, subject: str | None = None, predicate: dict[str, Any] | None = None
    ) -> bytes:
        """A report about ``digest`` signed with this worker's key (the statement's subject
        ``subject`` when given, for the tests that make them disagree)."""
        signer = WorkerKey(self.key, TrustSet(keys=(trusted_key("w", self.key.public_key()),)))
        doc = predicate if predicate is not None else self.predicate(digest)
        return sign_predicate(
            signer, self.canary.repo, subject or digest, PredicateType.ROLLOUT_REPORT, doc
        )

    def send(self, envelope: bytes) -> dict[str, Any]:
        answer = self.actor.client.send_report(self.canary.repo, self.canary.alias, envelope)
        self.seq += 1
        return answer

    def report(self, digest: str, **fields: Any) -> dict[str, Any]:
        """Send a valid report about ``digest`` (the next seq)."""
        return self.send(self.envelope(digest, predicate=self.predicate(digest, **fields)))


@dataclass
class Canary:
    """``prod`` of a new repository signed at ``stable``; a rollout to ``candidate`` whose
    signed step is at ``weight`` (0: the plan signed, no step yet)."""

    reg: Registry
    repo: str
    publisher: Publisher
    stable: str
    candidate: str
    rollout_id: str
    alias: str = "prod"
    workers: list[Worker] = field(default_factory=list)

    def worker(self, *, candidate: bool = False, weight: int = 5, key: Any = None) -> Worker:
        """A new serving worker (reader principal, admin-registered key) in the cohort asked
        for at ``weight``."""
        actor = self.reg.actor("reader")
        key = key or worker_key(self.rollout_id, candidate=candidate, weight=weight)
        self.reg.admin.register_key(public_key_pem(key.public_key()).decode(), actor.name)
        w = Worker(self, actor, key)
        self.workers.append(w)
        return w

    def status(self) -> dict[str, Any]:
        return self.reg.admin.rollout_status(self.repo, self.alias)


def canary_at(reg: Registry, tmp: Path, *, steps: int = 1) -> Canary:
    """A rollout of a new repository's ``prod``, advanced ``steps`` times (1: 5%)."""
    publisher = new_publisher(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    stable = push_new(publisher, repo, tmp)
    publisher.actor.client.set_alias(repo, "prod", stable)
    candidate = push_new(publisher, repo, tmp)
    started = publisher.actor.client.start_rollout(repo, "prod", candidate)
    assert started["plan_signed"], started
    for _ in range(steps):
        publisher.actor.client.advance_rollout(repo, "prod", "on")
    return Canary(reg, repo, publisher, stable, candidate, str(started["rollout_id"]))


def refused(call: Any, status: int, code: str) -> APIError:
    """The APIError ``call()`` raises, checked for its status and code."""
    with pytest.raises(APIError) as info:
        call()
    assert (info.value.status, info.value.code) == (status, code), info.value
    return info.value


def audit_mark(reg: Registry) -> int:
    """The audit log's size now: events after it are this test's."""
    return int(reg.admin.audit_checkpoint()["tree_size"])


def audited(reg: Registry, after: int, subject: str) -> list[dict[str, Any]]:
    """The ``rollout.report.refused`` events about ``subject`` since ``after``."""
    return [
        e
        for e in reg.admin.iter_audit(after=after)
        if e["action"] == "rollout.report.refused" and e["subject"] == subject
    ]
