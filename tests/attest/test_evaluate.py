"""The one evaluator, with real keys, real DSSE envelopes and real manifests.

One test per attack, named after it (docs/attestations.md lists the threats).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.dsse import sign_envelope
from modelward.attest.keys import generate_private_key, public_key_pem, trusted_key
from modelward.attest.manifest import Manifest, build_bundle
from modelward.attest.policy import (
    Decision,
    Policy,
    PolicyDenied,
    evaluate,
    require_allowed,
)
from modelward.attest.scanner import Finding
from modelward.attest.statement import PredicateType, make_statement
from modelward.attest.trust import TrustSet, VerifiedStatement
from modelward.attest.verify import verify_attestation

BUILDER = "https://ci.example.com/modelward-builder/v1"
SOURCE = "hf://example-org/tiny"


def _bundle(root: Path, content: bytes = b'{"a": 1}\n') -> Manifest:
    root.mkdir()
    (root / "config.json").write_bytes(content)
    (root / "README.md").write_bytes(b"# tiny\n")
    return build_bundle(root).manifest


@pytest.fixture
def manifest(tmp_path: Path) -> Manifest:
    return _bundle(tmp_path / "bundle")


@pytest.fixture(scope="module")
def keys() -> dict[str, Any]:
    return {name: generate_private_key() for name in ("alice", "bob", "carol", "mallory")}


def _policy(keys: dict[str, Any], **fields: Any) -> Policy:
    signers = [
        {"name": n, "pem": public_key_pem(keys[n].public_key()).decode()}
        for n in ("alice", "bob", "carol")
    ]
    return Policy.model_validate({"version": 1, "signers": {"keys": signers}, **fields})


def _trust(keys: dict[str, Any]) -> TrustSet:
    return TrustSet(keys=tuple(trusted_key(n, k.public_key()) for n, k in keys.items()))


def _provenance(builder: str = BUILDER, source: str = SOURCE) -> dict[str, Any]:
    return {
        "buildDefinition": {
            "buildType": "https://modelward.dev/bundle-assembly/v1",
            "externalParameters": {"source": {"uri": source, "revision": "a" * 40}},
        },
        "runDetails": {"builder": {"id": builder}},
    }


def _signed(
    keys: dict[str, Any],
    signer_names: Sequence[str],
    digest: str,
    predicate_type: str = PredicateType.PROVENANCE,
    predicate: dict[str, Any] | None = None,
    bound_to: str | None = None,
) -> VerifiedStatement:
    """A real envelope signed by ``signer_names``, verified by attest.verify."""
    payload = make_statement(
        "tiny", digest, predicate_type, predicate if predicate is not None else _provenance()
    )
    envelope = sign_envelope(payload, [keys[n] for n in signer_names])
    return verify_attestation(envelope, _trust(keys), bundle_digest=bound_to or digest)


def _decide(
    policy: Policy,
    manifest: Manifest,
    statements: Sequence[VerifiedStatement],
    *,
    rejected: Sequence[str] = (),
    findings: Sequence[Finding] = (),
) -> Decision:
    return evaluate(
        policy, manifest=manifest, statements=statements, rejected=rejected, findings=findings
    )


def _failed(decision: Decision) -> str:
    return "\n".join(decision.reasons)


def test_single_trusted_signer_allows_and_records_every_check(keys, manifest):
    decision = _decide(_policy(keys), manifest, [_signed(keys, ["alice"], manifest.digest)])
    assert decision.allowed, _failed(decision)
    assert [s.name for s in decision.signers] == ["alice"]
    names = {c.name for c in decision.checks}
    assert {"scan", "subject", "builder", "source", "size"} <= names
    assert f"threshold {PredicateType.PROVENANCE}" in names
    require_allowed(decision)


def test_threshold_two_of_three_met_across_statements(keys, manifest):
    statements = [
        _signed(keys, ["alice"], manifest.digest),
        _signed(keys, ["bob"], manifest.digest),
    ]
    decision = _decide(_policy(keys, threshold=2), manifest, statements)
    assert decision.allowed, _failed(decision)
    assert sorted(s.name for s in decision.signers) == ["alice", "bob"]


def test_threshold_two_of_three_met_in_one_envelope(keys, manifest):
    statement = _signed(keys, ["carol", "alice"], manifest.digest)
    decision = _decide(_policy(keys, threshold=2), manifest, [statement])
    assert decision.allowed, _failed(decision)


def test_threshold_two_of_three_unmet(keys, manifest):
    decision = _decide(
        _policy(keys, threshold=2), manifest, [_signed(keys, ["alice"], manifest.digest)]
    )
    assert not decision.allowed
    assert "1 of 2 required distinct signers" in _failed(decision)
    with pytest.raises(PolicyDenied) as raised:
        require_allowed(decision)
    assert raised.value.decision is decision
    assert "threshold" in str(raised.value)


def test_threshold_one_key_signing_twice_counts_once(keys, manifest):
    statements = [
        _signed(keys, ["alice"], manifest.digest),
        _signed(keys, ["alice"], manifest.digest, predicate=_provenance(source="hf://x/y")),
    ]
    decision = _decide(_policy(keys, threshold=2), manifest, statements)
    assert not decision.allowed
    assert "1 of 2 required distinct signers (alice)" in _failed(decision)


def test_threshold_untrusted_signer_not_counted(keys, manifest):
    # mallory is in the verifier's trust set but not in the policy: never counted.
    statements = [
        _signed(keys, ["alice"], manifest.digest),
        _signed(keys, ["mallory"], manifest.digest),
    ]
    decision = _decide(_policy(keys, threshold=2), manifest, statements)
    assert not decision.allowed
    assert "not trusted by this policy: mallory" in _failed(decision)


def test_predicate_type_confusion_rejected(keys, manifest):
    baseline = _signed(
        keys, ["alice", "bob"], manifest.digest, PredicateType.BASELINE, {"probes": []}
    )
    decision = _decide(_policy(keys), manifest, [baseline])
    assert not decision.allowed
    assert f"predicate {PredicateType.PROVENANCE}: no verified statement" in _failed(decision)


def test_every_required_predicate_type_needs_threshold(keys, manifest):
    policy = _policy(
        keys, required_predicate_types=[PredicateType.PROVENANCE, PredicateType.EVALUATION]
    )
    provenance = _signed(keys, ["alice"], manifest.digest)
    assert not _decide(policy, manifest, [provenance]).allowed
    evaluation = _signed(keys, ["bob"], manifest.digest, PredicateType.EVALUATION, {"x": 1})
    decision = _decide(policy, manifest, [provenance, evaluation])
    assert decision.allowed, _failed(decision)


def test_mix_and_match_other_bundles_statement_fails(keys, manifest, tmp_path):
    other = _bundle(tmp_path / "other", b'{"a": 2}\n')
    assert other.digest != manifest.digest
    # Verified against the other bundle (where it belongs), then offered for this one.
    statement = _signed(keys, ["alice", "bob"], other.digest)
    decision = _decide(_policy(keys), manifest, [statement])
    assert not decision.allowed
    assert f"is not about {manifest.digest}" in _failed(decision)
    assert "0 verified statement(s)" in _failed(decision)


def test_builder_not_allowed(keys, manifest):
    policy = _policy(keys, builders=["https://ci.example.com/*"])
    good = _signed(keys, ["alice"], manifest.digest)
    assert _decide(policy, manifest, [good]).allowed
    evil = _signed(keys, ["alice"], manifest.digest, predicate=_provenance(builder="https://evil/"))
    decision = _decide(policy, manifest, [evil])
    assert not decision.allowed
    assert "builder 'https://evil/' is not allowed" in _failed(decision)


def test_source_not_allowed(keys, manifest):
    policy = _policy(keys, sources=["hf://example-org/*"])
    assert _decide(policy, manifest, [_signed(keys, ["alice"], manifest.digest)]).allowed
    forked = _signed(
        keys, ["alice"], manifest.digest, predicate=_provenance(source="hf://attacker/tiny")
    )
    decision = _decide(policy, manifest, [forked])
    assert not decision.allowed
    assert "source 'hf://attacker/tiny' is not allowed" in _failed(decision)


def test_restricted_builder_without_provenance_denies(keys, manifest):
    policy = _policy(keys, builders=["*"], required_predicate_types=[])
    other = _signed(keys, ["alice"], manifest.digest, PredicateType.EVALUATION, {"x": 1})
    decision = _decide(policy, manifest, [other])
    assert not decision.allowed
    assert "no provenance to show an allowed builder" in _failed(decision)


def test_scan_findings_deny(keys, manifest):
    finding = Finding("model.bin", "format.pickle", "pickle opcodes can run code")
    statement = _signed(keys, ["alice"], manifest.digest)
    decision = _decide(_policy(keys), manifest, [statement], findings=[finding])
    assert not decision.allowed
    assert "scan: model.bin: format.pickle: pickle opcodes can run code" in decision.reasons


def test_size_limits_deny(keys, manifest):
    policy = _policy(keys, limits={"max_file_bytes": 8})
    decision = _decide(policy, manifest, [_signed(keys, ["alice"], manifest.digest)])
    assert not decision.allowed
    assert "config.json: 9 bytes > max_file_bytes 8" in _failed(decision)
    policy = _policy(keys, limits={"max_bundle_bytes": 10})
    assert not _decide(policy, manifest, [_signed(keys, ["alice"], manifest.digest)]).allowed


def test_rejected_attestation_denies_even_with_threshold_met(keys, manifest):
    statement = _signed(keys, ["alice"], manifest.digest)
    decision = _decide(_policy(keys), manifest, [statement], rejected=["x.json: bad signature"])
    assert not decision.allowed
    assert "attestation: rejected: x.json: bad signature" in decision.reasons
    recorded = _policy(keys, rejected_attestations="record")
    decision = _decide(recorded, manifest, [statement], rejected=["x.json: bad signature"])
    assert decision.allowed
    assert any("(recorded)" in c.message for c in decision.checks)


def test_no_statements_denies(keys, manifest):
    decision = _decide(_policy(keys), manifest, [])
    assert not decision.allowed


def test_registered_signers_count_only_when_policy_trusts_them(keys, manifest):
    statement = _signed(keys, ["mallory"], manifest.digest)
    registered = TrustSet(keys=(trusted_key("mallory", keys["mallory"].public_key()),))
    delegating = Policy.model_validate({"version": 1, "trust_registered_signers": True})
    decision = evaluate(
        delegating,
        manifest=manifest,
        statements=[statement],
        rejected=[],
        findings=[],
        extra_trust=registered,
    )
    assert decision.allowed, _failed(decision)
    closed = _policy(keys)
    decision = evaluate(
        closed,
        manifest=manifest,
        statements=[statement],
        rejected=[],
        findings=[],
        extra_trust=registered,
    )
    assert not decision.allowed


def test_no_trusted_signers_at_all_denies(keys, manifest):
    statement = _signed(keys, ["alice"], manifest.digest)
    delegating = Policy.model_validate({"version": 1, "trust_registered_signers": True})
    decision = _decide(delegating, manifest, [statement])
    assert not decision.allowed
    assert "trust: no trusted signers: nobody can vouch for a bundle" in decision.reasons
