"""Release gates: a protected alias moves only when an evaluation passes every gate
(docs/evaluation.md#gates, docs/policy.md#release-gates).

Through the real CLI against a real registry (SQLite and PostgreSQL): an evaluator (a
reviewer the policy names for evidence) runs ``modelward eval attach`` with per-case results;
``modelward alias set ORG/NAME@prod`` is then refused ``gates_failed`` listing every gate with
its verdict, or allowed when every gate passes. The worked example of the users' release
method (faster and cheaper, two critical safety failures) is blocked by its critical-failure
gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelward.client.api import APIError
from tests.attest.test_evaluation import HEADER, WORKED_GATES, cases, jsonl, worked_example
from tests.registry.conftest import Actor, Publisher, Registry, new_publisher, push_new, unique


def _gates_yaml(gates: dict[str, Any]) -> str:
    return json.dumps(gates)  # a YAML flow mapping (JSON is YAML)


def _policy(evaluator: str, gates: dict[str, Any]) -> str:
    return "\n".join(
        [
            "version: 1",
            "trust_registered_signers: true",
            f"evidence: {{principals: [{evaluator}]}}",
            "aliases:",
            f"  - {{pattern: prod, roles: [publisher], protected: true, gates: {_gates_yaml(gates)}}}",  # noqa: E501
            "  - {pattern: '*', roles: [publisher]}",
            "",
        ]
    )


def _evaluator(registry: Registry, tmp_path: Path) -> tuple[Actor, Path]:
    """A reviewer with a key made by ``modelward key generate`` and registered to it."""
    actor = registry.actor("reviewer")
    key = tmp_path / unique("eval") / "evaluator.key"
    key.parent.mkdir()
    registry.cli("key", "generate", "--out", str(key), check=True)
    registry.admin.register_key(Path(f"{key}.pub").read_text(), principal=actor.name)
    return actor, key


def _setup(
    registry: Registry, tmp_path: Path, gates: dict[str, Any] | None = None
) -> tuple[Publisher, Actor, Path, str]:
    pub = new_publisher(registry)
    evaluator, key = _evaluator(registry, tmp_path)
    repo = registry.repo(pub, policy_yaml=_policy(evaluator.name, gates or WORKED_GATES))
    return pub, evaluator, key, repo


def _results(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / unique("results") / "results.jsonl"
    path.parent.mkdir()
    path.write_bytes(data)
    return path


def _attach(
    registry: Registry, actor: Actor, key: Path, ref: str, results: Path, *extra: str
) -> Any:
    return registry.cli(
        "eval",
        "attach",
        ref,
        "--results",
        str(results),
        "--key",
        str(key),
        *extra,
        token=actor.token,
    )


def _refusal(pub: Publisher, repo: str, digest: str) -> APIError:
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(repo, "prod", digest)
    assert (info.value.status, info.value.code) == (422, "gates_failed"), info.value
    return info.value


def _mark(registry: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in registry.admin.iter_audit())])


def test_worked_example_is_blocked_by_its_critical_failure_gate(
    registry: Registry, tmp_path: Path
) -> None:
    pub, evaluator, key, repo = _setup(registry, tmp_path)
    baseline = push_new(pub, repo, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    attached = _attach(
        registry,
        evaluator,
        key,
        f"{repo}@{digest}",
        _results(tmp_path, worked_example()),
        "--baseline",
        f"{repo}@{baseline}",
    )
    assert attached.returncode == 0, attached.stderr
    assert "critical safety failures: 2 (billing-human-0, billing-human-1)" in attached.stdout
    mark = _mark(registry)
    moved = registry.cli("alias", "set", f"{repo}@prod", digest, token=pub.actor.token)
    assert moved.returncode == 1
    assert "gates_failed" in moved.stderr
    assert "do not promote: max_critical_safety_failures FAIL" in moved.stderr
    for gate in WORKED_GATES:
        if gate != "required_slices":
            assert gate in moved.stderr, gate
    refusal = _refusal(pub, repo, digest)
    verdicts = {(g["name"], g["slice"]): g["verdict"] for g in refusal.detail["gates"]}
    assert verdicts.pop(("max_critical_safety_failures", None)) == "fail"
    assert set(verdicts.values()) == {"pass"}, verdicts
    assert len(verdicts) == 9  # 7 more gates, three required slices
    assert any(
        e["action"] == "denied" and e["details"].get("code") == "gates_failed"
        for e in registry.admin.iter_audit(after=mark)
    )
    with pytest.raises(APIError):
        pub.actor.client.get_alias(repo, "prod")


def test_evaluation_passing_every_gate_opens_prod(registry: Registry, tmp_path: Path) -> None:
    pub, evaluator, key, repo = _setup(registry, tmp_path)
    baseline = push_new(pub, repo, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    attached = _attach(
        registry,
        evaluator,
        key,
        f"{repo}@{digest}",
        _results(tmp_path, worked_example(critical=0)),
        "--baseline",
        f"{repo}@{baseline}",
        "--json",
    )
    assert attached.returncode == 0, attached.stderr
    answer = json.loads(attached.stdout)
    assert answer["attestation"]["predicate_type"] == "https://modelward.dev/evaluation/v1"
    assert answer["predicate"]["baseline"]["digest"] == baseline
    moved = registry.cli("alias", "set", f"{repo}@prod", digest, token=pub.actor.token)
    assert moved.returncode == 0, moved.stderr
    assert pub.actor.client.get_alias(repo, "prod")["digest"] == digest


def test_no_evaluation_fails_every_gate(registry: Registry, tmp_path: Path) -> None:
    pub, _, _, repo = _setup(registry, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    refusal = _refusal(pub, repo, digest)
    assert refusal.detail["evaluations"] == []
    assert {g["name"] for g in refusal.detail["gates"]} == set(WORKED_GATES) - {"required_slices"}
    assert {g["verdict"] for g in refusal.detail["gates"]} == {"fail"}


def test_evaluation_signed_with_the_publishers_key_does_not_count(
    registry: Registry, tmp_path: Path
) -> None:
    from modelward.attest.keys import save_private_key

    pub, evaluator, _, repo = _setup(registry, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    stolen = tmp_path / unique("pub") / "publisher.key"
    stolen.parent.mkdir()
    save_private_key(pub.key, stolen)
    attached = _attach(
        registry,
        evaluator,
        stolen,
        f"{repo}@{digest}",
        _results(tmp_path, worked_example(critical=0)),
    )
    assert attached.returncode == 0, attached.stderr  # attaching is allowed; it counts nowhere
    refusal = _refusal(pub, repo, digest)
    assert refusal.detail["evaluations"] == []
    refused = {item["signer"]: item["reason"] for item in refusal.detail["not_counted"]}
    assert "publisher" in refused[f"@{pub.name}"], refused


def test_evaluation_against_another_baseline_does_not_count_once_prod_has_a_bundle(
    registry: Registry, tmp_path: Path
) -> None:
    pub, evaluator, key, repo = _setup(registry, tmp_path)
    first, other, second = (push_new(pub, repo, tmp_path) for _ in range(3))
    good = _results(tmp_path, worked_example(critical=0))
    assert _attach(registry, evaluator, key, f"{repo}@{first}", good).returncode == 0
    assert (
        registry.cli(
            "alias", "set", f"{repo}@prod", first, token=pub.actor.token, check=True
        ).returncode
        == 0
    )
    # compared with a bundle that is not on prod: does not count
    assert (
        _attach(
            registry, evaluator, key, f"{repo}@{second}", good, "--baseline", f"{repo}@{other}"
        ).returncode
        == 0
    )
    refusal = _refusal(pub, repo, second)
    assert any(
        f"its baseline is {other}, not {first}" in item["reason"]
        for item in refusal.detail["not_counted"]
    ), refusal.detail
    # compared with the bundle on prod now: counts, and passes
    assert (
        _attach(
            registry, evaluator, key, f"{repo}@{second}", good, "--baseline", f"{repo}@prod"
        ).returncode
        == 0
    )
    assert pub.actor.client.set_alias(repo, "prod", second)["digest"] == second


def test_inconclusive_slice_blocks_and_says_how_many_more_cases(
    registry: Registry, tmp_path: Path
) -> None:
    gates = {"max_slice_regression_points": 5, "required_slices": ["billing"]}
    pub, evaluator, key, repo = _setup(registry, tmp_path, gates)
    digest = push_new(pub, repo, tmp_path)
    small = _results(tmp_path, jsonl(HEADER, cases("billing", "human", (72, 4, 4, 0))))
    assert _attach(registry, evaluator, key, f"{repo}@{digest}", small).returncode == 0
    moved = registry.cli("alias", "set", f"{repo}@prod", digest, token=pub.actor.token)
    assert moved.returncode == 1
    assert "max_slice_regression_points[billing] INCONCLUSIVE" in moved.stderr
    [gate] = _refusal(pub, repo, digest).detail["gates"]
    assert (gate["verdict"], gate["slice"]) == ("inconclusive", "billing")
    assert isinstance(gate["more_cases"], int)
    assert gate["more_cases"] > 0
    assert f"about {gate['more_cases']} more case(s)" in gate["message"]


def test_bad_results_file_is_refused_naming_the_line_and_attaches_nothing(
    registry: Registry, tmp_path: Path
) -> None:
    pub, evaluator, key, repo = _setup(registry, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    lines = cases("billing", "human", (3, 0, 0, 0))
    lines[1]["candidate"]["pass"] = "yes"
    results = _results(tmp_path, jsonl(HEADER, lines))
    attached = _attach(registry, evaluator, key, f"{repo}@{digest}", results)
    assert attached.returncode == 2  # a malformed input file (docs/cli.md)
    assert f"{results}:3 (case 'billing-human-1'): candidate.pass: must be true or false" in (
        attached.stderr
    )
    kinds = {a["predicate_type"] for a in evaluator.client.list_attestations(repo, digest)}
    assert "https://modelward.dev/evaluation/v1" not in kinds


def test_publisher_may_not_attach_an_evaluation(registry: Registry, tmp_path: Path) -> None:
    pub, _, key, repo = _setup(registry, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    attached = _attach(
        registry, pub.actor, key, f"{repo}@{digest}", _results(tmp_path, worked_example(critical=0))
    )
    assert attached.returncode == 1
    assert "only reviewers and admins may" in attached.stderr


def test_gates_nobody_may_vouch_for_are_refused_when_the_repository_is_created(
    registry: Registry, tmp_path: Path
) -> None:
    policy = tmp_path / unique("policy") / "policy.yaml"
    policy.parent.mkdir()
    policy.write_text(
        "version: 1\ntrust_registered_signers: true\naliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true, "
        "gates: {max_critical_safety_failures: 0}}\n"
    )
    name = f"{unique('o')}/{unique('m')}"
    created = registry.cli("repo", "create", name, "--policy", str(policy))
    assert created.returncode == 1
    assert "aliases[0]: gates needs evidence" in created.stderr
