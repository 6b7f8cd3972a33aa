"""attest.dsse: PAE, sign → verify round trips, one test per attack, thresholds."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from modelward.attest import dsse, keys
from modelward.attest.errors import SubjectMismatch, UntrustedSigner, VerificationError
from modelward.attest.statement import PredicateType, make_statement, require_subject
from modelward.attest.trust import TrustedKey, TrustSet

DIGEST = "sha256:" + "ab" * 32
PAYLOAD = make_statement("model", DIGEST, PredicateType.PROVENANCE, {"builder": "test"})


def _trust(**named: keys.SigningKey) -> TrustSet:
    return TrustSet(keys=tuple(keys.trusted_key(n, k.public_key()) for n, k in named.items()))


def _doc(envelope: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(envelope)
    return doc


def _enc(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def _flip(b64: str, index: int = 0) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[index] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.fixture(scope="module")
def alice() -> keys.SigningKey:
    return keys.generate_private_key("ed25519")


@pytest.fixture(scope="module")
def bob() -> keys.SigningKey:
    return keys.generate_private_key("ecdsa-p256")


@pytest.fixture(scope="module")
def carol() -> keys.SigningKey:
    return keys.generate_private_key("ed25519")


# --- PAE ---------------------------------------------------------------------------------


def test_pae_matches_the_dsse_spec_example() -> None:
    # github.com/secure-systems-lab/dsse protocol.md, "Test vectors"
    assert (
        dsse.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_lengths_are_bytes_not_characters() -> None:
    assert dsse.pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


# --- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256"])
def test_round_trip(kind: keys.KeyKind) -> None:
    key = keys.generate_private_key(kind)
    envelope = dsse.sign_envelope(PAYLOAD, [key])
    doc = _doc(envelope)
    assert doc["payloadType"] == dsse.PAYLOAD_TYPE
    assert base64.b64decode(doc["payload"]) == PAYLOAD
    assert doc["signatures"][0]["keyid"] == keys.keyid(key.public_key())

    stmt = dsse.verify_envelope(envelope, _trust(signer=key))
    assert stmt.kind == "dsse"
    assert stmt.payload == PAYLOAD
    assert stmt.predicate_type == PredicateType.PROVENANCE
    assert [(s.name, s.kind, s.detail) for s in stmt.signers] == [
        ("signer", "key", keys.keyid(key.public_key()))
    ]
    require_subject(stmt, DIGEST)


def test_round_trip_with_passphrase_encrypted_key(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    keys.save_private_key(keys.generate_private_key("ecdsa-p256"), path, passphrase=b"s3cret")
    key = keys.load_private_key(path, b"s3cret")
    public = keys.load_public_key((tmp_path / "k.pem.pub").read_bytes())
    trust = TrustSet(keys=(keys.trusted_key("ci", public),))
    stmt = dsse.verify_envelope(dsse.sign_envelope(PAYLOAD, [key]), trust)
    assert [s.name for s in stmt.signers] == ["ci"]


def test_verified_payload_is_the_exact_bytes_received(alice: keys.SigningKey) -> None:
    payload = PAYLOAD.replace(b"{", b"{ ", 1)  # not canonical, still valid JSON
    stmt = dsse.verify_envelope(dsse.sign_envelope(payload, [alice]), _trust(alice=alice))
    assert stmt.payload == payload


def test_interop_with_sigstore_python_dsse() -> None:
    """Another implementation's envelope verifies here, and ours verifies there."""
    from sigstore import dsse as sigstore_dsse

    key = ec.generate_private_key(ec.SECP256R1())
    theirs = sigstore_dsse._sign(key, sigstore_dsse.Statement(PAYLOAD)).to_json().encode()
    stmt = dsse.verify_envelope(theirs, _trust(sigstore=key))
    assert stmt.payload == PAYLOAD

    ours = dsse.sign_envelope(PAYLOAD, [key])
    assert sigstore_dsse._verify(key.public_key(), sigstore_dsse.Envelope._from_json(ours))


# --- one test per attack -----------------------------------------------------------------


