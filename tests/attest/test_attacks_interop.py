"""One test per attack on the Sigstore and OpenSSF Model Signing verification paths.

The shared third-party fixtures (../shared/fixtures, read-only), real keys and real signed
bytes; only public APIs. Each test asserts the attack is refused with the right error type
and a message naming the thing at fault. DSSE/statement/policy attacks are in
test_attacks.py, bundle-format and scanner attacks in test_attacks_bundle.py.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from modelward.attest.dsse import PAYLOAD_TYPE, pae
from modelward.attest.errors import VerificationError
from modelward.attest.keys import trusted_key
from modelward.attest.manifest import Manifest, build_bundle
from modelward.attest.oms import OmsFileMismatch, verify_oms
from modelward.attest.policy import Policy, evaluate, load_policy, policy_trust_set
from modelward.attest.sigstore_verify import verify_sigstore_bundle
from modelward.attest.trust import TrustedIdentity, TrustSet, VerifiedStatement
from modelward.attest.verifier import DirectoryReader, verify_bundle_result
from modelward.attest.verify import verify_attestation

OMS_V1 = "https://model_signing/signature/v1.0"
BEACON = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
GITHUB = "https://token.actions.githubusercontent.com"


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


# --- Sigstore ------------------------------------------------------------------------------


def _happy(fixtures: Path) -> tuple[bytes, Path]:
    return (
        (
            fixtures / "sigstore" / "happy-path-intoto-in-dsse-v3" / "bundle.sigstore.json"
        ).read_bytes(),
        fixtures / "sigstore" / "trusted-roots" / "production.json",
    )


@pytest.mark.parametrize(
    "identity",
    [BEACON[:-5], BEACON + "x", BEACON.upper(), ".*", "https://github.com/sigstore-conformance/*"],
)
def test_sigstore_identity_match_is_exact(shared_fixtures: Path, identity: str) -> None:
    data, root = _happy(shared_fixtures)
    trust = TrustSet(identities=(TrustedIdentity("who", identity, GITHUB, root),))
    with pytest.raises(VerificationError, match="names no trusted identity"):
        verify_sigstore_bundle(data, trust)


def test_sigstore_empty_issuer_does_not_skip_the_issuer_check(shared_fixtures: Path) -> None:
    """sigstore's policy.Identity(issuer="") silently drops the issuer check."""
    data, root = _happy(shared_fixtures)
    trust = TrustSet(identities=(TrustedIdentity("who", BEACON, "", root),))
    with pytest.raises(VerificationError, match="issuer"):
        verify_sigstore_bundle(data, trust)
    for ident, issuer, field in ((BEACON, " ", "issuer"), ("", GITHUB, "identity")):
        trust = TrustSet(identities=(TrustedIdentity("who", ident, issuer, root),))
        with pytest.raises(VerificationError, match=f"who .*identity's {field} is empty"):
            verify_sigstore_bundle(data, trust)


def test_sigstore_threshold_inflation_same_identity_two_names(shared_fixtures: Path) -> None:
    data, root = _happy(shared_fixtures)
    trust = TrustSet(
        identities=(
            TrustedIdentity("ci", BEACON, GITHUB, root),
            TrustedIdentity("ci-again", BEACON, GITHUB, root),
        )
    )
    stmt = verify_sigstore_bundle(data, trust)
    assert [s.name for s in stmt.signers] == ["ci"]
    assert any("ci-again: same identity and issuer as ci" in n for n in stmt.notes)
    assert len({s.name for s in stmt.signers}) == 1  # a threshold of 2 is not met


