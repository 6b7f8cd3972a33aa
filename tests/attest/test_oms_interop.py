"""OMS both ways with the real ``model_signing`` (sigstore/model-transparency) tool.

The CLI signs a copy of the tiny model and we verify; we sign and the CLI verifies, and
rejects the model after a one-byte change. The library (a test dependency only) also
writes shard and BLAKE2 signatures for us to verify.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
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
        [str(MODEL_SIGNING), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
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
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    signature = tiny_model / "model.sig"
    signature.write_bytes(sign_oms(tiny_model, private))
    result = _cli("verify", "key", "--signature", signature, "--public_key", other, tiny_model)
    assert result.returncode != 0


@pytest.mark.parametrize(
    ("method", "hash_name"), [("shards", "sha256"), ("shards", "blake2"), ("files", "blake2")]
)
def test_model_signing_library_forms_we_verify(
    tiny_model: Path,
    keypair: tuple[Path, Path, TrustSet],
    tmp_path: Path,
    method: str,
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


# --- `modelward bundle verify --ignore-path` against `model_signing verify`, side by side ---
#
# Each case is a writable copy of an OMS v1.x fixture (../shared/fixtures/oms), changed one
# way, verified by both real CLIs with the same ignore list. model_signing resolves its
# --ignore-paths against the working directory, so it gets absolute paths; ours are relative
# to the model. The verdicts must agree, and an ignored path must be left out of the bundle.

MODELWARD = Path(sys.executable).with_name("modelward")


def _tamper_signature(model: Path) -> None:
    bundle = json.loads((model / "model.sig").read_bytes())
    sig = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    (model / "model.sig").write_text(json.dumps(bundle))


def _add(path: str, data: bytes = b"x") -> Callable[[Path], None]:
    def change(model: Path) -> None:
        (model / path).parent.mkdir(parents=True, exist_ok=True)
        (model / path).write_bytes(data)

    return change


# (case id, change to the model, ignore list, expected verdict of both tools)
_CASES: list[tuple[str, Callable[[Path], None] | None, tuple[str, ...], bool]] = [
    ("as-signed", None, ("ignore-me",), True),
    ("ignored-file-changed", _add("ignore-me", b"{{ not signed }}"), ("ignore-me",), True),
    ("ignore-me-removed", lambda m: (m / "ignore-me").unlink(), ("ignore-me",), True),
    ("signed-file-tampered", _add("signme-1", b"tampered"), ("ignore-me",), False),
    ("signed-file-removed", lambda m: (m / "signme-2").unlink(), ("ignore-me",), False),
    ("extra-file", _add("extra.bin"), ("ignore-me",), False),
    ("extra-file-ignored", _add("extra.bin"), ("ignore-me", "extra.bin"), True),
    ("extra-dir-ignored", _add("notes/a.txt"), ("ignore-me", "notes"), True),
    ("extra-file-in-dir", _add("notes/a.txt"), ("ignore-me",), False),
    ("signed-file-ignored", None, ("ignore-me", "signme-1"), False),
    ("signature-tampered", _tamper_signature, ("ignore-me",), False),
]


def _model_signing_verify(
    kind: str, model: Path, keys: Path, ignores: tuple[str, ...], public_key: Path | None = None
) -> subprocess.CompletedProcess[str]:
    ignore_args = [a for p in ignores for a in ("--ignore-paths", str(model / p))]
    if kind == "v1.1.0-elliptic-key":
        trust = ["--public_key", str(public_key or keys / "signing-key-pub.pem")]
        return _cli(
            "verify", "key", "--signature", model / "model.sig", *trust, *ignore_args, model
        )
    return _cli(
        "verify",
        "certificate",
        "--signature",
        model / "model.sig",
        "--certificate_chain",
        keys / "ca-cert.pem",
        "--certificate_chain",
        keys / "int-ca-cert.pem",
        *ignore_args,
        model,
    )


def _modelward_verify(
    kind: str, model: Path, keys: Path, ignores: tuple[str, ...], public_key: Path | None = None
) -> subprocess.CompletedProcess[str]:
    if kind == "v1.1.0-elliptic-key":
        trust = ["--public-key", str(public_key or keys / "signing-key-pub.pem")]
    else:
        trust = ["--certificate-chain", str(keys / "ca-cert.pem")]
    ignore_args = [a for p in ignores for a in ("--ignore-path", p)]
    return subprocess.run(
        [
            str(MODELWARD),
            "bundle",
            "verify",
            str(model),
            "--signature",
            str(model / "model.sig"),
            *trust,
            *ignore_args,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _writable_copy(shared_fixtures: Path, kind: str, tmp_path: Path) -> Path:
    model = tmp_path / kind
    shutil.copytree(shared_fixtures / "oms" / kind, model)
    for path in [model, *model.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return model


@pytest.mark.parametrize("kind", ["v1.1.0-elliptic-key", "v1.1.0-certificate"])
@pytest.mark.parametrize(
    ("case", "change", "ignores", "expected"), _CASES, ids=[c[0] for c in _CASES]
)
def test_verdict_equals_model_signing_cli(
    shared_fixtures: Path,
    tmp_path: Path,
    kind: str,
    case: str,
    change: Callable[[Path], None] | None,
    ignores: tuple[str, ...],
    expected: bool,
) -> None:
    keys = shared_fixtures / "oms" / "keys"
    model = _writable_copy(shared_fixtures, kind, tmp_path)
    if change is not None:
        change(model)
    theirs = _model_signing_verify(kind, model, keys, ignores)
    ours = _modelward_verify(kind, model, keys, ignores)
    assert (theirs.returncode == 0) is expected, f"model_signing: {theirs.stdout}{theirs.stderr}"
    assert ours.returncode == (0 if expected else 1), ours.stdout + ours.stderr
    doc = json.loads(ours.stdout)
    assert doc["verified"] is expected
    if expected:
        # the ignored paths are left out of the bundle: its digest is that of the tree
        # without them, and `bundle digest` with the same flags names the same bundle
        digest = subprocess.run(
            [
                str(MODELWARD),
                "bundle",
                "digest",
                str(model),
                *[a for p in ignores for a in ("--ignore-path", p)],
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
        assert doc["bundle"] == digest
        assert doc["excluded"] == [p for p in ignores if (model / p).exists()]
        size_check = next(c for c in doc["decision"]["checks"] if c["name"] == "size")
        assert "in 2 file(s)" in size_check["message"]  # signme-1 and signme-2, nothing else


def test_verdict_equals_model_signing_cli_with_another_key(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    kind = "v1.1.0-elliptic-key"
    keys = shared_fixtures / "oms" / "keys"
    model = _writable_copy(shared_fixtures, kind, tmp_path)
    other = tmp_path / "other.pub.pem"
    other.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    theirs = _model_signing_verify(kind, model, keys, ("ignore-me",), public_key=other)
    ours = _modelward_verify(kind, model, keys, ("ignore-me",), public_key=other)
    assert theirs.returncode != 0
    assert ours.returncode == 1
    assert json.loads(ours.stdout)["verified"] is False


def test_signature_own_ignore_list_is_named_but_not_obeyed(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    """model_signing obeys the ignore_paths the signer recorded; we let only the verifier
    decide what the bundle leaves out, and name the flag that leaves those paths out."""
    kind = "v1.1.0-elliptic-key"
    keys = shared_fixtures / "oms" / "keys"
    model = _writable_copy(shared_fixtures, kind, tmp_path)
    assert _model_signing_verify(kind, model, keys, ()).returncode == 0
    ours = _modelward_verify(kind, model, keys, ())
    assert ours.returncode == 1
    assert "extra (present, not signed, not ignored): ignore-me" in ours.stderr
    assert "pass --ignore-path ignore-me to leave them out of the bundle" in ours.stderr


def test_sigstore_fixture_verifies_offline_with_ignore_me_excluded(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    """model_signing cannot verify this one offline (it refreshes TUF metadata); ours can."""
    model = _writable_copy(shared_fixtures, "v1.1.0-sigstore", tmp_path)
    args = [
        str(MODELWARD),
        "bundle",
        "verify",
        str(model),
        "--signature",
        str(model / "model.sig"),
        "--identity",
        "stefanb@us.ibm.com",
        "--issuer",
        "https://sigstore.verify.ibm.com/oauth2",
        "--sigstore-trust-root",
        str(shared_fixtures / "sigstore" / "trusted-roots" / "production.json"),
        "--ignore-path",
        "ignore-me",
        "--json",
    ]
    ok = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["excluded"] == ["ignore-me"]
    (model / "signme-2").write_bytes(b"tampered")
    bad = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 1
    assert "mismatched (digest differs): signme-2" in bad.stderr
