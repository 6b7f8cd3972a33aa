"""The policy document: loading, errors that name the field, shipped policies, schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import modelward.attest.policy
from modelward.attest.errors import PolicyError
from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.attest.policy import (
    PROVENANCE_V1,
    Policy,
    alias_rule_for,
    load_policy,
    policy_json_schema,
    policy_scan_limits,
    policy_trust_set,
)
from tests.conftest import REPO_ROOT

POLICIES = REPO_ROOT / "policies"
SHIPPED = [POLICIES / "default.yaml", *sorted((POLICIES / "examples").glob("*.yaml"))]


def _error(text: str, tmp_path: Path) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as raised:
        load_policy(path)
    return str(raised.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: 1\ntrust_registered_signers: true\nthreshold: 0\n",
            "policy.yaml: threshold: must be >= 1",
        ),
        ("version: 2\ntrust_registered_signers: true\n", "policy.yaml: version: must be 1"),
        ("trust_registered_signers: true\n", "policy.yaml: version: required field is missing"),
        (
            "version: 1\nsigners:\n  keys:\n    - name: a\n      path: missing.pub\n",
            "policy.yaml: signers.keys[0].path: file not found",
        ),
        (
            "version: 1\ntrust_registered_signers: true\nthreshhold: 1\n",
            "policy.yaml: threshhold: unknown field",
        ),
        ("version: 1\n", "policy.yaml: signers: no trusted signers"),
        ("version: 1\nsigners: {keys: []}\n", "policy.yaml: signers: no trusted signers"),
        (
            "version: 1\nsigners:\n  identities: [{name: a, identity: x, issuer: y}]\n"
            "threshold: 2\n",
            "policy.yaml: threshold: 2 exceeds the 1 trusted signer(s)",
        ),
        (
            "version: 1\nsigners:\n  identities:\n    - {name: a, identity: x, issuer: y}\n"
            "    - {name: a, identity: z, issuer: y}\n",
            "policy.yaml: signers: signer name 'a' is used twice",
        ),
        (
            "version: 1\nsigners:\n  keys: [{name: a, pem: 'not a key'}]\n",
            "policy.yaml: signers.keys[0].pem:",
        ),
        (
            "version: 1\nsigners:\n  keys: [{name: a}]\n",
            "policy.yaml: signers.keys[0]: give exactly one of path or pem",
        ),
        (
            "version: 1\nsigners:\n  cas: [{name: ca, roots: [nowhere.pem]}]\n",
            "policy.yaml: signers.cas[0].roots[0]: file not found",
        ),
        (
            "version: 1\ntrust_registered_signers: true\n"
            "aliases: [{pattern: prod, roles: [publisher], approvals: 1}]\n",
            "policy.yaml: aliases[0]: approvals is set but protected is false",
        ),
        (
            "version: 1\ntrust_registered_signers: true\n"
            "aliases: [{pattern: prod, roles: [root]}]\n",
            "policy.yaml: aliases[0].roles[0]: must be 'admin', 'publisher', 'reviewer' or",
        ),
        (
            "version: 1\ntrust_registered_signers: true\naliases: [{pattern: prod}]\n",
            "policy.yaml: aliases[0]: no principals and no roles",
        ),
        (
            "version: 1\ntrust_registered_signers: true\n"
            "aliases: [{pattern: prod, roles: [publisher], protected: true,"
            " replay: {min_consecutive: 0}}]\n",
            "policy.yaml: aliases[0].replay.min_consecutive: must be >= 1",
        ),
        (
            "version: 1\ntrust_registered_signers: true\nfiles: {allow_globs: ['**']}\n",
            "policy.yaml: files.allow_globs: '**' would admit every file",
        ),
        (
            "version: 1\ntrust_registered_signers: true\nengine_version: sometimes\n",
            "policy.yaml: engine_version: must be 'enforce' or 'warn'",
        ),
        (
            "version: 1\nversion: 1\n",
            "policy.yaml: not valid YAML: line 2, column 1: duplicate key 'version'",
        ),
        ("version: [1\n", "policy.yaml: not valid YAML: line 2"),
        (
            "version: 1\nx: &a [1]\ny: *a\n",
            "policy.yaml: not valid YAML: line 2, column 4: YAML anchors and aliases are not allowed",  # noqa: E501
        ),
        ("- version: 1\n", "policy.yaml: the document must be a mapping"),
    ],
)
def test_mistake_names_the_field(text, message, tmp_path):
    assert message in _error(text, tmp_path)


def test_every_error_is_reported(tmp_path):
    text = "version: 1\ntrust_registered_signers: true\nthreshold: 0\nbogus: 1\n"
    error = _error(text, tmp_path)
    assert "threshold: must be >= 1" in error
    assert "bogus: unknown field" in error


def test_oversized_policy_refused(tmp_path):
    limit = modelward.attest.policy.MAX_POLICY_BYTES
    big = "version: 1\ntrust_registered_signers: true\n" + "#" * limit
    assert "larger than" in _error(big, tmp_path)


def test_relative_key_path_without_directory_refused():
    with pytest.raises(PolicyError, match=r"'a\.pub' but the policy has no directory"):
        policy_trust_set(
            load_policy(b"version: 1\nsigners: {keys: [{name: a, path: a.pub}]}\n"), None
        )


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_policy_loads(path):
    policy = load_policy(path)
    assert policy.version == 1


def test_examples_cover_each_signer_kind():
    loaded = [load_policy(p) for p in SHIPPED]
    assert any(p.signers.keys for p in loaded)
    assert any(p.signers.cas for p in loaded)
    assert any(p.signers.identities for p in loaded)
    assert any(r.replay is not None for p in loaded for r in p.aliases)


def test_example_trust_set_loads_keys_and_certificates():
    trust = policy_trust_set(
        load_policy(POLICIES / "examples" / "key-signed-team.yaml"), POLICIES / "examples"
    )
    assert [k.name for k in trust.keys] == ["alice", "bob", "carol"]
    assert all(len(k.keyid) == 64 for k in trust.keys)
    ca = policy_trust_set(
        load_policy(POLICIES / "examples" / "oms-x509-ca.yaml"), POLICIES / "examples"
    )
    assert len(ca.cas[0].roots) == 1
    assert len(ca.cas[0].intermediates) == 1


def test_default_policy_is_strict():
    policy = load_policy(POLICIES / "default.yaml")
    assert policy.trust_registered_signers
    assert not policy.signers.names()
    assert policy.threshold == 1
    assert policy.required_predicate_types == [PROVENANCE_V1]
    assert policy.rejected_attestations == "deny"
    prod = alias_rule_for(policy, "prod")
    assert prod is not None
    assert prod.protected
    assert prod.approvals == 1
    staging = alias_rule_for(policy, "staging")
    assert staging is not None
    assert not staging.protected
    assert "publisher" in staging.roles


def test_alias_rule_first_match_wins_and_unmatched_is_none():
    policy = load_policy(POLICIES / "examples" / "two-person-replay-gate.yaml")
    prod = alias_rule_for(policy, "prod")
    assert prod is not None
    assert prod.approvals == 2
    assert prod.replay is not None
    assert (prod.replay.min_consecutive, prod.replay.max_divergences) == (1000, 0)
    canary = alias_rule_for(policy, "canary-eu")
    assert canary is not None
    assert canary.require_baseline
    assert canary.replay is None
    closed = load_policy(
        b"version: 1\ntrust_registered_signers: true\n"
        b"aliases: [{pattern: 'dev-*', roles: [publisher]}]\n"
    )
    assert alias_rule_for(closed, "prod") is None
    assert alias_rule_for(closed, "Dev-1") is None  # case-sensitive


def test_inline_pem_policy_loads_from_bytes():
    pem = public_key_pem(generate_private_key().public_key()).decode()
    doc = json.dumps({"version": 1, "signers": {"keys": [{"name": "k", "pem": pem}]}})
    policy = load_policy(doc.encode(), "inline.yaml")  # JSON is YAML
    assert policy_trust_set(policy).keys[0].name == "k"


def test_policy_scan_limits():
    policy = load_policy(
        b"version: 1\ntrust_registered_signers: true\n"
        b"files: {allow_globs: ['*.onnx.txt']}\nlimits: {max_safetensors_header: 1000}\n"
    )
    limits = policy_scan_limits(policy)
    assert limits.allow_globs == ("*.onnx.txt",)
    assert limits.max_safetensors_header == 1000


def test_policy_is_immutable():
    policy = load_policy(b"version: 1\ntrust_registered_signers: true\n")
    with pytest.raises(ValueError, match="frozen"):
        policy.threshold = 0  # type: ignore[misc]
    assert isinstance(policy, Policy)


def test_committed_schema_is_generated():
    committed = json.loads((POLICIES / "schema.json").read_text())
    hint = "run: .venv/bin/python -m modelward.policies.generate_schema"
    assert committed == policy_json_schema(), hint


def test_schema_forbids_unknown_fields():
    schema = policy_json_schema()
    assert schema["additionalProperties"] is False
    assert schema["properties"]["threshold"]["minimum"] == 1


def test_public_surface_is_pinned():
    assert set(modelward.attest.policy.__all__) == {
        "ATTESTATION_STEPS",
        "MAX_POLICY_BYTES",
        "OMS_TREE_NOTE",
        "PROVENANCE_V1",
        "AliasRule",
        "CASigner",
        "Check",
        "Decision",
        "Files",
        "FloorAlias",
        "FloorLimits",
        "IdentitySigner",
        "KeySigner",
        "Limits",
        "Policy",
        "PolicyBelowFloor",
        "PolicyDenied",
        "PolicyFloor",
        "ReplayRequirement",
        "Shortfall",
        "Signers",
        "TrustFlags",
        "alias_rule_for",
        "evaluate",
        "evidence_rule",
        "floor_shortfalls",
        "load_policy",
        "policy_from_flags",
        "policy_json_schema",
        "policy_json_schema_text",
        "policy_scan_limits",
        "policy_trust_set",
        "require_allowed",
        "require_meets_floor",
        "size_checks",
        "trusted_public_key",
    }
    assert all(hasattr(modelward.attest.policy, name) for name in modelward.attest.policy.__all__)
