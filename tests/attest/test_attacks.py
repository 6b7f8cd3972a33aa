"""One test per attack on the signature trust path (TUF attack list, SLSA threats).

Real keys, real signed bytes, the shared third-party fixtures; only public APIs. Each test
asserts the attack is refused with the right error type and a message naming the thing at
fault. Sigstore and OMS attacks are in test_attacks_interop.py, bundle-format and scanner
attacks in test_attacks_bundle.py.
"""

from __future__ import annotations

import base64
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from modelward.attest.dsse import (
    PAYLOAD_TYPE,
    pae,
    sign_envelope,
    verify_envelope,
)
from modelward.attest.errors import (
    PolicyError,
    SubjectMismatch,
    UnknownSignatureFormat,
    UntrustedSigner,
    VerificationError,
)
from modelward.attest.keys import generate_private_key, keyid, public_key_pem, trusted_key
from modelward.attest.manifest import Manifest, build_bundle
from modelward.attest.policy import Policy, evaluate, load_policy, policy_trust_set
from modelward.attest.statement import PredicateType, make_statement
from modelward.attest.trust import TrustedIdentity, TrustSet, VerifiedStatement
from modelward.attest.verify import detect_kind, verify_attestation

OTHER = "sha256:" + "ab" * 32


# --- helpers ---------------------------------------------------------------------------


@pytest.fixture
def bundle(tmp_path: Path) -> Manifest:
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "config.json").write_bytes(b'{"model_type": "llama"}')
    (root / "README.md").write_bytes(b"# tiny\n")
    return build_bundle(root).manifest


def _pem(key: Any) -> str:
    return public_key_pem(key.public_key()).decode()


def _policy(keys: dict[str, Any], **extra: Any) -> Policy:
    doc: dict[str, Any] = {
        "version": 1,
        "signers": {"keys": [{"name": n, "pem": _pem(k)} for n, k in keys.items()]},
        **extra,
    }
    return load_policy(json.dumps(doc).encode(), "attack.yaml")


def _envelope(payload: bytes, sigs: list[tuple[str, bytes]], ptype: str = PAYLOAD_TYPE) -> bytes:
    """A DSSE envelope built by hand, exactly as an attacker would."""
    return json.dumps(
        {
            "payloadType": ptype,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": k, "sig": base64.b64encode(s).decode()} for k, s in sigs],
        }
    ).encode()


def _ecdsa_sig(key: ec.EllipticCurvePrivateKey, payload: bytes) -> bytes:
    return key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))


def _decide(policy: Policy, manifest: Manifest, stmts: list[VerifiedStatement]) -> list[str]:
    # The fix for signer-name confusion (test_signer_name_confusion_...) gives evaluate a
    # `trust` keyword: the policy's own loaded signers, matched by key id, not name alone.
    fixed: dict[str, Any] = {}
    if "trust" in inspect.signature(evaluate).parameters:
        fixed["trust"] = policy_trust_set(policy)
    decision = evaluate(
        policy, manifest=manifest, statements=stmts, rejected=[], findings=[], **fixed
    )
    assert not decision.allowed, decision.checks
    return list(decision.reasons)


# --- DSSE envelopes --------------------------------------------------------------------


def test_signature_is_over_received_bytes_not_a_reserialization(bundle: Manifest) -> None:
    key = generate_private_key()
    statement = json.loads(make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}))
    odd = json.dumps(statement, indent=3, sort_keys=False).encode()  # not canonical JSON
    trust = TrustSet(keys=(trusted_key("k", key.public_key()),))
    stmt = verify_envelope(sign_envelope(odd, [key]), trust)
    assert stmt.payload == odd
    # the same statement re-serialized under the old signature is not what was signed
    forged = _envelope(json.dumps(statement).encode(), [("", key.sign(pae(PAYLOAD_TYPE, odd)))])
    # no keyid hint: it claims no trusted key, so it is an unknown signer (it counts for nothing)
    with pytest.raises(UntrustedSigner, match="no signature by a trusted key"):
        verify_envelope(forged, trust)