def test_sigstore_trust_root_is_never_fetched(
    shared_fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("network disabled")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    data, root = _happy(shared_fixtures)
    for trust_root in (root, None):
        trust = TrustSet(identities=(TrustedIdentity("ci", BEACON, GITHUB, trust_root),))
        assert verify_sigstore_bundle(data, trust).signers[0].name == "ci"
    assert attempts == []


# --- OpenSSF Model Signing -------------------------------------------------------------------


def _oms_copy(fixtures: Path, kind: str, tmp_path: Path, *, keep_ignored: bool = False) -> Path:
    dst = tmp_path / kind
    shutil.copytree(fixtures / "oms" / kind, dst)
    for path in [dst, *dst.iterdir()]:
        path.chmod((path.stat().st_mode | stat.S_IWUSR) & ~0o111 | (0o700 if path.is_dir() else 0))
    if not keep_ignored:
        (dst / "ignore-me").unlink()
    return dst


def _oms_threshold_attempt(
    fixtures: Path, tmp_path: Path, kind: str, signers: dict[str, Any]
) -> list[str]:
    root = _oms_copy(fixtures, kind, tmp_path)
    manifest = build_bundle(root).manifest
    policy = load_policy(
        json.dumps(
            {"version": 1, "signers": signers, "threshold": 2, "required_predicate_types": [OMS_V1]}
        ).encode(),
        "oms.yaml",
    )
    stmt = verify_attestation(
        (root / "model.sig").read_bytes(),
        policy_trust_set(policy),
        bundle_digest=manifest.digest,
        root=root,
    )
    return _decide(policy, manifest, [stmt])


def test_oms_threshold_inflation_same_key_two_names(shared_fixtures: Path, tmp_path: Path) -> None:
    pem = (shared_fixtures / "oms" / "keys" / "signing-key-pub.pem").read_text()
    reasons = _oms_threshold_attempt(
        shared_fixtures,
        tmp_path,
        "v1.1.0-elliptic-key",
        {"keys": [{"name": "alice", "pem": pem}, {"name": "bob", "pem": pem}]},
    )
    assert any(r.startswith(f"threshold {OMS_V1}: 1 of 2") for r in reasons), reasons


def test_oms_threshold_inflation_same_ca_two_names(shared_fixtures: Path, tmp_path: Path) -> None:
    keys = shared_fixtures / "oms" / "keys"
    ca = {
        "roots": [(keys / "ca-cert.pem").read_text()],
        "intermediates": [(keys / "int-ca-cert.pem").read_text()],
    }
    reasons = _oms_threshold_attempt(
        shared_fixtures,
        tmp_path,
        "v1.1.0-certificate",
        {"cas": [{"name": "ca-one", **ca}, {"name": "ca-two", **ca}]},
    )
    assert any(r.startswith(f"threshold {OMS_V1}: 1 of 2") for r in reasons), reasons


def _ec_trust(fixtures: Path) -> TrustSet:
    pem = (fixtures / "oms" / "keys" / "signing-key-pub.pem").read_bytes()
    key = serialization.load_pem_public_key(pem)
    assert isinstance(key, ec.EllipticCurvePublicKey)
    return policy_trust_set(
        load_policy(
            json.dumps(
                {"version": 1, "signers": {"keys": [{"name": "oms", "pem": pem.decode()}]}}
            ).encode()
        )
    )


def test_oms_file_added_outside_the_signature(shared_fixtures: Path, tmp_path: Path) -> None:
    root = _oms_copy(shared_fixtures, "v1.1.0-elliptic-key", tmp_path, keep_ignored=True)
    (root / "chat_template.jinja").write_text("{{ 'pwned' }}")
    (root / "sub").mkdir()
    (root / "sub" / "model.sig").write_text("not the root signature")
    with pytest.raises(OmsFileMismatch) as info:
        verify_oms(
            (root / "model.sig").read_bytes(), root, _ec_trust(shared_fixtures), ["ignore-me"]
        )
    assert info.value.check.extra == ("chat_template.jinja", "sub/model.sig")
    assert "chat_template.jinja" in str(info.value)


def test_oms_ignore_paths_cannot_escape_or_excuse_signed_files(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    root = _oms_copy(shared_fixtures, "v1.1.0-elliptic-key", tmp_path)
    data = (root / "model.sig").read_bytes()
    for bad in ("../signme-1", "/signme-1", ".", "a/../../b"):
        with pytest.raises(ValueError, match="ignore path"):
            verify_oms(data, root, _ec_trust(shared_fixtures), [bad])
    # ignoring a signed file leaves it out: it is missing, as model_signing says too
    (root / "signme-1").write_bytes(b"tampered")
    with pytest.raises(OmsFileMismatch, match=r"missing .*signme-1"):
        verify_oms(data, root, _ec_trust(shared_fixtures), ["signme-1"])


def test_oms_symlink_to_signed_content(shared_fixtures: Path, tmp_path: Path) -> None:
    root = _oms_copy(shared_fixtures, "v1.1.0-elliptic-key", tmp_path)
    (tmp_path / "elsewhere").write_bytes((root / "signme-2").read_bytes())
    (root / "signme-2").unlink()
    (root / "signme-2").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(VerificationError, match=r"signme-2: tree\.symlink"):
        verify_oms((root / "model.sig").read_bytes(), root, _ec_trust(shared_fixtures))


def _own_oms(key: ec.EllipticCurvePrivateKey, resources: list[dict[str, str]]) -> bytes:
    root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest()
    payload = json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "m", "digest": {"sha256": root}}],
            "predicateType": OMS_V1,
            "predicate": {
                "serialization": {
                    "method": "files",
                    "hash_type": "sha256",
                    "allow_symlinks": False,
                    "ignore_paths": [],
                },
                "resources": resources,
            },
        }
    ).encode()
    sig = key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
    return json.dumps(
        {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"publicKey": {"hint": ""}, "tlogEntries": []},
            "dsseEnvelope": {
                "payload": base64.b64encode(payload).decode(),
                "payloadType": PAYLOAD_TYPE,
                "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}],
            },
        }
    ).encode()


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        (["../outside"], "unsafe resource path '../outside'"),
        (["/etc/passwd"], "unsafe resource path '/etc/passwd'"),
        (["a\\b"], "unsafe resource path"),
        (["w", "w"], "lists 'w' twice"),
    ],
)
def test_oms_resource_paths_escaping_or_repeated(
    tmp_path: Path, names: list[str], reason: str
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "w").write_bytes(b"w")
    digest = "a" * 64
    data = _own_oms(key, [{"name": n, "algorithm": "sha256", "digest": digest} for n in names])
    trust = TrustSet(keys=(trusted_key("k", key.public_key()),))
    with pytest.raises(VerificationError, match=reason.replace("\\", "\\\\")):
        verify_oms(data, tmp_path, trust)


