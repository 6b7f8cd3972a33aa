"""OMS both ways with the real ``model_signing`` (sigstore/model-transparency) tool.

The CLI signs a copy of the tiny model and we verify; we sign and the CLI verifies, and
rejects the model after a one-byte change. The library (a test dependency only) also
writes shard and BLAKE2 signatures for us to verify.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from modelward.attest.keys import keyid
from modelward.attest.oms import OmsFileMismatch, sign_oms, verify_oms
from modelward.attest.trust import TrustedKey, TrustSet

MODEL_SIGNING = Path(sys.executable).with_name("model_signing")
PASSPHRASE = b"correct horse"


@pytest.fixture
def keypair(tmp_path: Path) -> tuple[Path, Path, TrustSet]:
    """An EC P-256 key: (private PEM; public PEM; a TrustSet with it).

    The private PEM is unencrypted: model_signing 1.1.1 passes ``--password`` to
    cryptography as str and fails. ``encrypted_key`` holds the same key with a passphrase.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    private = tmp_path / "oms-key.pem"
    private.touch(mode=0o600)
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    encrypted = tmp_path / "oms-key.enc.pem"
    encrypted.touch(mode=0o600)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(PASSPHRASE),
        )
    )
    public = tmp_path / "oms-key.pub.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    trust = TrustSet(keys=(TrustedKey("oms-key", keyid(key.public_key()), key.public_key()),))
    return private, public, trust


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MODEL_SIGNING), *map(str, args)], capture_output=True, text=True, timeout=300,
        check=False,
    )


def _flip(path: Path, offset: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_model_signing_cli_signs_we_verify(
    tiny_model: Path, keypair: tuple[Path, Path, TrustSet]
) -> None:
    private, _, trust = keypair
    signature = tiny_model / "model.sig"
    result = _cli("sign", "key", "--private_key", private, "--signature", signature, tiny_model)
    assert result.returncode == 0, result.stderr + result.stdout
    stmt = verify_oms(signature.read_bytes(), tiny_model, trust)
    assert stmt.kind == "oms"
    assert "model.safetensors" in stmt.notes[0]
    _flip(tiny_model / "config.json")
    with pytest.raises(OmsFileMismatch) as info:
        verify_oms(signature.read_bytes(), tiny_model, trust)
    assert info.value.check.mismatched == ("config.json",)


def test_we_sign_model_signing_cli_verifies(
    tiny_model: Path, keypair: tuple[Path, Path, TrustSet]
) -> None:
    private, public, _ = keypair
    (tiny_model / "README.local").write_text("not part of the release\n")
    signature = tiny_model / "model.sig"
    encrypted = private.with_name("oms-key.enc.pem")
    signature.write_bytes(sign_oms(tiny_model, encrypted, PASSPHRASE, ["README.local"]))
    ok = _cli("verify", "key", "--signature", signature, "--public_key", public, tiny_model)
    assert ok.returncode == 0, ok.stderr + ok.stdout
    # one flipped byte deep in the weights: the real verifier must refuse
    weights = tiny_model / "model.safetensors"
    _flip(weights, weights.stat().st_size // 2)
    bad = _cli("verify", "key", "--signature", signature, "--public_key", public, tiny_model)
    assert bad.returncode != 0
    assert "model.safetensors" in bad.stdout + bad.stderr


def test_model_signing_cli_rejects_our_signature_with_another_key(
    tiny_model: Path, keypair: tuple[Path, Path, TrustSet], tmp_path: Path
) -> None:
    private, _, _ = keypair
    other = tmp_path / "other.pub.pem"
    other.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    signature = tiny_model / "model.sig"
    signature.write_bytes(sign_oms(tiny_model, private))
    result = _cli("verify", "key", "--signature", signature, "--public_key", other, tiny_model)
    assert result.returncode != 0


@pytest.mark.parametrize(
    ("method", "hash_name"), [("shards", "sha256"), ("shards", "blake2"), ("files", "blake2")]
)
def test_model_signing_library_forms_we_verify(
    tiny_model: Path, keypair: tuple[Path, Path, TrustSet], tmp_path: Path, method: str,
    hash_name: Literal["sha256", "blake2"],
) -> None:
    import model_signing  # test dependency only: the product never imports it

    private, _, trust = keypair
    hashing = model_signing.hashing.Config()  # type: ignore[no-untyped-call]
    if method == "shards":
        hashing.use_shard_serialization(hashing_algorithm=hash_name, shard_size=4096)
    else:
        hashing.use_file_serialization(hashing_algorithm=hash_name)
    signature = tmp_path / "model.sig"
    (
        model_signing.signing.Config()  # type: ignore[no-untyped-call]
        .use_elliptic_key_signer(private_key=private)
        .set_hashing_config(hashing)
        .sign(tiny_model, signature)
    )
    payload = json.loads(signature.read_bytes())["dsseEnvelope"]["payload"]
    assert payload  # a real model_signing bundle
    verify_oms(signature.read_bytes(), tiny_model, trust)
    weights = tiny_model / "model.safetensors"
    _flip(weights, weights.stat().st_size - 1)
    with pytest.raises(OmsFileMismatch) as info:
        verify_oms(signature.read_bytes(), tiny_model, trust)
    assert info.value.check.mismatched == ("model.safetensors",)
