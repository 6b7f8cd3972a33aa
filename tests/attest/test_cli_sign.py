"""``modelward key generate`` and ``modelward bundle sign``, each as its own process (forked from
a parent that imported modelward already: tests/forkserver.py).

Each signature the CLI writes is verified in-process with attest.dsse and bound to the
digest attest.manifest computes independently.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from modelward.attest import dsse, keys
from modelward.attest.errors import SubjectMismatch
from modelward.attest.manifest import build_bundle
from modelward.attest.statement import PredicateType, require_subject
from modelward.attest.trust import TrustSet
from tests import forkserver

MODELWARD = Path(sys.executable).parent / "modelward"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SPEC = """\
version: 1
engine:
  name: vllm
  version: "0.32.0"
serving:
  dtype: float32
  max_model_len: 128
  seed: 7
probes:
  - "hello"
"""
# Variables that would let sigstore find an ambient OIDC credential.
_AMBIENT = ("GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_URL", "BUILDKITE", "GITLAB_CI", "CI")


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in _AMBIENT and k != "SIGSTORE_ID_TOKEN"}
    return forkserver.run([*map(str, args)], {**base, **(env or {})}, timeout=120)


def _trust_from_pub(pub: Path, name: str = "publisher") -> TrustSet:
    public = keys.load_public_key(pub.read_bytes(), source=str(pub))
    return TrustSet(keys=(keys.trusted_key(name, public),))


@pytest.fixture
def ed_key(tmp_path: Path) -> Path:
    out = tmp_path / "keys" / "signing.pem"
    out.parent.mkdir()
    result = run("key", "generate", "--out", out)
    assert result.returncode == 0, result.stderr
    return out


# --- key generate ------------------------------------------------------------------------


def test_key_generate_writes_0600_key_and_pub(tmp_path: Path) -> None:
    out = tmp_path / "k.pem"
    result = run("key", "generate", "--out", out)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    pub = tmp_path / "k.pem.pub"
    public = keys.load_public_key(pub.read_bytes())
    assert keys.key_kind(public) == "ed25519"
    assert keys.keyid(public) in result.stdout
    assert str(out) in result.stdout
    assert str(pub) in result.stdout
    # the private key matches the public key
    assert keys.keyid(keys.load_private_key(out).public_key()) == keys.keyid(public)


def test_key_generate_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "k.pem"
    assert run("key", "generate", "--out", out).returncode == 0
    before = out.read_bytes()
    result = run("key", "generate", "--out", out)
    assert result.returncode == 1
    assert "refusing to overwrite" in result.stderr
    assert out.read_bytes() == before
    forced = run("key", "generate", "--out", out, "--force", "--type", "ecdsa-p256")
    assert forced.returncode == 0, forced.stderr
    assert out.read_bytes() != before
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert keys.key_kind(keys.load_private_key(out)) == "ecdsa-p256"


def test_key_generate_encrypted_ecdsa_never_prints_the_passphrase(tmp_path: Path) -> None:
    out = tmp_path / "k.pem"
    secret = "hunter2-correct-horse"
    result = run(
        "key",
        "generate",
        "--out",
        out,
        "--type",
        "ecdsa-p256",
        "--passphrase-env",
        "MW_PW",
        env={"MW_PW": secret},
    )
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout + result.stderr
    assert b"ENCRYPTED" in out.read_bytes()
    assert keys.key_kind(keys.load_private_key(out, secret.encode())) == "ecdsa-p256"


def test_key_generate_with_unset_passphrase_variable_is_usage_error(tmp_path: Path) -> None:
    result = run("key", "generate", "--out", tmp_path / "k.pem", "--passphrase-env", "MW_NOPE")
    assert result.returncode == 2
    assert "MW_NOPE" in result.stderr
    assert not list(tmp_path.iterdir())


# --- bundle sign (DSSE) ------------------------------------------------------------------


def test_sign_then_verify_and_bind_to_the_bundle_digest(
    tiny_model: Path, ed_key: Path, tmp_path: Path
) -> None:
    (tiny_model / "modelward.yaml").write_text(SPEC)
    out = tmp_path / "provenance.dsse.json"
    result = run(
        "bundle",
        "sign",
        tiny_model,
        "--key",
        ed_key,
        "--out",
        out,
        "--builder-id",
        "https://ci.example.com/builders/release",
        "--source",
        "hf://acme/tiny-llama",
        "--source-revision",
        COMMIT,
    )
    assert result.returncode == 0, result.stderr
    digest = build_bundle(tiny_model).manifest.digest
    assert digest in result.stdout

    stmt = dsse.verify_envelope(out.read_bytes(), _trust_from_pub(Path(f"{ed_key}.pub")))
    require_subject(stmt, digest)
    assert stmt.predicate_type == PredicateType.PROVENANCE
    assert [s.name for s in stmt.signers] == ["publisher"]
    assert stmt.subjects[0].name == "model"
    predicate = stmt.statement["predicate"]
    assert predicate["runDetails"]["builder"]["id"] == "https://ci.example.com/builders/release"
    external = predicate["buildDefinition"]["externalParameters"]
    assert external["source"] == {"uri": "hf://acme/tiny-llama", "revision": COMMIT}
    assert external["serving"]["serving"]["dtype"] == "float32"
    assert external["serving"]["serving"]["seed"] == 7
    assert external["serving"]["engine"] == {"name": "vllm", "version": "0.32.0"}
    assert predicate["buildDefinition"]["resolvedDependencies"] == [
        {"uri": "hf://acme/tiny-llama", "digest": {"gitCommit": COMMIT}}
    ]

    # a one-byte change in a model file after signing: another bundle, the statement fails
    weights = tiny_model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    changed = build_bundle(tiny_model).manifest.digest
    assert changed != digest
    with pytest.raises(SubjectMismatch):
        require_subject(stmt, changed)


def test_sign_with_encrypted_ecdsa_key(tiny_model: Path, tmp_path: Path) -> None:
    key = tmp_path / "ec.pem"
    pw = {"MW_PW": "s3cret"}
    assert (
        run(
            "key",
            "generate",
            "--out",
            key,
            "--type",
            "ecdsa-p256",
            "--passphrase-env",
            "MW_PW",
            env=pw,
        ).returncode
        == 0
    )
    out = tiny_model / ".modelward" / "provenance.json"  # the one place inside the bundle
    result = run(
        "bundle",
        "sign",
        tiny_model,
        "--key",
        key,
        "--passphrase-env",
        "MW_PW",
        "--out",
        out,
        env=pw,
    )
    assert result.returncode == 0, result.stderr
    stmt = dsse.verify_envelope(out.read_bytes(), _trust_from_pub(tmp_path / "ec.pem.pub"))
    require_subject(stmt, build_bundle(tiny_model).manifest.digest)
    assert "source" not in stmt.statement["predicate"]["buildDefinition"]["externalParameters"]


def test_sign_with_wrong_passphrase_names_the_key_and_writes_nothing(
    tiny_model: Path, tmp_path: Path
) -> None:
    key = tmp_path / "ec.pem"
    assert (
        run(
            "key", "generate", "--out", key, "--passphrase-env", "MW_PW", env={"MW_PW": "right"}
        ).returncode
        == 0
    )
    out = tmp_path / "sig.json"
    result = run(
        "bundle",
        "sign",
        tiny_model,
        "--key",
        key,
        "--passphrase-env",
        "MW_PW",
        "--out",
        out,
        env={"MW_PW": "wrong"},
    )
    assert result.returncode == 2  # a key the command line names: input (docs/cli.md#exit-codes)
    assert "wrong passphrase" in result.stderr
    assert str(key) in result.stderr
    assert not out.exists()


def test_sign_refuses_output_inside_the_bundle(tiny_model: Path, ed_key: Path) -> None:
    before = build_bundle(tiny_model).manifest.digest
    out = tiny_model / "provenance.json"
    result = run("bundle", "sign", tiny_model, "--key", ed_key, "--out", out)
    assert result.returncode == 1
    assert "inside the bundle" in result.stderr
    assert not out.exists()
    assert build_bundle(tiny_model).manifest.digest == before


def test_sign_refuses_an_unpinned_source_revision(
    tiny_model: Path, ed_key: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sig.json"
    result = run(
        "bundle",
        "sign",
        tiny_model,
        "--key",
        ed_key,
        "--out",
        out,
        "--source",
        "hf://acme/tiny-llama",
        "--source-revision",
        "main",
    )
    assert result.returncode == 2
    assert "40-hex commit" in result.stderr
    assert not out.exists()


def test_sign_refuses_an_untrusted_tree(tiny_model: Path, ed_key: Path, tmp_path: Path) -> None:
    (tiny_model / "link").symlink_to(tiny_model / "config.json")
    out = tmp_path / "sig.json"
    result = run("bundle", "sign", tiny_model, "--key", ed_key, "--out", out)
    assert result.returncode == 1
    assert "tree.symlink" in result.stderr
    assert not out.exists()


def test_sign_without_key_is_usage_error(tiny_model: Path, tmp_path: Path) -> None:
    result = run("bundle", "sign", tiny_model, "--out", tmp_path / "s.json")
    assert result.returncode == 2
    assert "--key is required" in result.stderr


def test_sigstore_without_identity_token_fails_clearly(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.sigstore.json"
    result = run("bundle", "sign", tiny_model, "--sigstore", "--out", out)
    assert result.returncode == 1
    assert "needs an OIDC identity token" in result.stderr
    assert "SIGSTORE_ID_TOKEN" in result.stderr
    assert not out.exists()


# --- bundle sign --format oms ------------------------------------------------------------


def test_sign_oms_writes_model_sig_that_verifies(tiny_model: Path, tmp_path: Path) -> None:
    from modelward.attest.oms import verify_oms

    key = tmp_path / "ec.pem"
    assert run("key", "generate", "--out", key, "--type", "ecdsa-p256").returncode == 0
    before = build_bundle(tiny_model).manifest.digest
    out = tiny_model / "model.sig"
    result = run("bundle", "sign", tiny_model, "--format", "oms", "--key", key, "--out", out)
    assert result.returncode == 0, result.stderr
    stmt = verify_oms(out.read_bytes(), tiny_model, _trust_from_pub(tmp_path / "ec.pem.pub"))
    assert stmt.kind == "oms"
    assert [s.name for s in stmt.signers] == ["publisher"]
    # model.sig is ignored by the tree walk: signing did not change the bundle digest
    assert build_bundle(tiny_model).manifest.digest == before
    assert json.loads(out.read_bytes())


# --- nothing the scanner refuses is signed -------------------------------------------------


def _scan_lines(directory: Path) -> list[str]:
    """What `modelward bundle scan DIR` prints for each finding."""
    result = run("bundle", "scan", directory)
    assert result.returncode == 1, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if line]


@pytest.mark.parametrize("fmt", ["dsse", "oms"])
def test_sign_refuses_a_tree_the_scanner_refuses(
    tiny_model: Path, tmp_path: Path, fmt: str
) -> None:
    from tests.attest.corpus import canary_pickle

    canary = tmp_path / "canary"
    (tiny_model / "evil.pkl").write_bytes(canary_pickle(canary, 2))
    key = tmp_path / "signing.pem"
    kind = "ecdsa-p256" if fmt == "oms" else "ed25519"
    assert run("key", "generate", "--type", kind, "--out", key).returncode == 0
    out = tiny_model / "model.sig" if fmt == "oms" else tmp_path / "sig.json"
    result = run("bundle", "sign", tiny_model, "--format", fmt, "--key", key, "--out", out)
    assert result.returncode == 1
    scanner_says = _scan_lines(tiny_model)
    assert any(line.startswith("evil.pkl: scan.pickle:") for line in scanner_says)
    for line in scanner_says:  # the scanner's own words, every finding
        assert line in result.stderr
    assert f"refusing to sign {tiny_model}: the scanner refuses it" in result.stderr
    assert not out.exists()
    assert not canary.exists()


def test_sign_oms_leaves_an_ignored_path_out_of_the_scan_and_the_signature(
    tiny_model: Path, tmp_path: Path
) -> None:
    """--ignore-path leaves evil.pkl out of the bundle, so out of the scan too; the real
    model_signing CLI verifies the result with the same ignore path."""
    from tests.attest.corpus import canary_pickle

    (tiny_model / "evil.pkl").write_bytes(canary_pickle(tmp_path / "canary", 2))
    key = tmp_path / "ec.pem"
    assert run("key", "generate", "--type", "ecdsa-p256", "--out", key).returncode == 0
    out = tiny_model / "model.sig"
    result = run(
        "bundle",
        "sign",
        tiny_model,
        "--format",
        "oms",
        "--key",
        key,
        "--out",
        out,
        "--ignore-path",
        "evil.pkl",
    )
    assert result.returncode == 0, result.stderr
    names = json.loads(
        __import__("base64").b64decode(json.loads(out.read_bytes())["dsseEnvelope"]["payload"])
    )["predicate"]["resources"]
    assert "evil.pkl" not in {r["name"] for r in names}
    ms = subprocess.run(
        [
            str(MODELWARD.with_name("model_signing")),
            "verify",
            "key",
            "--signature",
            str(out),
            "--public_key",
            str(tmp_path / "ec.pem.pub"),
            "--ignore-paths",
            str(tiny_model / "evil.pkl"),
            str(tiny_model),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ms.returncode == 0, ms.stdout + ms.stderr


def test_sign_oms_with_an_ed25519_key_names_the_key_type_to_generate(
    tiny_model: Path, ed_key: Path
) -> None:
    out = tiny_model / "model.sig"
    result = run("bundle", "sign", tiny_model, "--format", "oms", "--key", ed_key, "--out", out)
    assert result.returncode == 2  # a key the command line names: input (docs/cli.md#exit-codes)
    assert f"{ed_key}: an Ed25519 key: OMS signing needs an elliptic-curve (P-256)" in result.stderr
    assert "modelward key generate --type ecdsa-p256" in result.stderr
    assert not out.exists()
