"""A worker's own policy can require release gates (docs/policy.md#release-gates).

When a worker pulls ``REPO@ALIAS`` and the first alias rule of ITS policy matching the alias
sets ``gates:``, the one verdict (attest.verifier) requires an evaluation statement, verified
against the worker's trust set, signed by one of its ``evidence.signers`` and about this very
bundle, that passes every gate; the registry's word that gates passed counts for nothing. The
registry here enforces no gates at all (its policy lets the publisher move any alias), so
every refusal below is the worker's.

Through the real ``modelward`` CLI against a real registry (SQLite) on loopback; the alias
resolves by the registry's word (``--unsigned-aliases``): alias signing is tested in tests/tuf.
``boot`` and ``replay`` refuse the same way: they pull through the same loader.pull_bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import forkserver
from tests.attest.test_evaluation import HEADER, WORKED_GATES, cases, jsonl, worked_example
from tests.registry.conftest import (
    Actor,
    Publisher,
    Registry,
    new_publisher,
    push_new,
    start_registry,
    unique,
)
from tests.registry.test_release_gates import _attach, _evaluator, _results

# The registry's policy: no gates, the publisher moves any alias (the worker decides).
REGISTRY_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n  - {pattern: '*', roles: [publisher]}\n"
)


@dataclass
class World:
    base: Path
    reg: Registry
    publisher: Publisher
    publisher_pem: Path
    evaluator: Actor
    evaluator_key: Path
    worker: Actor


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from modelward.attest.keys import public_key_pem

    base = tmp_path_factory.mktemp("worker-gates")
    reg = start_registry("sqlite", base / "registry", None)
    try:
        publisher = new_publisher(reg)
        pem = base / "publisher.pub"
        pem.write_bytes(public_key_pem(publisher.key.public_key()))
        evaluator, key = _evaluator(reg, base)
        yield World(base, reg, publisher, pem, evaluator, key, reg.actor("reader"))
    finally:
        reg.close()
        reg.server.stop()


def _worker_policy(world: World, gates: dict[str, Any], evidence: str = "[evaluator]") -> Path:
    """The worker's policy: the publisher's provenance makes a bundle trusted, the evaluator
    (and only it) vouches for evaluations, and ``prod`` has ``gates``."""
    path = world.base / unique("policy") / "worker.yaml"
    path.parent.mkdir()
    path.write_text(
        "\n".join(
            [
                "version: 1",
                "signers:",
                "  keys:",
                f"    - {{name: publisher, path: {world.publisher_pem}}}",
                f"    - {{name: evaluator, path: {world.evaluator_key}.pub}}",
                f"evidence: {{signers: {evidence}}}",
                "aliases:",
                f"  - {{pattern: prod, roles: [publisher], protected: true, gates: {json.dumps(gates)}}}",  # noqa: E501
                "",
            ]
        )
    )
    return path


def _on_prod(
    world: World, results: bytes | None = None, *, key: Path | None = None
) -> tuple[str, str]:
    """A new repository whose ``prod`` names a new bundle, with an evaluation of it attached
    (when ``results`` are given, signed with ``key``, default the evaluator's)."""
    repo = world.reg.repo(world.publisher, policy_yaml=REGISTRY_POLICY)
    digest = push_new(world.publisher, repo, world.base)
    if results is not None:
        attached = _attach(
            world.reg,
            world.evaluator,
            key or world.evaluator_key,
            f"{repo}@{digest}",
            _results(world.base, results),
        )
        assert attached.returncode == 0, attached.stderr
    world.publisher.actor.client.set_alias(repo, "prod", digest)
    return repo, digest


def _pull(
    world: World, reference: str, policy: Path, *extra: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    cache = world.base / unique("cache")
    env = {**os.environ, "MODELWARD_URL": world.reg.url, "MODELWARD_TOKEN": world.worker.token}
    argv = [
        "pull",
        reference,
        "--policy",
        str(policy),
        "--unsigned-aliases",
        "--cache-dir",
        str(cache),
        *extra,
    ]
    result = forkserver.run(argv, env, timeout=120)
    return result, cache


def _refused(result: subprocess.CompletedProcess[str], cache: Path, digest: str) -> str:
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "refused by the worker's policy" in out, out
    assert not list(cache.rglob(digest.removeprefix("sha256:"))), "nothing materialized"
    return out


def test_bundle_with_no_evaluation_is_refused(world: World) -> None:
    repo, digest = _on_prod(world)
    result, cache = _pull(world, f"{repo}@prod", _worker_policy(world, WORKED_GATES))
    out = _refused(result, cache, digest)
    assert "do not promote: alias 'prod' (rule 'prod') needs an evaluation statement" in out
    for gate in WORKED_GATES:
        if gate != "required_slices":
            assert f"gate {gate}: fail (observed none" in out, (gate, out)


def test_worked_example_is_refused_by_its_critical_failure_gate(world: World) -> None:
    repo, digest = _on_prod(world, worked_example())
    result, cache = _pull(world, f"{repo}@prod", _worker_policy(world, WORKED_GATES))
    out = _refused(result, cache, digest)
    assert (
        "gate max_critical_safety_failures: fail (observed 2, bound 0): 2 critical safety "
        "failure(s) (billing-human-0, billing-human-1); at most 0 allowed"
    ) in out
    assert "1 of 10 gate(s) of alias 'prod' (rule 'prod') block (max_critical_safety_failures)" in (
        out
    )
    for gate in WORKED_GATES:  # every gate is listed, passed ones in the summary
        if gate != "required_slices":
            assert gate in out, (gate, out)
    for name in ("billing", "refunds", "safety"):
        assert f"max_slice_regression_points[{name}]" in out, out


def test_inconclusive_evaluation_is_refused_saying_how_many_more_cases(world: World) -> None:
    small = jsonl(HEADER, cases("billing", "human", (72, 4, 4, 0)))
    repo, digest = _on_prod(world, small)
    gates = {"max_slice_regression_points": 5, "required_slices": ["billing"]}
    result, cache = _pull(world, f"{repo}@prod", _worker_policy(world, gates))
    out = _refused(result, cache, digest)
    assert "gate max_slice_regression_points[billing]: inconclusive (observed 0, bound 5, " in out
    assert "more case(s) at the observed rate would resolve it" in out


def test_evaluation_signed_by_a_key_that_is_not_an_evidence_signer_is_refused(
    world: World, tmp_path: Path
) -> None:
    from modelward.attest.keys import save_private_key

    publisher_key = tmp_path / "publisher.key"
    save_private_key(world.publisher.key, publisher_key)
    repo, digest = _on_prod(world, worked_example(critical=0), key=publisher_key)
    result, cache = _pull(world, f"{repo}@prod", _worker_policy(world, WORKED_GATES))
    out = _refused(result, cache, digest)
    assert (
        "evaluation by publisher not counted: publisher is not an evidence signer of the "
        "policy (evidence.signers)"
    ) in out


def test_publisher_listed_as_an_evidence_signer_still_does_not_count(
    world: World, tmp_path: Path
) -> None:
    from modelward.attest.keys import save_private_key

    publisher_key = tmp_path / "publisher.key"
    save_private_key(world.publisher.key, publisher_key)
    repo, digest = _on_prod(world, worked_example(critical=0), key=publisher_key)
    policy = _worker_policy(world, WORKED_GATES, evidence="[evaluator, publisher]")
    result, cache = _pull(world, f"{repo}@prod", policy)
    out = _refused(result, cache, digest)
    assert (
        "publisher vouched for this bundle's https://slsa.dev/provenance/v1: the bundle's "
        "publisher never counts for its evidence"
    ) in out


def test_evaluation_passing_every_gate_is_accepted(world: World) -> None:
    repo, digest = _on_prod(world, worked_example(critical=0))
    result, cache = _pull(world, f"{repo}@prod", _worker_policy(world, WORKED_GATES), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["digest"] == digest
    checks = {c["name"]: c for c in report["decision"]["checks"]}
    assert checks["gates"]["passed"], checks["gates"]
    assert checks["gates"]["message"].startswith("promote: 1 evaluation(s)")
    assert checks["gate max_critical_safety_failures"]["passed"]
    assert Path(report["directory"]).is_dir()
    assert cache in Path(report["directory"]).parents


def test_pull_by_digest_matches_no_alias_rule(world: World) -> None:
    repo, digest = _on_prod(world)  # no evaluation: @prod would be refused
    result, _ = _pull(world, f"{repo}@{digest}", _worker_policy(world, WORKED_GATES), "--json")
    assert result.returncode == 0, result.stderr
    checks = [c["name"] for c in json.loads(result.stdout)["decision"]["checks"]]
    assert not [name for name in checks if name.startswith("gate")], checks
