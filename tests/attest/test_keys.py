"""attest.keys: generation, files on disk, key ids, refused key types."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from modelward.attest import keys
from modelward.attest.errors import KeyError_

KINDS = ["ed25519", "ecdsa-p256"]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _pem_der(pem: bytes) -> bytes:
    body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
    return base64.b64decode(body)


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(tmp_path: Path, kind: keys.KeyKind) -> None:
    key = keys.generate_private_key(kind)
    path = tmp_path / "signing.pem"
    pub_path = keys.save_private_key(key, path)

    assert pub_path == tmp_path / "signing.pem.pub"
    assert _mode(path) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert pub_path.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")  # SPKI
    loaded = keys.load_private_key(path)
    assert keys.keyid(loaded.public_key()) == keys.keyid(key.public_key())
    public = keys.load_public_key(pub_path.read_bytes(), source=str(pub_path))
    assert keys.keyid(public) == keys.keyid(key.public_key())
    assert keys.key_kind(public) == kind


def test_key_file_mode_is_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    import os

    old = os.umask(0)
    try:
        path = tmp_path / "k.pem"
        keys.save_private_key(keys.generate_private_key(), path)
    finally:
        os.umask(old)
    assert _mode(path) == 0o600
    assert _mode(tmp_path / "k.pem.pub") == 0o644


def test_keyid_is_sha256_of_the_spki_der_in_the_pub_file(tmp_path: Path) -> None:
    key = keys.generate_private_key("ecdsa-p256")
    pub_path = keys.save_private_key(key, tmp_path / "k.pem")
    der = _pem_der(pub_path.read_bytes())
    assert keys.keyid(key.public_key()) == hashlib.sha256(der).hexdigest()


def test_refuses_to_overwrite_existing_key(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    keys.save_private_key(keys.generate_private_key(), path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="refusing to overwrite"):
        keys.save_private_key(keys.generate_private_key(), path)
    assert path.read_bytes() == before


def test_refuses_when_only_the_pub_file_exists_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "k.pem.pub").write_bytes(b"old")
    with pytest.raises(ValueError, match=r"k\.pem\.pub"):
        keys.save_private_key(keys.generate_private_key(), tmp_path / "k.pem")
    assert not (tmp_path / "k.pem").exists()
    assert (tmp_path / "k.pem.pub").read_bytes() == b"old"


def test_overwrite_when_told_keeps_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    keys.save_private_key(keys.generate_private_key(), path)
    path.chmod(0o644)
    new = keys.generate_private_key()
    keys.save_private_key(new, path, overwrite=True)
    assert _mode(path) == 0o600
    assert keys.keyid(keys.load_private_key(path).public_key()) == keys.keyid(new.public_key())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.pem", "k.pem.pub"]


@pytest.mark.parametrize("kind", KINDS)
def test_passphrase_encrypted_round_trip(tmp_path: Path, kind: keys.KeyKind) -> None:
    key = keys.generate_private_key(kind)
    path = tmp_path / "k.pem"
    keys.save_private_key(key, path, passphrase=b"correct horse")
    assert path.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    loaded = keys.load_private_key(path, b"correct horse")
    assert keys.keyid(loaded.public_key()) == keys.keyid(key.public_key())


def test_wrong_passphrase_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    keys.save_private_key(keys.generate_private_key(), path, passphrase=b"right")
    with pytest.raises(KeyError_, match="wrong passphrase") as info:
        keys.load_private_key(path, b"wrong")
    assert str(path) in str(info.value)


def test_missing_passphrase_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    keys.save_private_key(keys.generate_private_key(), path, passphrase=b"right")
    with pytest.raises(KeyError_, match="passphrase is needed") as info:
        keys.load_private_key(path)
    assert str(path) in str(info.value)


def test_passphrase_for_unencrypted_key(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    keys.save_private_key(keys.generate_private_key(), path)
    with pytest.raises(KeyError_, match="not encrypted"):
        keys.load_private_key(path, b"pw")


def test_empty_passphrase_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty passphrase"):
        keys.save_private_key(keys.generate_private_key(), tmp_path / "k.pem", passphrase=b"")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a key at all\n", "not a PEM private key"),
        (b"", "not a PEM private key"),
        (b"x" * 100_000, "larger than"),
    ],
)
def test_not_a_key_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "junk.pem"
    path.write_bytes(content)
    with pytest.raises(KeyError_, match=message) as info:
        keys.load_private_key(path)
    assert str(path) in str(info.value)


def test_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(KeyError_, match="key file: cannot read") as info:
        keys.load_private_key(tmp_path / "absent.pem")
    assert "absent.pem" in str(info.value)


def test_rsa_1024_private_key_is_refused(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    path = tmp_path / "rsa.pem"
    path.write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(KeyError_, match="unsupported key type RSAPrivateKey") as info:
        keys.load_private_key(path)
    assert str(path) in str(info.value)
    with pytest.raises(KeyError_, match="unsupported"):
        keys.save_private_key(rsa_key, tmp_path / "out.pem")
    assert not (tmp_path / "out.pem").exists()


def test_rsa_and_p384_public_keys_are_refused() -> None:
    rsa_pub = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    p384_pub = ec.generate_private_key(ec.SECP384R1()).public_key()
    cases: list[tuple[PublicKeyTypes, str]] = [
        (rsa_pub, "unsupported key type"),
        (p384_pub, "secp384r1"),
    ]
    for public, message in cases:
        pem = public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        with pytest.raises(KeyError_, match=message) as info:
            keys.load_public_key(pem, source="team.pub")
        assert "team.pub" in str(info.value)
        with pytest.raises(KeyError_):
            keys.trusted_key("team", public)


def test_load_public_key_garbage() -> None:
    with pytest.raises(KeyError_, match=r"alice\.pub: not a PEM public key"):
        keys.load_public_key(
            b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "alice.pub"
        )


def test_trusted_key_carries_name_and_keyid() -> None:
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    trusted = keys.trusted_key("alice", public)
    assert trusted.name == "alice"
    assert trusted.keyid == keys.keyid(public)
    with pytest.raises(ValueError, match="non-empty name"):
        keys.trusted_key("", public)


def test_unknown_kind_is_caller_misuse() -> None:
    with pytest.raises(ValueError, match="unknown key type"):
        keys.generate_private_key("rsa")  # type: ignore[arg-type]


def test_public_surface() -> None:
    assert sorted(keys.__all__) == [
        "KeyKind",
        "SigningKey",
        "VerifyingKey",
        "generate_private_key",
        "key_kind",
        "keyid",
        "load_private_key",
        "load_public_key",
        "public_key_pem",
        "require_signing_key",
        "require_verifying_key",
        "save_private_key",
        "trusted_key",
    ]
