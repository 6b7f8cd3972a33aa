"""OpenSSF Model Signing: shared fixtures of all three kinds, predicate forms, attacks."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import socket
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

import modelward.attest.oms as oms
from modelward.attest.errors import KeyError_, VerificationError
from modelward.attest.keys import keyid
from modelward.attest.oms import OmsFileMismatch, sign_oms, verify_oms
from modelward.attest.trust import TrustedCA, TrustedIdentity, TrustedKey, TrustSet

IBM = "stefanb@us.ibm.com"
IBM_ISSUER = "https://sigstore.verify.ibm.com/oauth2"
KINDS = ["v1.1.0-elliptic-key", "v1.1.0-certificate", "v1.1.0-sigstore"]
PAYLOAD_TYPE = "application/vnd.in-toto+json"


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every connection and DNS lookup but loopback: OMS verification is offline."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(f"network disabled in this test: {args[1:]!r}")

    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            refuse(self, address)
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def _pem_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _key_trust(public_key: Any, name: str = "oms-key") -> TrustSet:
    return TrustSet(keys=(TrustedKey(name, keyid(public_key), public_key),))


def trust_for(fixtures: Path, kind: str) -> TrustSet:
    keys = fixtures / "oms" / "keys"
    if kind == "v1.1.0-elliptic-key":
        pem = (keys / "signing-key-pub.pem").read_bytes()
        return _key_trust(serialization.load_pem_public_key(pem))
    if kind == "v1.1.0-certificate":
        ca = TrustedCA(
            "oms-ca", (_pem_cert(keys / "ca-cert.pem"),), (_pem_cert(keys / "int-ca-cert.pem"),)
        )
        return TrustSet(cas=(ca,))
    root = fixtures / "sigstore" / "trusted-roots" / "production.json"
    return TrustSet(identities=(TrustedIdentity("ibm", IBM, IBM_ISSUER, root),))


def _copy(fixtures: Path, kind: str, tmp_path: Path) -> Path:
    dst = tmp_path / kind
    shutil.copytree(fixtures / "oms" / kind, dst)
    for path in [dst, *dst.iterdir()]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return dst


@pytest.mark.parametrize("kind", KINDS)
def test_fixture_verifies_with_ignore_me_ignored(shared_fixtures: Path, kind: str) -> None:
    model = shared_fixtures / "oms" / kind
    stmt = verify_oms(
        (model / "model.sig").read_bytes(), model, trust_for(shared_fixtures, kind), ["ignore-me"]
    )
    assert stmt.kind == "oms"
    assert stmt.predicate_type == "https://model_signing/signature/v1.0"
    assert stmt.subjects[0].name == kind
    assert len(stmt.signers) == 1
    assert "signme-1, signme-2" in stmt.notes[0]
    assert "ignore-me" in stmt.notes[1]
    envelope = json.loads((model / "model.sig").read_bytes())["dsseEnvelope"]
    assert stmt.payload == base64.b64decode(envelope["payload"])


@pytest.mark.parametrize("kind", KINDS)
def test_fixture_without_ignore_reports_ignore_me_extra(shared_fixtures: Path, kind: str) -> None:
    model = shared_fixtures / "oms" / kind
    with pytest.raises(OmsFileMismatch) as info:
        verify_oms((model / "model.sig").read_bytes(), model, trust_for(shared_fixtures, kind))
    assert info.value.check == oms.OmsFileCheck(missing=(), extra=("ignore-me",), mismatched=())
    assert "ignore-me" in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
def test_flipped_byte_in_signme_1_is_mismatched(
    shared_fixtures: Path, kind: str, tmp_path: Path
) -> None:
    model = _copy(shared_fixtures, kind, tmp_path)
    data = bytearray((model / "signme-1").read_bytes())
    data[0] ^= 0x01
    (model / "signme-1").write_bytes(bytes(data))
    with pytest.raises(OmsFileMismatch) as info:
        verify_oms(
            (model / "model.sig").read_bytes(),
            model,
            trust_for(shared_fixtures, kind),
            ["ignore-me"],
        )
    assert info.value.check.mismatched == ("signme-1",)
    assert info.value.check.missing == info.value.check.extra == ()


@pytest.mark.parametrize("kind", KINDS)
def test_deleted_file_is_missing(shared_fixtures: Path, kind: str, tmp_path: Path) -> None:
    model = _copy(shared_fixtures, kind, tmp_path)
    (model / "signme-2").unlink()
    (model / "new-file").write_bytes(b"planted")
    with pytest.raises(OmsFileMismatch) as info:
        verify_oms(
            (model / "model.sig").read_bytes(),
            model,
            trust_for(shared_fixtures, kind),
            ["ignore-me"],
        )
    assert info.value.check == oms.OmsFileCheck(("signme-2",), ("new-file",), ())


@pytest.mark.parametrize(("kind", "other"), [(k, o) for k in KINDS for o in KINDS if k != o])
def test_wrong_trust_fails(shared_fixtures: Path, kind: str, other: str) -> None:
    model = shared_fixtures / "oms" / kind
    with pytest.raises(VerificationError):
        verify_oms(
            (model / "model.sig").read_bytes(),
            model,
            trust_for(shared_fixtures, other),
            ["ignore-me"],
        )


def test_wrong_key_fails(shared_fixtures: Path) -> None:
    model = shared_fixtures / "oms" / "v1.1.0-elliptic-key"
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    with pytest.raises(VerificationError, match="stranger: the signature's key hint"):
        verify_oms(
            (model / "model.sig").read_bytes(), model, _key_trust(other, "stranger"), ["ignore-me"]
        )


def test_wrong_ca_fails(shared_fixtures: Path) -> None:
    model = shared_fixtures / "oms" / "v1.1.0-certificate"
    other_root, _ = _ca("other-root")
    for ca in (
        TrustedCA("other-ca", (other_root,)),
        TrustedCA("sigstore-fulcio", (_fulcio_root(shared_fixtures),)),
    ):
        with pytest.raises(VerificationError, match=ca.name):
            verify_oms(
                (model / "model.sig").read_bytes(), model, TrustSet(cas=(ca,)), ["ignore-me"]
            )


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _usage(*, cert_sign: bool = False, digital_signature: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature, False, False, False, False, cert_sign, False, False, False
    )


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    signing: bool = True,
    days: tuple[int, int] = (-1, 30),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "model signer")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + timedelta(days=days[0]))
        .not_valid_after(now + timedelta(days=days[1]))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(digital_signature=signing, cert_sign=not signing), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _chain_bundle(
    statement: dict[str, Any], leaf: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> bytes:
    der = base64.b64encode(leaf.public_bytes(serialization.Encoding.DER)).decode()
    material = {"x509CertificateChain": {"certificates": [{"rawBytes": der}]}, "tlogEntries": []}
    return _bundle(statement, key, verificationMaterial=material)


def test_own_certificate_chain_verifies(model: Path) -> None:
    root, root_key = _ca("test-root")
    leaf, key = _leaf(root, root_key)
    stmt = verify_oms(
        _chain_bundle(_v1(model), leaf, key),
        model,
        TrustSet(cas=(TrustedCA("test-ca", (root,)),)),
        ["notes.txt"],
    )
    assert [(s.name, s.kind, s.detail) for s in stmt.signers] == [
        ("test-ca", "x509", "CN=model signer")
    ]


@pytest.mark.parametrize(
    ("signing", "days", "reason"),
    [
        (False, (-1, 30), "may not be used for signing"),
        (True, (-30, -1), "expired|not valid|validity"),
    ],
)
def test_bad_leaf_certificates_fail(
    model: Path, signing: bool, days: tuple[int, int], reason: str
) -> None:
    root, root_key = _ca("test-root")
    leaf, key = _leaf(root, root_key, signing=signing, days=days)
    with pytest.raises(VerificationError, match=reason):
        verify_oms(
            _chain_bundle(_v1(model), leaf, key),
            model,
            TrustSet(cas=(TrustedCA("test-ca", (root,)),)),
            ["notes.txt"],
        )


def test_leaf_key_must_have_made_the_signature(model: Path) -> None:
    root, root_key = _ca("test-root")
    leaf, _ = _leaf(root, root_key)
    impostor = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(VerificationError, match=r"by leaf certificate .* does not verify"):
        verify_oms(
            _chain_bundle(_v1(model), leaf, impostor),
            model,
            TrustSet(cas=(TrustedCA("test-ca", (root,)),)),
            ["notes.txt"],
        )


def _fulcio_root(fixtures: Path) -> x509.Certificate:
    root = json.loads((fixtures / "sigstore" / "trusted-roots" / "production.json").read_bytes())
    der = base64.b64decode(
        root["certificateAuthorities"][-1]["certChain"]["certificates"][-1]["rawBytes"]
    )
    return x509.load_der_x509_certificate(der)


def test_sigstore_fixture_verifies_under_embedded_production_root(shared_fixtures: Path) -> None:
    model = shared_fixtures / "oms" / "v1.1.0-sigstore"
    trust = TrustSet(identities=(TrustedIdentity("ibm", IBM, IBM_ISSUER, None),))
    stmt = verify_oms((model / "model.sig").read_bytes(), model, trust, ["ignore-me"])
    assert stmt.signers[0].detail == f"{IBM} ({IBM_ISSUER})"


def test_wrong_identity_fails(shared_fixtures: Path) -> None:
    model = shared_fixtures / "oms" / "v1.1.0-sigstore"
    root = shared_fixtures / "sigstore" / "trusted-roots" / "production.json"
    for identity, issuer in [
        ("mallory@us.ibm.com", IBM_ISSUER),
        (IBM, "https://accounts.google.com"),
    ]:
        trust = TrustSet(identities=(TrustedIdentity("wrong", identity, issuer, root),))
        with pytest.raises(VerificationError, match="wrong"):
            verify_oms((model / "model.sig").read_bytes(), model, trust, ["ignore-me"])


def test_tampered_payload_fails(shared_fixtures: Path) -> None:
    model = shared_fixtures / "oms" / "v1.1.0-elliptic-key"
    doc = json.loads((model / "model.sig").read_bytes())
    payload = base64.b64decode(doc["dsseEnvelope"]["payload"]).replace(b"signme-2", b"signme-3")
    doc["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    with pytest.raises(VerificationError, match="does not verify"):
        verify_oms(
            json.dumps(doc).encode(), model, trust_for(shared_fixtures, KINDS[0]), ["ignore-me"]
        )


# --- our own signer, and hand-built statements of every predicate form ---------------------


@pytest.fixture
def ec_key(tmp_path: Path) -> tuple[Path, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "key.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass phrase"),
        )
    )
    return path, key


@pytest.fixture
def model(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "weights.bin").write_bytes(bytes(range(256)) * 10)
    (root / "sub" / "config.json").write_bytes(b'{"a": 1}')
    (root / "a-b").write_bytes(b"sorts after a/b as a path, before it as a string")
    (root / "notes.txt").write_bytes(b"unsigned notes")
    return root


def test_sign_then_verify_round_trip(model: Path, ec_key: tuple[Path, Any]) -> None:
    path, key = ec_key
    sig = sign_oms(model, path, b"pass phrase", ignore_paths=["notes.txt"])
    stmt = verify_oms(sig, model, _key_trust(key.public_key()), ["notes.txt"])
    assert "3 file(s) match: a-b, sub/config.json, weights.bin" in stmt.notes[0]
    statement = json.loads(stmt.payload)
    assert [r["name"] for r in statement["predicate"]["resources"]] == [
        "a-b",
        "sub/config.json",
        "weights.bin",
    ]
    assert "notes.txt" in statement["predicate"]["serialization"]["ignore_paths"]
    # The signature's own ignore list does not excuse notes.txt for us.
    with pytest.raises(OmsFileMismatch, match=r"notes\.txt"):
        verify_oms(sig, model, _key_trust(key.public_key()))


def test_signed_file_under_an_ignored_path_is_missing_as_in_model_signing(
    model: Path, ec_key: tuple[Path, Any]
) -> None:
    """An ignore path excludes: a signed file under it is not part of the model, so it is
    missing (model_signing verify --ignore-paths refuses it the same way), intact or not."""
    path, key = ec_key
    sig = sign_oms(model, path, b"pass phrase", ignore_paths=["notes.txt"])
    for content in (b'{"a": 1}', b'{"a": 2}'):
        (model / "sub" / "config.json").write_bytes(content)
        with pytest.raises(OmsFileMismatch) as info:
            verify_oms(sig, model, _key_trust(key.public_key()), ["notes.txt", "sub"])
        assert info.value.check == oms.OmsFileCheck(("sub/config.json",), (), ())


def test_sign_refuses_bad_keys(model: Path, ec_key: tuple[Path, Any], tmp_path: Path) -> None:
    path, _ = ec_key
    with pytest.raises(KeyError_):
        sign_oms(model, path, b"wrong pass phrase")
    ed = tmp_path / "ed.pem"
    ed.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(
        KeyError_,
        match=r"Ed25519 key: OMS signing needs an elliptic-curve "
        r"\(P-256\).*`modelward key generate --type ecdsa-p256",
    ):
        sign_oms(model, ed, None)
    with pytest.raises(KeyError_):
        sign_oms(model, tmp_path / "absent.pem", None)


@pytest.mark.parametrize("bad", ["/etc", "../x", "", "."])
def test_bad_ignore_paths_are_caller_errors(model: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="ignore path"):
        verify_oms(b"{}", model, TrustSet(), [bad])


def _bundle(
    statement: dict[str, Any],
    key: ec.EllipticCurvePrivateKey,
    compat: bool = False,
    **overrides: Any,
) -> bytes:
    payload = json.dumps(statement).encode()
    if compat:
        message = f"DSSEV1 {len(PAYLOAD_TYPE)} {PAYLOAD_TYPE} {len(payload)} {payload!r}".encode()
    else:
        message = b"DSSEv1 %d %b %d %b" % (
            len(PAYLOAD_TYPE),
            PAYLOAD_TYPE.encode(),
            len(payload),
            payload,
        )
    signature = key.sign(message, ec.ECDSA(hashes.SHA256()))
    doc = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": ""}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode(),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(signature).decode(), "keyid": ""}],
        },
    }
    doc.update(overrides)
    return json.dumps(doc).encode()


def _files(model: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (p.relative_to(model).as_posix(), p.read_bytes())
        for p in model.rglob("*")
        if p.is_file() and p.name != "notes.txt"
    )


def _v1(model: Path, hash_name: str = "sha256", shard: int | None = None) -> dict[str, Any]:
    resources = []
    for name, data in sorted(_files(model), key=lambda f: f[0].split("/")):
        if shard is None:
            resources.append(
                {
                    "name": name,
                    "algorithm": hash_name,
                    "digest": hashlib.new(hash_name, data).hexdigest(),
                }
            )
            continue
        for start in range(0, len(data), shard):
            end = min(start + shard, len(data))
            resources.append(
                {
                    "name": f"{name}:{start}:{end}",
                    "algorithm": f"{hash_name}-sharded-{shard}",
                    "digest": hashlib.new(hash_name, data[start:end]).hexdigest(),
                }
            )
    serialization_args: dict[str, Any] = {
        "method": "files" if shard is None else "shards",
        "hash_type": hash_name,
        "allow_symlinks": False,
    }
    if shard is not None:
        serialization_args["shard_size"] = float(shard)
    root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest()
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "model", "digest": {"sha256": root}}],
        "predicateType": "https://model_signing/signature/v1.0",
        "predicate": {"serialization": serialization_args, "resources": resources},
    }


@pytest.mark.parametrize(
    ("hash_name", "shard"),
    [("sha256", None), ("blake2b", None), ("sha256", 1000), ("blake2b", 777)],
)
def test_v1_forms_verify_and_catch_a_flip(model: Path, hash_name: str, shard: int | None) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    data = _bundle(_v1(model, hash_name, shard), key)
    trust = _key_trust(key.public_key())
    verify_oms(data, model, trust, ["notes.txt"])
    weights = bytearray((model / "weights.bin").read_bytes())
    weights[2500] ^= 0x80
    (model / "weights.bin").write_bytes(bytes(weights))
    with pytest.raises(OmsFileMismatch) as info:
        verify_oms(data, model, trust, ["notes.txt"])
    assert info.value.check.mismatched == ("weights.bin",)


def test_sharded_file_that_grew_is_mismatched(model: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    data = _bundle(_v1(model, "sha256", 1000), key)
    with (model / "weights.bin").open("ab") as stream:
        stream.write(b"appended")
    with pytest.raises(OmsFileMismatch, match=r"weights\.bin"):
        verify_oms(data, model, _key_trust(key.public_key()), ["notes.txt"])


def _v02(model: Path, predicate_type: str, shard: int = 1000) -> dict[str, Any]:
    files = _files(model)
    if "Shard" in predicate_type:
        entries = [
            {
                "name": f"{n}:{s}:{min(s + shard, len(d))}",
                "algorithm": f"file-sha256-{shard}",
                "digest": hashlib.sha256(d[s : s + shard]).hexdigest(),
            }
            for n, d in files
            for s in range(0, len(d), shard)
        ]
    else:
        entries = [
            {"name": n, "algorithm": "file-sha256", "digest": hashlib.sha256(d).hexdigest()}
            for n, d in files
        ]
    if predicate_type.endswith("Digests/v0.1") and "DigestOf" not in predicate_type:
        subjects = [
            {
                "name": e["name"],
                "digest": {"sha256": e["digest"]},
                "annotations": {"actual_hash_algorithm": e["algorithm"]},
            }
            for e in entries
        ]
        predicate: dict[str, Any] = {"unused": "Unused, just passed due to API requirements"}
    else:
        root = hashlib.sha256(b"".join(bytes.fromhex(e["digest"]) for e in entries)).hexdigest()
        subjects = [{"name": ".", "digest": {"sha256": root}}]
        predicate = {"shards" if "Shard" in predicate_type else "files": entries}
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": subjects,
        "predicateType": predicate_type,
        "predicate": predicate,
    }


@pytest.mark.parametrize(
    "predicate_type",
    [
        "https://model_signing/Digests/v0.1",
        "https://model_signing/DigestOfDigests/v0.1",
        "https://model_signing/ShardDigests/v0.1",
        "https://model_signing/DigestOfShardDigests/v0.1",
    ],
)
@pytest.mark.parametrize("compat", [False, True], ids=["pae", "v0.2-compat-pae"])
def test_v02_forms_verify(model: Path, predicate_type: str, compat: bool) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    data = _bundle(_v02(model, predicate_type), key, compat=compat)
    stmt = verify_oms(data, model, _key_trust(key.public_key()), ["notes.txt"])
    assert stmt.predicate_type == predicate_type
    (model / "sub" / "config.json").unlink()
    with pytest.raises(OmsFileMismatch, match="missing"):
        verify_oms(data, model, _key_trust(key.public_key()), ["notes.txt"])


def test_inconsistent_subject_digest_is_rejected(model: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    statement = _v1(model)
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    with pytest.raises(VerificationError, match="inconsistent"):
        verify_oms(_bundle(statement, key), model, _key_trust(key.public_key()), ["notes.txt"])


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda s: s["predicate"]["resources"].append(s["predicate"]["resources"][0]), "twice"),
        (lambda s: s["predicate"]["resources"][0].update(name="../escape"), "unsafe"),
        (lambda s: s["predicate"]["resources"][0].update(name="/abs"), "unsafe"),
        (lambda s: s["predicate"]["serialization"].update(hash_type="blake3"), "unsupported"),
        (lambda s: s["predicate"]["serialization"].update(method="tensors"), "method"),
        (lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"), "no OpenSSF"),
        (lambda s: s["predicate"].update(resources=[]), "signs no files"),
    ],
)
def test_malformed_statements_are_rejected(model: Path, mutate: Any, reason: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    statement = _v1(model)
    mutate(statement)
    # Re-derive the subject so that the check under test, not the digest of digests, fires.
    digests = b"".join(bytes.fromhex(r["digest"]) for r in statement["predicate"]["resources"])
    statement["subject"][0]["digest"]["sha256"] = hashlib.sha256(digests).hexdigest()
    with pytest.raises(VerificationError, match=reason):
        verify_oms(_bundle(statement, key), model, _key_trust(key.public_key()), ["notes.txt"])


def test_unknown_media_type_is_rejected(model: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    data = _bundle(_v1(model), key, mediaType="application/vnd.example+json")
    with pytest.raises(VerificationError, match="media type"):
        verify_oms(data, model, _key_trust(key.public_key()), ["notes.txt"])


def test_symlink_in_tree_fails_closed(model: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    data = _bundle(_v1(model), key)
    (model / "link").symlink_to("weights.bin")
    with pytest.raises(VerificationError, match="symlink"):
        verify_oms(data, model, _key_trust(key.public_key()), ["notes.txt"])


def test_empty_trust_set_trusts_nobody(shared_fixtures: Path) -> None:
    model = shared_fixtures / "oms" / "v1.1.0-elliptic-key"
    with pytest.raises(VerificationError, match="no key is trusted"):
        verify_oms((model / "model.sig").read_bytes(), model, TrustSet(), ["ignore-me"])


def test_public_surface() -> None:
    assert sorted(oms.__all__) == [
        "OMS_SIGNATURE_FILENAME",
        "OmsFileCheck",
        "OmsFileMismatch",
        "load_oms_signing_key",
        "require_signs_bundle",
        "sign_oms",
        "verify_oms",
    ]