def test_keyid_hint_is_not_trusted(bundle: Manifest) -> None:
    trusted, mallory = generate_private_key(), generate_private_key()
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {})
    forged = _envelope(
        payload, [(keyid(trusted.public_key()), mallory.sign(pae(PAYLOAD_TYPE, payload)))]
    )
    with pytest.raises(VerificationError, match=r"signature 0 .*claims trusted key 'k'; it fails"):
        verify_envelope(forged, TrustSet(keys=(trusted_key("k", trusted.public_key()),)))


def test_threshold_inflation_same_key_two_names(bundle: Manifest) -> None:
    key = generate_private_key("ecdsa-p256")
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {})
    trust = TrustSet(
        keys=(trusted_key("alice", key.public_key()), trusted_key("bob", key.public_key()))
    )
    data = _envelope(payload, [("", _ecdsa_sig(key, payload)), ("", _ecdsa_sig(key, payload))])
    stmt = verify_envelope(data, trust)
    assert [s.name for s in stmt.signers] == ["alice"]
    assert len({s.name for s in stmt.signers}) == 1  # a threshold of 2 is not met


def test_threshold_inflation_duplicate_signatures(bundle: Manifest) -> None:
    key = generate_private_key()
    other = generate_private_key()
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {})
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    stmt = verify_envelope(
        _envelope(payload, [("a", sig), ("b", sig), ("", sig)]),
        TrustSet(keys=(trusted_key("k", key.public_key()), trusted_key("o", other.public_key()))),
    )
    assert len(stmt.signers) == 1
    assert any("already counted" in note for note in stmt.notes)
    assert len({s.name for s in stmt.signers}) == 1  # a threshold of 2 is not met


def test_threshold_inflation_same_signer_across_two_envelopes(bundle: Manifest) -> None:
    k1, k2 = generate_private_key(), generate_private_key()
    policy = _policy({"k1": k1, "k2": k2}, threshold=2)
    trust = policy_trust_set(policy)
    stmts = [
        verify_attestation(
            sign_envelope(
                make_statement("b", bundle.digest, PredicateType.PROVENANCE, {"n": n}), [k1]
            ),
            trust,
            bundle_digest=bundle.digest,
        )
        for n in range(2)
    ]
    reasons = _decide(policy, bundle, stmts)
    assert any("threshold" in r and "1 of 2" in r for r in reasons), reasons


def test_threshold_zero_is_refused(bundle: Manifest) -> None:
    key = generate_private_key()
    stmt = verify_envelope(
        sign_envelope(make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}), [key]),
        TrustSet(keys=(trusted_key("k", key.public_key()),)),
    )
    assert len(stmt.signers) == 1
    with pytest.raises(PolicyError, match="threshold"):
        _policy({"k": key}, threshold=0)


def test_empty_trust_set_trusts_nobody(bundle: Manifest) -> None:
    key = generate_private_key()
    data = sign_envelope(make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}), [key])
    with pytest.raises(VerificationError, match="no trusted signers"):
        verify_attestation(data, TrustSet(), bundle_digest=bundle.digest)
    ident = TrustSet(identities=(TrustedIdentity("i", "a@b", "https://issuer"),))
    with pytest.raises(VerificationError, match="no trusted keys"):
        verify_envelope(data, ident)
    with pytest.raises(PolicyError, match="signers: no trusted signers"):
        load_policy(b"version: 1\n", "empty.yaml")
    policy = load_policy(b"version: 1\ntrust_registered_signers: true\n", "reg.yaml")
    stmt = verify_attestation(
        data, TrustSet(keys=(trusted_key("k", key.public_key()),)), bundle_digest=bundle.digest
    )
    assert any(r.startswith("trust: no trusted signers") for r in _decide(policy, bundle, [stmt]))


