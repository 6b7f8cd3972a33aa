"""``modelward bundle verify`` end to end: real keys, real signatures, a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from modelward.attest.dsse import sign_envelope
from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.attest.manifest import build_bundle
from modelward.attest.statement import PredicateType, make_statement
from tests.conftest import REPO_ROOT
from tests.inprocess import run_modelward

MODELWARD = str(REPO_ROOT / ".venv" / "bin" / "modelward")


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_modelward(["bundle", "verify", *map(str, args)], os.environ)


def _provenance() -> dict[str, object]:
    return {
        "buildDefinition": {
            "buildType": "https://modelward.dev/bundle-assembly/v1",
            "externalParameters": {"source": {"uri": "hf://example-org/tiny"}},
        },
        "runDetails": {"builder": {"id": "https://ci.example.com/builder"}},
    }


@pytest.fixture
def signed(tmp_path: Path) -> dict[str, Path]:
    """A small bundle, a provenance envelope over its digest, and the key files."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text('{"model_type": "llama"}\n')
    (bundle / "README.md").write_text("# tiny\n")
    digest = build_bundle(bundle).manifest.digest
    paths: dict[str, Path] = {"bundle": bundle}
    keys = {}
    for name, kind in (("alice", "ed25519"), ("bob", "ecdsa-p256"), ("mallory", "ed25519")):
        keys[name] = generate_private_key(kind)  # type: ignore[arg-type]
        paths[name] = tmp_path / f"{name}.pub"
        paths[name].write_bytes(public_key_pem(keys[name].public_key()))
    payload = make_statement("bundle", digest, PredicateType.PROVENANCE, _provenance())
    paths["sig"] = tmp_path / "provenance.dsse.json"
    paths["sig"].write_bytes(sign_envelope(payload, [keys["alice"], keys["bob"]]))
    paths["mallory_sig"] = tmp_path / "mallory.dsse.json"
    paths["mallory_sig"].write_bytes(sign_envelope(payload, [keys["mallory"]]))
    return paths


@pytest.mark.parametrize("key", ["alice", "bob"])
def test_round_trip_each_key_type(signed, key):
    result = _run(signed["bundle"], "--signature", signed["sig"], "--public-key", signed[key])
    assert result.returncode == 0, result.stderr
    assert f"verified: signed by {key}.pub" in result.stdout


def test_one_byte_changed_in_a_file_fails(signed):
    config = signed["bundle"] / "config.json"
    config.write_bytes(config.read_bytes().replace(b"llama", b"llamb"))
    result = _run(signed["bundle"], "--signature", signed["sig"], "--public-key", signed["alice"])
    assert result.returncode == 1
    assert "statement is not about bundle sha256:" in result.stderr


def test_one_byte_changed_in_the_signature_fails(signed):
    envelope = json.loads(signed["sig"].read_bytes())
    sig = envelope["signatures"][0]["sig"]
    envelope["signatures"][0]["sig"] = ("A" if sig[0] != "A" else "B") + sig[1:]
    envelope["signatures"] = envelope["signatures"][:1]  # only alice's, now broken
    signed["sig"].write_text(json.dumps(envelope))
    result = _run(signed["bundle"], "--signature", signed["sig"], "--public-key", signed["alice"])
    assert result.returncode == 1
    assert "attestation: rejected: provenance.dsse.json:" in result.stderr


def test_untrusted_signer_alone_does_not_verify(signed):
    result = _run(
        signed["bundle"], "--signature", signed["mallory_sig"], "--public-key", signed["alice"]
    )
    assert result.returncode == 1
    assert "mallory.dsse.json: ignored, no trusted signer" in result.stdout
    assert "0 of 1 required distinct signers" in result.stderr