def test_oms_signature_does_not_verify_with_an_ed25519_trust_entry(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "w").write_bytes(b"w")
    data = _own_oms(
        key, [{"name": "w", "algorithm": "sha256", "digest": hashlib.sha256(b"w").hexdigest()}]
    )
    other = ed25519.Ed25519PrivateKey.generate()
    with pytest.raises(VerificationError, match="did not verify for any trusted signer"):
        verify_oms(data, tmp_path, TrustSet(keys=(trusted_key("ed", other.public_key()),)))


def test_oms_ignore_paths_do_not_bind_unsigned_bundle_files(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    """The verifier's ignore_paths leave `ignore-me` out of the OMS check, but this bundle
    was built with it (its digest covers it): the verdict must not trust a bundle holding a
    file no signature covers."""
    root = _oms_copy(shared_fixtures, "v1.1.0-elliptic-key", tmp_path, keep_ignored=True)
    (root / "ignore-me").write_text("{{ 'an unsigned chat template' }}")
    manifest = build_bundle(root).manifest
    assert "ignore-me" in {layer.path for layer in manifest.layers}
    policy = load_policy(
        json.dumps(
            {
                "version": 1,
                "signers": {
                    "keys": [
                        {
                            "name": "oms",
                            "pem": (
                                shared_fixtures / "oms" / "keys" / "signing-key-pub.pem"
                            ).read_text(),
                        }
                    ]
                },
                "required_predicate_types": [OMS_V1],
            }
        ).encode(),
        "oms.yaml",
    )
    verdict = verify_bundle_result(
        manifest.raw,
        [(root / "model.sig").read_bytes()],
        policy=policy,
        trust=policy_trust_set(policy),
        reader=DirectoryReader(root),
        oms_ignore_paths=["ignore-me"],
    )
    assert not verdict.allowed
    assert any("ignore-me" in r for r in verdict.decision.reasons), verdict.decision.reasons