def test_payload_type_confusion(bundle: Manifest) -> None:
    key = generate_private_key()
    trust = TrustSet(keys=(trusted_key("k", key.public_key()),))
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {})
    other_type = sign_envelope(payload, [key], payload_type="application/vnd.example+json")
    with pytest.raises(VerificationError, match=r"payloadType is 'application/vnd.example\+json'"):
        verify_envelope(other_type, trust)
    # a signature made under another payload type, relabelled as in-toto, verifies nothing
    relabelled = _envelope(payload, [("", key.sign(pae("application/json", payload)))])
    with pytest.raises(VerificationError, match="no signature by a trusted key"):
        verify_envelope(relabelled, trust)


def test_predicate_type_confusion(bundle: Manifest) -> None:
    key = generate_private_key()
    policy = _policy({"k": key})
    trust = policy_trust_set(policy)
    for ptype in (
        PredicateType.APPROVAL,
        PredicateType.PROVENANCE + "/",
        "https://slsa.dev/provenance/v0.2",
    ):
        data = sign_envelope(make_statement("b", bundle.digest, ptype, {}), [key])
        stmt = verify_attestation(data, trust, bundle_digest=bundle.digest)
        reasons = _decide(policy, bundle, [stmt])
        assert any(
            r.startswith(f"predicate {PredicateType.PROVENANCE}: no verified") for r in reasons
        ), reasons


def test_mix_and_match_statement_about_another_bundle(bundle: Manifest) -> None:
    key = generate_private_key()
    data = sign_envelope(make_statement("b", OTHER, PredicateType.PROVENANCE, {}), [key])
    trust = TrustSet(keys=(trusted_key("k", key.public_key()),))
    with pytest.raises(SubjectMismatch, match=OTHER.removeprefix("sha256:")) as info:
        verify_attestation(data, trust, bundle_digest=bundle.digest)
    assert info.value.expected == bundle.digest


def test_rollback_old_bundle_provenance_replayed_on_new_tree(tmp_path: Path) -> None:
    root = tmp_path / "b"
    root.mkdir()
    (root / "config.json").write_bytes(b'{"v": 1}')
    old = build_bundle(root).manifest
    key = generate_private_key()
    data = sign_envelope(make_statement("b", old.digest, PredicateType.PROVENANCE, {}), [key])
    (root / "config.json").write_bytes(b'{"v": 2}')
    new = build_bundle(root).manifest
    with pytest.raises(SubjectMismatch, match=f"not about bundle {new.digest}"):
        verify_attestation(
            data, TrustSet(keys=(trusted_key("k", key.public_key()),)), bundle_digest=new.digest
        )


def test_two_subjects_and_name_only_binding(bundle: Manifest) -> None:
    """Decision: a statement listing our bundle AND another is accepted (in-toto semantics:
    the signer vouched for both). Our digest appearing only as a subject *name*, or under
    another algorithm, binds nothing."""
    key = generate_private_key()
    trust = TrustSet(keys=(trusted_key("k", key.public_key()),))
    ours = bundle.digest.removeprefix("sha256:")

    def signed(subjects: list[dict[str, Any]]) -> bytes:
        doc = json.loads(make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}))
        doc["subject"] = subjects
        return sign_envelope(json.dumps(doc).encode(), [key])

    both = [
        {"name": "x", "digest": {"sha256": "cd" * 32}},
        {"name": "b", "digest": {"sha256": ours}},
    ]
    assert verify_attestation(signed(both), trust, bundle_digest=bundle.digest).subjects
    for subjects in (
        [{"name": bundle.digest, "digest": {"sha256": "cd" * 32}}],
        [{"name": "b", "digest": {"sha3_256": ours}}],
    ):
        with pytest.raises(SubjectMismatch, match=f"not about bundle {bundle.digest}"):
            verify_attestation(signed(subjects), trust, bundle_digest=bundle.digest)


# --- JSON on the trust boundary ----------------------------------------------------------


def _signed_raw(key: Any, payload: bytes) -> tuple[bytes, TrustSet]:
    return sign_envelope(payload, [key]), TrustSet(keys=(trusted_key("k", key.public_key()),))


