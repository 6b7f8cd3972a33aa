"""Evidence comes from whoever the gate trusts for it (docs/policy.md#evidence).

Determinism baselines and replay results open a protected alias's ``require_baseline`` and
``replay`` gates only when signed by an evidence signer the policy names (``evidence``): never
by the bundle's publisher, the mover, a publisher of the repository or an admin, nor with a key
registered to one of them. Before, any signer the policy listed counted, so a publisher holding
a listed key satisfied the ``prod`` gate herself. Real server, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelward.client.api import APIError
from tests.registry.conftest import Actor, Registry, new_publisher, push_new

BASELINE = {"fingerprint_id": "f", "outputs": []}


def _signed(key: Any, digest: str, predicate_type: str, predicate: dict[str, Any]) -> bytes:
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.statement import make_statement

    return sign_envelope(make_statement("bundle", digest, predicate_type, predicate), [key])


def _pem(key: Any) -> str:
    from modelward.attest.keys import public_key_pem

    return public_key_pem(key.public_key()).decode()


def _inline(key: Any) -> str:
    return json.dumps(_pem(key))  # a YAML double-quoted scalar (JSON is YAML)


def _worker(registry: Registry) -> tuple[Actor, Any]:
    """A reader (serving worker) with a key an admin registered for it."""
    from modelward.attest.keys import generate_private_key

    worker, key = registry.actor("reader"), generate_private_key()
    registry.admin.register_key(_pem(key), principal=worker.name)
    return worker, key


def _policy(*lines: str, gate: str) -> str:
    return "\n".join(
        [
            "version: 1",
            "trust_registered_signers: true",
            *lines,
            "aliases:",
            f"  - {{pattern: prod, roles: [publisher], protected: true, {gate}}}",
            "  - {pattern: '*', roles: [publisher]}",
            "",
        ]
    )


def _mark(registry: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in registry.admin.iter_audit())])


def _denied(registry: Registry, mark: int, code: str, actor: str) -> bool:
    return any(
        e["action"] == "denied" and e["details"].get("code") == code and e["actor"] == actor
        for e in registry.admin.iter_audit(after=mark)
    )


def test_publisher_signed_baseline_with_a_policy_listed_key_does_not_satisfy_the_gate(
    registry: Registry, tmp_path: Path
) -> None:
    from modelward.attest.keys import generate_private_key
    from modelward.attest.statement import PredicateType

    pub, co = new_publisher(registry), new_publisher(registry)
    release = generate_private_key()  # the publisher's own release key, pinned by the policy
    admin = registry.actor("admin")
    admin_key = generate_private_key()
    registry.admin.register_key(_pem(admin_key), principal=admin.name)
    policy = _policy(
        "signers:",
        "  keys:",
        f"    - {{name: release, pem: {_inline(release)}}}",
        f"    - {{name: fleet, pem: {_inline(co.key)}}}",  # also registered to a publisher
        "evidence: {roles: [reader], signers: [fleet]}",
        gate="approvals: 1, require_baseline: true",
    )
    repo = registry.repo(pub, co, policy_yaml=policy)
    digest = push_new(pub, repo, tmp_path)
    registry.actor("reviewer").client.approve(repo, digest, "prod")
    worker, _ = _worker(registry)  # a worker attaches whatever it was handed
    for key in (release, co.key, pub.key, admin_key):
        worker.client.add_attestation(
            repo, digest, _signed(key, digest, PredicateType.BASELINE, BASELINE)
        )
    mark = _mark(registry)
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(repo, "prod", digest)
    assert (info.value.status, info.value.code) == (422, "baseline_required"), info.value
    refused = {item["signer"]: item["reason"] for item in info.value.detail["not_counted"]}
    assert set(refused) == {"release", "fleet", f"@{pub.name}", f"@{admin.name}"}, refused
    assert "not an evidence signer" in refused["release"]
    assert "registered to" in refused["fleet"]
    assert "publisher" in refused[f"@{pub.name}"]
    with pytest.raises(APIError):
        pub.actor.client.get_alias(repo, "prod")
    assert _denied(registry, mark, "baseline_required", pub.name)


def test_publisher_signed_replay_result_does_not_satisfy_the_gate(
    registry: Registry, tmp_path: Path
) -> None:
    from modelward.attest.statement import PredicateType

    pub, co = new_publisher(registry), new_publisher(registry)
    policy = _policy(
        "signers:",
        "  keys:",
        f"    - {{name: fleet, pem: {_inline(pub.key)}}}",  # the publisher's registered key
        "evidence: {roles: [reader], signers: [fleet]}",
        gate="replay: {min_consecutive: 3}",
    )
    repo = registry.repo(pub, co, policy_yaml=policy)
    digest = push_new(pub, repo, tmp_path)
    replay = {"consecutive_matches": 5, "divergence_count": 0, "against": None}
    worker, _ = _worker(registry)
    for key in (pub.key, co.key):  # the publisher's and a co-publisher's
        worker.client.add_attestation(
            repo, digest, _signed(key, digest, PredicateType.REPLAY, replay)
        )
    mark = _mark(registry)
    for mover in (pub, co):  # neither the publisher nor another publisher gets it through
        with pytest.raises(APIError) as info:
            mover.actor.client.set_alias(repo, "prod", digest)
        assert (info.value.status, info.value.code) == (422, "replay_required"), info.value
        assert _denied(registry, mark, "replay_required", mover.name)
    refused = {item["signer"] for item in info.value.detail["not_counted"]}
    assert refused == {"fleet", f"@{co.name}"}, refused


def test_named_worker_baseline_satisfies_the_gate(registry: Registry, tmp_path: Path) -> None:
    from modelward.attest.statement import PredicateType

    pub = new_publisher(registry)
    named, named_key = _worker(registry)
    other, other_key = _worker(registry)
    policy = _policy(
        f"evidence: {{principals: [{named.name}]}}",
        gate="approvals: 1, require_baseline: true",
    )
    repo = registry.repo(pub, policy_yaml=policy)
    digest = push_new(pub, repo, tmp_path)
    registry.actor("reviewer").client.approve(repo, digest, "prod")
    # a worker the policy does not name: not enough
    other.client.add_attestation(
        repo, digest, _signed(other_key, digest, PredicateType.BASELINE, BASELINE)
    )
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(repo, "prod", digest)
    assert info.value.code == "baseline_required"
    assert info.value.detail["evidence"]["principals"] == [named.name]
    # the named worker's baseline opens the gate
    named.client.add_attestation(
        repo, digest, _signed(named_key, digest, PredicateType.BASELINE, BASELINE)
    )
    moved = pub.actor.client.set_alias(repo, "prod", digest)
    assert (moved["digest"], moved["version"]) == (digest, 1)


def test_worker_key_pinned_by_the_policy_satisfies_the_replay_gate(
    registry: Registry, tmp_path: Path
) -> None:
    from modelward.attest.keys import generate_private_key
    from modelward.attest.statement import PredicateType

    pub, gpu = new_publisher(registry), generate_private_key()
    policy = _policy(
        "signers:",
        "  keys:",
        f"    - {{name: gpu-fleet, pem: {_inline(gpu)}}}",
        "evidence: {signers: [gpu-fleet]}",
        gate="replay: {min_consecutive: 3}",
    )
    repo = registry.repo(pub, policy_yaml=policy)
    digest = push_new(pub, repo, tmp_path)
    replay = {"consecutive_matches": 3, "divergence_count": 0, "against": None}
    registry.actor("reader").client.add_attestation(
        repo, digest, _signed(gpu, digest, PredicateType.REPLAY, replay)
    )
    assert pub.actor.client.set_alias(repo, "prod", digest)["digest"] == digest


def test_gate_asking_for_evidence_nobody_may_give_is_refused_at_policy_load(
    registry: Registry,
) -> None:
    pub = new_publisher(registry)
    policy = _policy(gate="approvals: 1, require_baseline: true")
    with pytest.raises(APIError) as info:
        registry.repo(pub, policy_yaml=policy)
    assert (info.value.status, info.value.code) == (400, "invalid_policy")
    assert "evidence" in info.value.message