def test_tampered_payload_fails(alice: keys.SigningKey) -> None:
    doc = _doc(dsse.sign_envelope(PAYLOAD, [alice]))
    doc["payload"] = _flip(doc["payload"], len(PAYLOAD) // 2)
    with pytest.raises(VerificationError, match="claims trusted key 'alice'; it fails"):
        dsse.verify_envelope(_enc(doc), _trust(alice=alice))


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256"])
def test_tampered_signature_fails(kind: keys.KeyKind) -> None:
    key = keys.generate_private_key(kind)
    doc = _doc(dsse.sign_envelope(PAYLOAD, [key]))
    doc["signatures"][0]["sig"] = _flip(doc["signatures"][0]["sig"], 10)
    with pytest.raises(VerificationError, match="bad signature by a trusted key"):
        dsse.verify_envelope(_enc(doc), _trust(k=key))


def test_tampered_payload_type_fails(alice: keys.SigningKey) -> None:
    doc = _doc(dsse.sign_envelope(PAYLOAD, [alice]))
    doc["payloadType"] = "application/vnd.in-toto+jsoN"
    with pytest.raises(VerificationError, match="claims trusted key 'alice'; it fails"):
        dsse.verify_envelope(_enc(doc), _trust(alice=alice))


def test_payload_type_confusion_is_rejected(alice: keys.SigningKey) -> None:
    """A validly signed envelope of another type is not an in-toto statement."""
    envelope = dsse.sign_envelope(PAYLOAD, [alice], payload_type="application/json")
    with pytest.raises(VerificationError, match="payloadType is 'application/json'"):
        dsse.verify_envelope(envelope, _trust(alice=alice))


def test_untrusted_signer_fails(alice: keys.SigningKey, bob: keys.SigningKey) -> None:
    envelope = dsse.sign_envelope(PAYLOAD, [alice])
    with pytest.raises(UntrustedSigner, match=r"signature 0 .*by a key this verifier does not"):
        dsse.verify_envelope(envelope, _trust(bob=bob))


def test_keyid_hint_is_not_trusted(alice: keys.SigningKey, bob: keys.SigningKey) -> None:
    """An attacker's signature claiming a trusted key's id still fails; a wrong hint on a
    genuine signature still verifies (the hint only orders the tries)."""
    mallory = ed25519.Ed25519PrivateKey.generate()
    doc = _doc(dsse.sign_envelope(PAYLOAD, [mallory]))
    doc["signatures"][0]["keyid"] = keys.keyid(alice.public_key())
    with pytest.raises(VerificationError):
        dsse.verify_envelope(_enc(doc), _trust(alice=alice))

    doc = _doc(dsse.sign_envelope(PAYLOAD, [alice]))
    doc["signatures"][0]["keyid"] = keys.keyid(bob.public_key())
    stmt = dsse.verify_envelope(_enc(doc), _trust(bob=bob, alice=alice))
    assert [s.name for s in stmt.signers] == ["alice"]


def test_empty_trust_set_trusts_nobody(alice: keys.SigningKey) -> None:
    with pytest.raises(VerificationError, match="no trusted keys"):
        dsse.verify_envelope(dsse.sign_envelope(PAYLOAD, [alice]), TrustSet())


def test_signed_statement_about_another_bundle_fails(alice: keys.SigningKey) -> None:
    other = make_statement("model", "sha256:" + "cd" * 32, PredicateType.PROVENANCE, {})
    stmt = dsse.verify_envelope(dsse.sign_envelope(other, [alice]), _trust(alice=alice))
    with pytest.raises(SubjectMismatch, match="is not about bundle"):
        require_subject(stmt, DIGEST)


def test_signed_payload_that_is_no_statement_fails(alice: keys.SigningKey) -> None:
    envelope = dsse.sign_envelope(b'{"_type": "something else"}', [alice])
    with pytest.raises(VerificationError, match="_type must be"):
        dsse.verify_envelope(envelope, _trust(alice=alice))


# --- several signatures and thresholds ---------------------------------------------------


def test_threshold_two_of_three_met(
    alice: keys.SigningKey, bob: keys.SigningKey, carol: keys.SigningKey
) -> None:
    envelope = dsse.add_signature(dsse.sign_envelope(PAYLOAD, [alice]), bob)
    assert len(_doc(envelope)["signatures"]) == 2
    stmt = dsse.verify_envelope(envelope, _trust(alice=alice, bob=bob, carol=carol))
    assert sorted(s.name for s in stmt.signers) == ["alice", "bob"]
    assert len({s.name for s in stmt.signers}) == 2


def test_threshold_two_of_three_unmet(
    alice: keys.SigningKey, bob: keys.SigningKey, carol: keys.SigningKey
) -> None:
    mallory = ed25519.Ed25519PrivateKey.generate()
    envelope = dsse.sign_envelope(PAYLOAD, [alice, mallory])
    stmt = dsse.verify_envelope(envelope, _trust(alice=alice, bob=bob, carol=carol))
    assert [s.name for s in stmt.signers] == ["alice"]
    assert any("signature 1" in note for note in stmt.notes)
    assert len({s.name for s in stmt.signers}) == 1  # a threshold of 2 is not met


def test_one_key_signing_twice_counts_once(alice: keys.SigningKey, bob: keys.SigningKey) -> None:
    # ECDSA signatures are randomized, so the attacker's second signature is distinct bytes.
    doc = _doc(dsse.sign_envelope(PAYLOAD, [bob]))
    second = _doc(dsse.sign_envelope(PAYLOAD, [bob]))["signatures"][0]
    assert second["sig"] != doc["signatures"][0]["sig"]
    doc["signatures"].append(second)
    doc["signatures"].append(dict(doc["signatures"][0]))  # and an exact replay
    stmt = dsse.verify_envelope(_enc(doc), _trust(alice=alice, bob=bob))
    assert [s.name for s in stmt.signers] == ["bob"]
    assert len({s.name for s in stmt.signers}) == 1  # a threshold of 2 is not met


def test_one_key_trusted_under_two_names_counts_once(bob: keys.SigningKey) -> None:
    public = bob.public_key()
    trust = TrustSet(keys=(keys.trusted_key("bob", public), keys.trusted_key("bob-again", public)))
    stmt = dsse.verify_envelope(dsse.sign_envelope(PAYLOAD, [bob]), trust)
    assert len(stmt.signers) == 1
    assert len({s.name for s in stmt.signers}) == 1  # a threshold of 2 is not met


def test_signing_misuse(alice: keys.SigningKey) -> None:
    with pytest.raises(ValueError, match="at least one key"):
        dsse.sign_envelope(PAYLOAD, [])
    with pytest.raises(ValueError, match="already signed"):
        dsse.sign_envelope(PAYLOAD, [alice, alice])
    with pytest.raises(ValueError, match="already signed"):
        dsse.add_signature(dsse.sign_envelope(PAYLOAD, [alice]), alice)


def test_refused_trusted_key_verifies_nothing(alice: keys.SigningKey) -> None:
    p384 = ec.generate_private_key(ec.SECP384R1())
    trust = TrustSet(keys=(TrustedKey("old", "x", p384.public_key()),))
    sig = p384.sign(dsse.pae(dsse.PAYLOAD_TYPE, PAYLOAD), ec.ECDSA(hashes.SHA256()))
    doc = _valid(alice)
    doc["signatures"] = [{"keyid": "", "sig": base64.b64encode(sig).decode()}]
    with pytest.raises(VerificationError, match="secp384r1"):
        dsse.verify_envelope(_enc(doc), trust)


# --- malformed envelopes -----------------------------------------------------------------


def _valid(alice: keys.SigningKey) -> dict[str, Any]:
    return _doc(dsse.sign_envelope(PAYLOAD, [alice]))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("payload"), "missing field.*payload"),
        (lambda d: d.pop("payloadType"), "missing field.*payloadType"),
        (lambda d: d.pop("signatures"), "missing field.*signatures"),
        (lambda d: d.update(extra=1), "unknown field.*extra"),
        (lambda d: d.update(payload="not base64!"), "payload is not valid base64"),
        (lambda d: d.update(payload=d["payload"][:-1]), "payload is not valid base64"),
        (lambda d: d.update(payload=5), "payload must be a base64 string"),
        (lambda d: d.update(payloadType=None), "payloadType must be a string"),
        (lambda d: d.update(signatures=[]), "non-empty list"),
        (lambda d: d.update(signatures={}), "non-empty list"),
        (lambda d: d["signatures"].append("x"), r"signatures\[1\] is not an object"),
        (lambda d: d["signatures"][0].pop("sig"), r"signatures\[0\] is missing field: sig"),
        (lambda d: d["signatures"][0].update(sig="%%%"), r"signatures\[0\]\.sig is not valid"),
        (lambda d: d["signatures"][0].update(sig=""), r"signatures\[0\]\.sig is 0 bytes"),
        (lambda d: d["signatures"][0].update(keyid=3), r"keyid must be a string"),
        (lambda d: d["signatures"][0].update(cert="x"), r"unknown field.*cert"),
        (lambda d: d.update(signatures=d["signatures"] * 33), "over the limit of 32"),
    ],
)
def test_malformed_envelope(alice: keys.SigningKey, mutate: Any, message: str) -> None:
    doc = _valid(alice)
    mutate(doc)
    with pytest.raises(VerificationError, match=message):
        dsse.verify_envelope(_enc(doc), _trust(alice=alice))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b"\xff", "not UTF-8"),
        (b'{"payload": "", "payload": ""}', "duplicate key"),
    ],
)
def test_envelope_that_is_no_json_object(alice: keys.SigningKey, raw: bytes, message: str) -> None:
    with pytest.raises(VerificationError, match=message):
        dsse.verify_envelope(raw, _trust(alice=alice))


def test_oversized_envelope_is_refused_before_parsing(alice: keys.SigningKey) -> None:
    envelope = dsse.sign_envelope(PAYLOAD, [alice])
    limits = dsse.EnvelopeLimits(max_bytes=len(envelope) - 1)
    with pytest.raises(VerificationError, match="over the limit"):
        dsse.verify_envelope(envelope, _trust(alice=alice), limits)
    huge = b'{"payload": "' + b"A" * (16 * 2**20) + b'"}'
    with pytest.raises(VerificationError, match="over the limit of 16777216"):
        dsse.verify_envelope(huge, _trust(alice=alice))


def test_add_signature_refuses_malformed_envelope(alice: keys.SigningKey) -> None:
    with pytest.raises(VerificationError, match="missing field"):
        dsse.add_signature(b'{"payload": ""}', alice)


def test_public_surface() -> None:
    assert sorted(dsse.__all__) == [
        "EnvelopeLimits",
        "PAYLOAD_TYPE",
        "add_signature",
        "pae",
        "sign_envelope",
        "verify_envelope",
    ]