def test_json_duplicate_keys_in_envelope_and_statement(bundle: Manifest) -> None:
    key = generate_private_key()
    good = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {})
    data, trust = _signed_raw(key, good)
    dup_env = data.replace(b'"payloadType"', b'"payloadType": "text/plain", "payloadType"', 1)
    with pytest.raises(VerificationError, match="envelope is not valid JSON: duplicate key"):
        verify_envelope(dup_env, trust)
    dup_stmt = good.replace(
        b'"predicateType"', b'"predicateType":"https://example/x","predicateType"', 1
    )
    with pytest.raises(VerificationError, match="statement is not valid JSON: duplicate key"):
        verify_envelope(_signed_raw(key, dup_stmt)[0], trust)


def test_json_nan_in_statement(bundle: Manifest) -> None:
    key = generate_private_key()
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}).replace(
        b'"predicate":{}', b'"predicate":{"x":NaN}'
    )
    with pytest.raises(VerificationError, match="statement is not valid JSON: non-finite"):
        verify_envelope(*_signed_raw(key, payload))


def test_json_overflowing_number_in_statement(bundle: Manifest) -> None:
    """1e400 is parsed by Python as float('inf'): a non-finite number slips past parse_constant."""
    key = generate_private_key()
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}).replace(
        b'"predicate":{}', b'"predicate":{"x":1e400}'
    )
    with pytest.raises(VerificationError, match="statement is not valid JSON"):
        verify_envelope(*_signed_raw(key, payload))


def test_json_huge_integer_in_statement(bundle: Manifest) -> None:
    key = generate_private_key()
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}).replace(
        b'"predicate":{}', b'"predicate":{"x":' + b"9" * 5000 + b"}"
    )
    with pytest.raises(VerificationError, match="statement is not valid JSON"):
        verify_envelope(*_signed_raw(key, payload))


def test_json_deep_nesting_is_an_error_not_a_crash(bundle: Manifest) -> None:
    key = generate_private_key()
    deep = b"[" * 200_000 + b"]" * 200_000
    payload = make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}).replace(
        b'"predicate":{}', b'"predicate":{"x":' + deep + b"}"
    )
    with pytest.raises(VerificationError, match="statement is not valid JSON"):
        verify_envelope(*_signed_raw(key, payload))
    with pytest.raises(UnknownSignatureFormat, match="not JSON"):
        detect_kind(b'{"a":' + deep + b"}")


def test_policy_deep_nesting_is_a_policy_error_not_a_crash() -> None:
    """yaml's composer recurses per level; RecursionError escapes load_policy."""
    with pytest.raises(PolicyError, match=r"deep\.yaml"):
        load_policy(b"version: 1\nsigners: " + b"[" * 5000 + b"]" * 5000 + b"\n", "deep.yaml")


# --- the evaluator: which signers count ----------------------------------------------------


def test_signer_name_confusion_unpinned_key_counts_as_pinned_signer(bundle: Manifest) -> None:
    """A caller merging policy signers with other keys (the registry adds registered keys)
    must never let a key the policy never pinned answer to a pinned signer's name: the
    merge itself is refused, so the impostor key cannot count as "alice"."""
    pinned, mallory = generate_private_key(), generate_private_key()
    policy = _policy({"alice": pinned})  # trust_registered_signers: false
    impostor = TrustSet(keys=(trusted_key("alice", mallory.public_key()),))
    with pytest.raises(ValueError, match="'alice' is trusted twice"):
        policy_trust_set(policy).merged(impostor)
    # Verified against the policy alone, the impostor's signature does not count at all.
    data = sign_envelope(
        make_statement("b", bundle.digest, PredicateType.PROVENANCE, {}), [mallory]
    )
    with pytest.raises(UntrustedSigner, match="no signature by a trusted key"):
        verify_attestation(data, policy_trust_set(policy), bundle_digest=bundle.digest)
