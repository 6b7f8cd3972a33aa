"""attest.verify: the kind from the content, the right verifier, the subject binding."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

import modelward.attest.verify
from modelward.attest.dsse import pae, sign_envelope
from modelward.attest.errors import SubjectMismatch, UnknownSignatureFormat, VerificationError
from modelward.attest.keys import generate_private_key, trusted_key
from modelward.attest.manifest import build_bundle
from modelward.attest.oms import OmsFileMismatch, verify_oms
from modelward.attest.policy import OMS_TREE_NOTE, trusted_public_key
from modelward.attest.statement import PredicateType, make_statement
from modelward.attest.trust import TrustedIdentity, TrustSet
from modelward.attest.verifier import DirectoryReader, verify_one_attestation
from modelward.attest.verify import detect_kind, verify_attestation

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
CONFORMANCE_IDENTITY = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


@pytest.fixture(scope="module")
def key():
    return generate_private_key()


def _envelope(key, digest: str = DIGEST) -> bytes:
    payload = make_statement("b", digest, PredicateType.PROVENANCE, {"x": 1})
    return sign_envelope(payload, [key])


def test_detect_dsse(key):
    assert detect_kind(_envelope(key)) == "dsse"


@pytest.mark.parametrize(
    "case",
    [
        "happy-path-intoto-in-dsse-v3",
        "rekor2-dsse-happy-path",
        "dsse-invalid-sig_fail",
        "dsse-mismatch-envelope_fail",
    ],
)
def test_detect_sigstore_bundle(case, shared_fixtures):
    data = (shared_fixtures / "sigstore" / case / "bundle.sigstore.json").read_bytes()
    assert detect_kind(data) == "sigstore"


@pytest.mark.parametrize("kind", ["elliptic-key", "certificate", "sigstore"])
def test_detect_oms_model_sig(kind, shared_fixtures):
    data = (shared_fixtures / "oms" / f"v1.1.0-{kind}" / "model.sig").read_bytes()
    assert detect_kind(data) == "oms"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"payload": "x", "signatures": []}',
        b'{"payloadType": "a", "payload": "b", "signatures": [], "extra": 1}',
        b'{"mediaType": "application/vnd.example+json"}',
        b"{" * 100_000,
    ],
    ids=["empty", "binary", "array", "dsse-missing-key", "dsse-extra-key", "other-media", "deep"],
)
def test_unknown_format_refused(data):
    with pytest.raises(UnknownSignatureFormat):
        detect_kind(data)


def test_oversized_signature_refused():
    with pytest.raises(UnknownSignatureFormat, match="larger than"):
        detect_kind(b" " * (modelward.attest.verify.MAX_SIGNATURE_BYTES + 1))


def test_dsse_verified_and_bound(key):
    stmt = verify_attestation(
        _envelope(key), TrustSet(keys=(trusted_key("k", key.public_key()),)), bundle_digest=DIGEST
    )
    assert stmt.kind == "dsse"
    assert [s.name for s in stmt.signers] == ["k"]


def test_dsse_about_another_bundle_refused(key):
    with pytest.raises(SubjectMismatch) as raised:
        verify_attestation(
            _envelope(key, OTHER),
            TrustSet(keys=(trusted_key("k", key.public_key()),)),
            bundle_digest=DIGEST,
        )
    assert raised.value.expected == DIGEST


def test_untrusted_key_refused(key):
    stranger = TrustSet(keys=(trusted_key("s", generate_private_key().public_key()),))
    with pytest.raises(VerificationError):
        verify_attestation(_envelope(key), stranger, bundle_digest=DIGEST)


def test_empty_trust_refused(key):
    with pytest.raises(VerificationError, match="no trusted signers"):
        verify_attestation(_envelope(key), TrustSet(), bundle_digest=DIGEST)


def test_sigstore_dispatch_verifies_then_checks_subject(shared_fixtures):
    # The conformance statement is about a.txt, not a bundle: the signature verifies
    # offline, then the subject binding refuses it.
    root = shared_fixtures / "sigstore" / "trusted-roots" / "production.json"
    ident = TrustedIdentity("beacon", CONFORMANCE_IDENTITY, GITHUB_ISSUER, root)
    data = shared_fixtures / "sigstore" / "happy-path-intoto-in-dsse-v3" / "bundle.sigstore.json"
    with pytest.raises(SubjectMismatch):
        verify_attestation(data.read_bytes(), TrustSet(identities=(ident,)), bundle_digest=DIGEST)
    a_txt = "sha256:a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf"
    stmt = verify_attestation(data.read_bytes(), TrustSet(identities=(ident,)), bundle_digest=a_txt)
    assert stmt.kind == "sigstore"
    assert stmt.predicate_type == PredicateType.PROVENANCE


def test_sigstore_bad_signature_refused(shared_fixtures):
    root = shared_fixtures / "sigstore" / "trusted-roots" / "production.json"
    ident = TrustedIdentity("beacon", CONFORMANCE_IDENTITY, GITHUB_ISSUER, root)
    data = shared_fixtures / "sigstore" / "dsse-invalid-sig_fail" / "bundle.sigstore.json"
    with pytest.raises(VerificationError):
        verify_attestation(
            data.read_bytes(),
            TrustSet(identities=(ident,)),
            bundle_digest="sha256:a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf",
        )


def _oms_trust(shared_fixtures: Path) -> TrustSet:
    pem = (shared_fixtures / "oms" / "keys" / "signing-key-pub.pem").read_bytes()
    return TrustSet(keys=(trusted_public_key("oms-key", pem, "signing-key-pub.pem"),))


def test_oms_needs_the_tree(shared_fixtures):
    data = (shared_fixtures / "oms" / "v1.1.0-elliptic-key" / "model.sig").read_bytes()
    with pytest.raises(VerificationError, match="no tree was given"):
        verify_attestation(data, _oms_trust(shared_fixtures), bundle_digest=DIGEST)


def _fixture_copy(shared_fixtures: Path, tmp_path: Path, *, keep_ignored: bool) -> Path:
    root = tmp_path / "model"
    root.mkdir()
    for name in ("model.sig", "signme-1", "signme-2", *(("ignore-me",) if keep_ignored else ())):
        (root / name).write_bytes(
            (shared_fixtures / "oms" / "v1.1.0-elliptic-key" / name).read_bytes()
        )
    return root


def test_oms_verified_against_tree_carries_binding_note(shared_fixtures, tmp_path):
    root = _fixture_copy(shared_fixtures, tmp_path, keep_ignored=False)
    stmt = verify_attestation(
        (root / "model.sig").read_bytes(),
        _oms_trust(shared_fixtures),
        bundle_digest=DIGEST,
        root=root,
    )
    assert stmt.kind == "oms"
    assert f"{OMS_TREE_NOTE}{DIGEST}" in stmt.notes


def test_oms_ignore_path_excludes_the_file_from_the_tree(shared_fixtures, tmp_path):
    """ignore_paths EXCLUDE ignore-me from the tree (as build_bundle(exclude=...) leaves it
    out of the bundle): the signature then signs every remaining file and binds."""
    root = _fixture_copy(shared_fixtures, tmp_path, keep_ignored=True)
    data = (root / "model.sig").read_bytes()
    stmt = verify_oms(data, root, _oms_trust(shared_fixtures), ["ignore-me"])
    assert "2 file(s) match: signme-1, signme-2" in stmt.notes[0]
    stmt = verify_attestation(
        data,
        _oms_trust(shared_fixtures),
        bundle_digest=DIGEST,
        root=root,
        ignore_paths=["ignore-me"],
    )
    assert f"{OMS_TREE_NOTE}{DIGEST}" in stmt.notes
    # without the exclusion, ignore-me is a model file the signature does not sign
    with pytest.raises(OmsFileMismatch) as info:
        verify_attestation(data, _oms_trust(shared_fixtures), bundle_digest=DIGEST, root=root)
    assert info.value.check.extra == ("ignore-me",)


def test_oms_ignore_path_naming_a_bundle_file_is_refused(shared_fixtures, tmp_path):
    """An ignore path must name something the bundle left out: one naming a file the
    manifest lists would let that file into the bundle unsigned."""
    root = _fixture_copy(shared_fixtures, tmp_path, keep_ignored=True)
    (root / "ignore-me").write_text("{{ 'an unsigned chat template' }}")
    manifest = build_bundle(root).manifest  # built WITHOUT the exclusion: ignore-me is in it
    with pytest.raises(
        VerificationError,
        match=r"ignore path\(s\) ignore-me name bundle "
        r"file\(s\) ignore-me: an ignored path must be left out of the bundle",
    ):
        verify_one_attestation(
            manifest,
            (root / "model.sig").read_bytes(),
            trust=_oms_trust(shared_fixtures),
            reader=DirectoryReader(root),
            oms_ignore_paths=["ignore-me"],
        )
    # the same bundle built with the exclusion binds
    manifest = build_bundle(root, exclude=["ignore-me"]).manifest
    verified = verify_one_attestation(
        manifest,
        (root / "model.sig").read_bytes(),
        trust=_oms_trust(shared_fixtures),
        reader=DirectoryReader(root),
        oms_ignore_paths=["ignore-me"],
    )
    assert f"{OMS_TREE_NOTE}{manifest.digest}" in verified.statement.notes


def _sharded_oms(key: ec.EllipticCurvePrivateKey, root: Path, shard_size: int) -> bytes:
    """An OMS v1.0 shards signature over every non-empty file, as model_signing makes it."""
    resources = []
    for path in sorted(p for p in root.iterdir() if p.stat().st_size):
        data = path.read_bytes()
        for start in range(0, len(data), shard_size):
            end = min(start + shard_size, len(data))
            resources.append(
                {
                    "name": f"{path.name}:{start}:{end}",
                    "algorithm": f"sha256-sharded-{shard_size}",
                    "digest": hashlib.sha256(data[start:end]).hexdigest(),
                }
            )
    digest = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources))
    payload = json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "m", "digest": {"sha256": digest.hexdigest()}}],
            "predicateType": "https://model_signing/signature/v1.0",
            "predicate": {
                "serialization": {
                    "method": "shards",
                    "hash_type": "sha256",
                    "shard_size": shard_size,
                    "allow_symlinks": False,
                    "ignore_paths": [],
                },
                "resources": resources,
            },
        }
    ).encode()
    sig = key.sign(pae("application/vnd.in-toto+json", payload), ec.ECDSA(hashes.SHA256()))
    return json.dumps(
        {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"publicKey": {"hint": ""}, "tlogEntries": []},
            "dsseEnvelope": {
                "payload": base64.b64encode(payload).decode(),
                "payloadType": "application/vnd.in-toto+json",
                "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}],
            },
        }
    ).encode()


def test_oms_sharded_signature_does_not_bind_an_unsigned_empty_file(tmp_path):
    """model_signing makes no shard for an empty file, so verify_oms accepts one present,
    but it is an unsigned bundle file: the binding to the bundle digest is refused."""
    key = ec.generate_private_key(ec.SECP256R1())
    trust = TrustSet(
        keys=(
            trusted_public_key(
                "k",
                key.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                ),
                "k",
            ),
        )
    )
    root = tmp_path / "model"
    root.mkdir()
    (root / "w.bin").write_bytes(bytes(range(256)) * 5)
    data = _sharded_oms(key, root, 512)
    assert (
        f"{OMS_TREE_NOTE}{DIGEST}"
        in verify_attestation(data, trust, bundle_digest=DIGEST, root=root).notes
    )
    (root / "chat_template.jinja").write_bytes(b"")
    verify_oms(data, root, trust)  # the OMS check itself: an empty file is never extra
    with pytest.raises(
        OmsFileMismatch,
        match=r"chat_template\.jinja \(empty: a sharded "
        r"signature has no shard for it\) is in the bundle but not signed",
    ) as info:
        verify_attestation(data, trust, bundle_digest=DIGEST, root=root)
    assert info.value.check.extra == ("chat_template.jinja",)


def test_oms_predicate_in_plain_dsse_is_not_oms(key):
    payload = json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "m", "digest": {"sha256": "ab" * 32}}],
            "predicateType": "https://model_signing/signature/v1.0",
            "predicate": {},
        }
    ).encode()
    envelope = {
        "payloadType": "application/vnd.in-toto+json",
        "payload": base64.b64encode(payload).decode(),
        "signatures": [],
    }
    assert detect_kind(json.dumps(envelope).encode()) == "dsse"
