"""The policy's ``evidence`` section: who vouches for baselines and replay results.

Fail closed at load time: a gate that asks for evidence nobody may give, an evidence signer
the policy does not define, or a role that may publish are refused, naming the field.
"""

from __future__ import annotations

import pytest

from modelward.attest.errors import PolicyError
from modelward.attest.policy import load_policy

HEAD = "version: 1\ntrust_registered_signers: true\n"
PEM = (
    "-----BEGIN PUBLIC KEY-----\\n"
    "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\\n"
    "-----END PUBLIC KEY-----\\n"
)


@pytest.mark.parametrize(
    "gate", ["require_baseline: true", "replay: {min_consecutive: 10}"], ids=["baseline", "replay"]
)
def test_gate_asking_for_evidence_nobody_may_give_is_refused(gate: str) -> None:
    text = HEAD + f"aliases:\n  - {{pattern: prod, roles: [publisher], protected: true, {gate}}}\n"
    with pytest.raises(PolicyError, match=r"aliases\[0\]: .* evidence names none"):
        load_policy(text.encode(), source="p.yaml")


def test_evidence_signer_the_policy_does_not_define_is_refused() -> None:
    text = HEAD + "evidence: {signers: [gpu-fleet]}\n"
    with pytest.raises(PolicyError, match=r"evidence.signers\[0\]: 'gpu-fleet' is not one"):
        load_policy(text.encode(), source="p.yaml")


@pytest.mark.parametrize("role", ["publisher", "admin", "reviewer"])
def test_a_role_that_is_not_a_serving_worker_cannot_vouch_for_evidence(role: str) -> None:
    text = HEAD + f"evidence: {{roles: [{role}]}}\n"
    with pytest.raises(PolicyError, match=r"evidence.roles\[0\]"):
        load_policy(text.encode(), source="p.yaml")


def test_named_evidence_opens_the_gate_at_load() -> None:
    text = (
        HEAD
        + f'signers:\n  keys:\n    - {{name: gpu-fleet, pem: "{PEM}"}}\n'
        + "evidence: {signers: [gpu-fleet], principals: [worker-1], roles: [reader]}\n"
        + "aliases:\n  - {pattern: prod, roles: [publisher], protected: true,"
        + " require_baseline: true, replay: {min_consecutive: 3}}\n"
    )
    policy = load_policy(text.encode(), source="p.yaml")
    assert policy.evidence.signers == ["gpu-fleet"]
    assert policy.evidence.principals == ["worker-1"]
    assert policy.evidence.roles == ["reader"]


def test_the_default_policy_names_serving_workers_for_evidence() -> None:
    from modelward.registry.domains.repos.service import builtin_default_policy

    policy = load_policy(builtin_default_policy().encode(), source="default.yaml")
    assert policy.evidence.roles == ["reader"]
    assert not policy.evidence.signers