def test_untrusted_but_valid_statement_is_ignored_not_denied(signed):
    result = _run(
        signed["bundle"], "--signature", signed["sig"], "--signature", signed["mallory_sig"],
        "--public-key", signed["alice"], "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["verified"] is True
    assert [i["signature"] for i in doc["ignored_signatures"]] == ["mallory.dsse.json"]
    assert doc["rejected"] == []


def test_policy_threshold_two_and_json(signed, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\nthreshold: 2\nsigners:\n  keys:\n"
        "    - {name: alice, path: alice.pub}\n    - {name: bob, path: bob.pub}\n"
        "builders: ['https://ci.example.com/*']\nsources: ['hf://example-org/*']\n"
    )
    result = _run(signed["bundle"], "--signature", signed["sig"], "--policy", policy, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["verified"] is True
    assert doc["bundle"].startswith("sha256:")
    assert sorted(s["name"] for s in doc["decision"]["signers"]) == ["alice", "bob"]
    assert doc["statements"][0]["predicate_type"] == PredicateType.PROVENANCE
    assert doc["statements"][0]["statement"]["predicate"]["runDetails"]["builder"]["id"]
    # mallory's envelope is by nobody the policy trusts: ignored, reported, never a denial.
    result = _run(
        signed["bundle"], "--signature", signed["sig"], "--signature", signed["mallory_sig"],
        "--policy", policy, "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["verified"] is True
    assert [i["signature"] for i in doc["ignored_signatures"]] == ["mallory.dsse.json"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "no trust given"),
        (["--policy", "p.yaml", "--public-key", "k.pem"], "--policy cannot be combined"),
        (["--identity", "me@example.com"], "--identity and --issuer go together"),
        (["--issuer", "https://issuer.example"], "--identity and --issuer go together"),
        (
            ["--public-key", "k.pem", "--sigstore-trust-root", "r.json"],
            "--sigstore-trust-root needs --identity",
        ),
        (["--public-key", "missing.pem"], "--public-key missing.pem: cannot read"),
    ],
)
def test_usage_errors_exit_2(signed, extra, message):
    result = _run(signed["bundle"], "--signature", signed["sig"], *extra)
    assert result.returncode == 2
    assert message in result.stderr


def _oms_fixture(shared_fixtures: Path, tmp_path: Path, kind: str) -> Path:
    """A writable copy of an OMS fixture model; ``ignore-me`` (not signed) left out."""
    model = tmp_path / kind
    shutil.copytree(shared_fixtures / "oms" / kind, model)
    model.chmod(0o755)
    for path in model.iterdir():
        path.chmod(0o644)
    (model / "ignore-me").unlink()
    return model


def test_oms_fixture_with_public_key(shared_fixtures, tmp_path):
    model = _oms_fixture(shared_fixtures, tmp_path, "v1.1.0-elliptic-key")
    key = shared_fixtures / "oms" / "keys" / "signing-key-pub.pem"
    args = ("--signature", model / "model.sig", "--public-key", key)
    result = _run(model, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "oms, https://model_signing/signature/v1.0" in result.stdout
    # A file added outside the signature is reported.
    (model / "ignore-me").write_bytes(b"")
    result = _run(model, *args)
    assert result.returncode == 1
    assert "extra (present, not signed, not ignored): ignore-me" in result.stderr
    # --ignore-path leaves it out of the bundle (as model_signing's --ignore-paths leaves it
    # out of the model): the bundle is signme-1 and signme-2, and the signature signs both.
    result = _run(model, *args, "--ignore-path", "ignore-me")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "excluded: ignore-me (--ignore-path: not in the bundle, not verified)" in result.stdout
    assert "17 bytes in 2 file(s)" in result.stdout
    (model / "ignore-me").unlink()
    # One byte changed in a signed file.
    (model / "signme-1").write_bytes(b"tampered!")
    result = _run(model, *args)
    assert result.returncode == 1
    assert "mismatched (digest differs): signme-1" in result.stderr


def test_oms_fixture_with_certificate_chain(shared_fixtures, tmp_path):
    model = _oms_fixture(shared_fixtures, tmp_path, "v1.1.0-certificate")
    keys = shared_fixtures / "oms" / "keys"
    result = _run(
        model, "--signature", model / "model.sig",
        "--certificate-chain", keys / "ca-cert.pem",
        "--certificate-chain", keys / "int-ca-cert.pem",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified: signed by ca-cert.pem" in result.stdout


def test_evil_pickle_in_the_bundle_is_refused_by_the_scan(signed):
    (signed["bundle"] / "evil.pkl").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    result = _run(signed["bundle"], "--signature", signed["sig"], "--public-key", signed["alice"])
    assert result.returncode == 1
    assert "evil.pkl" in result.stderr
    assert "scan.pickle" in result.stderr


def test_ignore_path_leaves_the_file_out_of_the_bundle(signed):
    """--ignore-path EXCLUDES: the verdict is about the bundle without the file, which is
    named as left out (never scanned, never part of what a worker loads)."""
    before = _modelward("bundle", "digest", signed["bundle"]).stdout.strip()
    (signed["bundle"] / "evil.pkl").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    result = _run(signed["bundle"], "--signature", signed["sig"], "--public-key",
                  signed["alice"], "--ignore-path", "evil.pkl")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"bundle {before}" in result.stdout
    assert "excluded: evil.pkl (--ignore-path: not in the bundle, not verified)" in result.stdout


@pytest.mark.parametrize("bad", ["../outside", "/etc/passwd", "."])
def test_ignore_path_outside_the_bundle_is_a_usage_error(signed, bad):
    result = _run(signed["bundle"], "--signature", signed["sig"], "--public-key",
                  signed["alice"], "--ignore-path", bad)  # fmt: skip
    assert result.returncode == 2
    assert f"--ignore-path: ignore path {bad!r} must be relative" in result.stderr


def test_sigstore_identity_flags_verify_offline_then_bind(shared_fixtures, signed):
    # The conformance bundle verifies offline under the identity, but its statement is
    # about a.txt, not this bundle: refused with that reason, not a signature failure.
    case = shared_fixtures / "sigstore" / "happy-path-intoto-in-dsse-v3" / "bundle.sigstore.json"
    result = _run(
        signed["bundle"], "--signature", case,
        "--identity", "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-"
        "beacon/.github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main",
        "--issuer", "https://token.actions.githubusercontent.com",
        "--sigstore-trust-root", shared_fixtures / "sigstore" / "trusted-roots" / "production.json",
    )  # fmt: skip
    assert result.returncode == 1
    assert "statement is not about bundle" in result.stderr
    assert "a.txt" in result.stderr


def _modelward(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_modelward(list(map(str, args)), os.environ)


def test_cli_sign_then_verify_dsse_and_oms(signed, tmp_path):
    bundle = signed["bundle"]
    for kind, key in (("ed25519", "ed.pem"), ("ecdsa-p256", "ec.pem")):
        result = _modelward("key", "generate", "--type", kind, "--out", tmp_path / key)
        assert result.returncode == 0, result.stderr
    out = tmp_path / "provenance.json"
    result = _modelward("bundle", "sign", bundle, "--key", tmp_path / "ed.pem", "--out", out)
    assert result.returncode == 0, result.stderr
    assert _run(bundle, "-s", out, "--public-key", tmp_path / "ed.pem.pub").returncode == 0
    sig = bundle / "model.sig"
    result = _modelward(
        "bundle", "sign", bundle, "--format", "oms", "--key", tmp_path / "ec.pem", "--out", sig
    )
    assert result.returncode == 0, result.stderr
    result = _run(bundle, "-s", sig, "-s", out, "--public-key", tmp_path / "ec.pem.pub",
                  "--public-key", tmp_path / "ed.pem.pub")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified: signed by" in result.stdout


def test_private_key_passed_as_public_key_says_so(signed, tmp_path):
    private = tmp_path / "alice.pem"
    assert _modelward("key", "generate", "--out", private).returncode == 0
    result = _run(signed["bundle"], "--signature", signed["sig"], "--public-key", private)
    assert result.returncode == 2
    assert f"--public-key {private}: this is a private key; pass its public half" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("bundle", "verify"),
        ("bundle", "sign"),
        ("bundle", "digest"),
        ("bundle", "manifest"),
        ("bundle", "scan"),
        ("bundle", "init"),
        ("key", "generate"),
    ],
)
def test_help_names_values_not_python_types(command):
    result = _modelward(*command, "--help")
    assert result.returncode == 0, result.stderr
    for python_type in ("<bool>", "<list[", "<str>", "<Path>"):
        assert python_type not in result.stdout, result.stdout


def test_verify_json_is_one_document_on_stdout(signed):
    """--json: stdout parses as one JSON document whether verified or not, and every
    message goes to stderr."""
    ok = _run(
        signed["bundle"], "--signature", signed["sig"], "--public-key", signed["alice"], "--json"
    )
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert set(doc) == {
        "bundle",
        "verified",
        "error",
        "statements",
        "ignored_signatures",
        "rejected",
        "excluded",
        "decision",
    }
    assert doc["verified"] is True
    assert doc["error"] is None
    assert doc["decision"]["allowed"] is True
    assert [s["kind"] for s in doc["statements"]] == ["dsse"]
    # not verified: still one document, the reasons on stderr too
    bad = _run(
        signed["bundle"],
        "--signature",
        signed["mallory_sig"],
        "--public-key",
        signed["alice"],
        "--json",
    )
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["verified"] is False
    assert doc["decision"]["allowed"] is False
    assert "NOT verified: threshold" in bad.stderr
    # the bundle cannot be built (a symlink): a document with the error, exit 1
    (signed["bundle"] / "link").symlink_to("README.md")
    broken = _run(
        signed["bundle"], "--signature", signed["sig"], "--public-key", signed["alice"], "--json"
    )
    assert broken.returncode == 1
    doc = json.loads(broken.stdout)
    assert doc["verified"] is False
    assert doc["bundle"] is None
    assert "tree.symlink" in doc["error"]
    assert "tree.symlink" in broken.stderr


def test_digest_json_is_one_document_on_stdout(signed):
    plain = _modelward("bundle", "digest", signed["bundle"])
    assert plain.returncode == 0
    result = _modelward("bundle", "digest", signed["bundle"], "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc == {
        "digest": plain.stdout.strip(),
        "files": 2,
        "bytes": sum(p.stat().st_size for p in signed["bundle"].iterdir()),
        "excluded": [],
    }
    (signed["bundle"] / "notes").mkdir()
    (signed["bundle"] / "notes" / "a.txt").write_text("left out")
    result = _modelward("bundle", "digest", signed["bundle"], "--json", "--ignore-path", "notes")
    assert json.loads(result.stdout)["digest"] == plain.stdout.strip()
    assert json.loads(result.stdout)["excluded"] == ["notes"]
