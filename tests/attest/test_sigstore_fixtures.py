"""Sigstore conformance bundles (../shared/fixtures/sigstore) verify or fail offline."""

from __future__ import annotations

import base64
import ipaddress
import json
import socket
from pathlib import Path
from typing import Any

import pytest

import modelward.attest.sigstore_verify as sv
from modelward.attest.errors import VerificationError
from modelward.attest.sigstore_verify import verify_sigstore_bundle
from modelward.attest.trust import TrustedIdentity, TrustSet

BEACON = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
A_TXT = "a0cfc71271d6e278e57cd332ff957c3f7043fdda354c4cbb190a30d56efa01bf"


def _loopback(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX
        return True
    host = address[0]
    try:
        return bool(ipaddress.ip_address(host).is_loopback)
    except ValueError:
        return bool(host == "localhost")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every non-loopback connection and DNS lookup: verification must be offline."""
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if not _loopback(address):
            raise OSError(f"network disabled in this test: connect to {address!r}")
        real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (None, "localhost", "127.0.0.1", "::1"):
            raise OSError(f"network disabled in this test: resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _identity(root: Path | None, identity: str = BEACON, name: str = "beacon") -> TrustedIdentity:
    return TrustedIdentity(name=name, identity=identity, issuer=GITHUB_ISSUER, trust_root=root)


def _bundle(fixtures: Path, case: str) -> bytes:
    return (fixtures / "sigstore" / case / "bundle.sigstore.json").read_bytes()


def _production(fixtures: Path) -> Path:
    return fixtures / "sigstore" / "trusted-roots" / "production.json"


def test_network_is_really_blocked() -> None:
    with pytest.raises(OSError, match="network disabled"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)
    with pytest.raises(OSError, match="network disabled"):
        socket.getaddrinfo("tuf-repo-cdn.sigstore.dev", 443)


@pytest.mark.parametrize("embedded", [False, True], ids=["root-file", "embedded-production"])
def test_happy_path_intoto_in_dsse_v3_verifies(shared_fixtures: Path, embedded: bool) -> None:
    data = _bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3")
    root = None if embedded else _production(shared_fixtures)
    stmt = verify_sigstore_bundle(data, TrustSet(identities=(_identity(root),)))
    assert stmt.kind == "sigstore"
    envelope = json.loads(data)["dsseEnvelope"]
    assert stmt.payload == base64.b64decode(envelope["payload"])  # the exact signed bytes
    assert stmt.predicate_type == "https://slsa.dev/provenance/v1"
    assert [(s.name, dict(s.digest)) for s in stmt.subjects] == [("a.txt", {"sha256": A_TXT})]
    assert [(s.name, s.kind) for s in stmt.signers] == [("beacon", "sigstore")]
    assert BEACON in stmt.signers[0].detail
    assert GITHUB_ISSUER in stmt.signers[0].detail


def test_rekor2_dsse_happy_path_verifies_with_its_own_root(shared_fixtures: Path) -> None:
    case = shared_fixtures / "sigstore" / "rekor2-dsse-happy-path"
    stmt = verify_sigstore_bundle(
        _bundle(shared_fixtures, "rekor2-dsse-happy-path"),
        TrustSet(identities=(_identity(case / "trusted_root.json"),)),
    )
    assert stmt.subjects[0].digest["sha256"] == A_TXT


def test_rekor2_bundle_fails_under_the_production_root(shared_fixtures: Path) -> None:
    with pytest.raises(VerificationError):
        verify_sigstore_bundle(
            _bundle(shared_fixtures, "rekor2-dsse-happy-path"),
            TrustSet(identities=(_identity(_production(shared_fixtures)),)),
        )


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("dsse-invalid-sig_fail", "invalid signature"),
        ("dsse-mismatch-envelope_fail", "does not match"),
    ],
)
def test_conformance_failures_fail(shared_fixtures: Path, case: str, reason: str) -> None:
    with pytest.raises(VerificationError, match=reason):
        verify_sigstore_bundle(
            _bundle(shared_fixtures, case),
            TrustSet(identities=(_identity(_production(shared_fixtures)),)),
        )


def test_wrong_identity_fails_with_one_reason_per_identity(shared_fixtures: Path) -> None:
    root = _production(shared_fixtures)
    trust = TrustSet(
        identities=(
            _identity(root, identity="someone@example.com", name="alice"),
            _identity(root, identity=BEACON + "x", name="bob"),
        )
    )
    with pytest.raises(VerificationError) as info:
        verify_sigstore_bundle(_bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"), trust)
    message = str(info.value)
    assert "alice (someone@example.com" in message
    assert "bob (" in message


def test_wrong_issuer_fails(shared_fixtures: Path) -> None:
    root = _production(shared_fixtures)
    identity = TrustedIdentity("x", BEACON, "https://accounts.google.com", root)
    with pytest.raises(VerificationError, match="x "):
        verify_sigstore_bundle(
            _bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"),
            TrustSet(identities=(identity,)),
        )


def test_one_trusted_identity_of_several_is_enough(shared_fixtures: Path) -> None:
    root = _production(shared_fixtures)
    trust = TrustSet(
        identities=(_identity(root, identity="mallory@example.com", name="m"), _identity(root))
    )
    stmt = verify_sigstore_bundle(_bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"), trust)
    assert [s.name for s in stmt.signers] == ["beacon"]


def test_trust_root_of_another_instance_fails(shared_fixtures: Path) -> None:
    staging = shared_fixtures / "sigstore" / "trusted-roots" / "staging.json"
    with pytest.raises(VerificationError):
        verify_sigstore_bundle(
            _bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"),
            TrustSet(identities=(_identity(staging),)),
        )


def test_missing_trust_root_file_is_a_reason(shared_fixtures: Path, tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match="cannot load Sigstore trust root"):
        verify_sigstore_bundle(
            _bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"),
            TrustSet(identities=(_identity(tmp_path / "absent.json"),)),
        )


def test_empty_trust_set_trusts_nobody(shared_fixtures: Path) -> None:
    with pytest.raises(VerificationError, match="no trusted Sigstore identity"):
        verify_sigstore_bundle(_bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"), TrustSet())


def test_unknown_media_type_is_rejected(shared_fixtures: Path) -> None:
    doc = json.loads(_bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"))
    doc["mediaType"] = "application/vnd.dev.sigstore.bundle.v9.9+json"
    with pytest.raises(VerificationError, match="unknown Sigstore bundle media type"):
        verify_sigstore_bundle(
            json.dumps(doc).encode(),
            TrustSet(identities=(_identity(_production(shared_fixtures)),)),
        )


def test_envelope_without_signature_is_rejected(shared_fixtures: Path) -> None:
    doc = json.loads(_bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"))
    doc["dsseEnvelope"]["signatures"] = []
    with pytest.raises(VerificationError, match="invalid Sigstore bundle"):
        verify_sigstore_bundle(
            json.dumps(doc).encode(),
            TrustSet(identities=(_identity(_production(shared_fixtures)),)),
        )


def test_tampered_payload_fails(shared_fixtures: Path) -> None:
    doc = json.loads(_bundle(shared_fixtures, "happy-path-intoto-in-dsse-v3"))
    payload = base64.b64decode(doc["dsseEnvelope"]["payload"]).replace(b"a.txt", b"b.txt")
    doc["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    with pytest.raises(VerificationError):
        verify_sigstore_bundle(
            json.dumps(doc).encode(),
            TrustSet(identities=(_identity(_production(shared_fixtures)),)),
        )


@pytest.mark.parametrize("data", [b"", b"not json", b"[]", b'{"mediaType": 1}', b"\xff\xfe"])
def test_garbage_is_rejected(data: bytes) -> None:
    with pytest.raises(VerificationError):
        verify_sigstore_bundle(data, TrustSet(identities=(_identity(None),)))


def test_public_surface() -> None:
    assert sorted(sv.__all__) == [
        "BUNDLE_MEDIA_TYPES",
        "DsseResult",
        "IN_TOTO_PAYLOAD_TYPE",
        "load_trusted_root",
        "verify_sigstore_bundle",
        "verify_sigstore_dsse",
    ]
