"""What the publishers guide says about OMS-only pushes, run against a real registry.

The default policy requires SLSA provenance: a push carrying only an OMS ``model.sig`` is
refused, naming the missing predicate type. A repository whose policy requires the OMS
predicate type (or sets ``required_predicate_types: []``) accepts the same push.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry.conftest import Registry, make_bundle_dir, start_registry

OMS_V1 = "https://model_signing/signature/v1.0"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    reg = start_registry("sqlite", tmp_path_factory.mktemp("reg-oms"), None)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


@pytest.fixture(scope="module")
def oms_signed(
    registry: Registry, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Path]:
    """A publisher with a registered P-256 key, and a bundle with its model.sig, both made
    with the CLI: (publisher token, bundle dir, model.sig)."""
    tmp = tmp_path_factory.mktemp("oms-pub")
    actor = registry.actor("publisher")
    key = tmp / "ec.pem"
    registry.cli("key", "generate", "--type", "ecdsa-p256", "--out", str(key), check=True)
    registry.cli("key", "register", str(key.with_name("ec.pem.pub")), token=actor.token, check=True)
    root = make_bundle_dir(tmp / "bundle")
    sig = root / "model.sig"
    registry.cli(
        "bundle",
        "sign",
        str(root),
        "--format",
        "oms",
        "--key",
        str(key),
        "--out",
        str(sig),
        check=True,
    )
    return actor.token, root, sig


def _push(
    registry: Registry, token: str, root: Path, sig: Path, policy: str | None
) -> subprocess.CompletedProcess[str]:
    """``modelward push DIR REPO --attestation model.sig`` to a new repository."""
    name = registry.repo(policy_yaml=policy)
    publisher = next(a.name for a in registry._actors if a.token == token)
    registry.admin.add_publisher(name, publisher)
    return registry.cli("push", str(root), name, "--attestation", str(sig), token=token)


def test_default_policy_refuses_an_oms_only_push(
    registry: Registry, oms_signed: tuple[str, Path, Path]
) -> None:
    token, root, sig = oms_signed
    result = _push(registry, token, root, sig, None)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "https://slsa.dev/provenance/v1" in result.stderr


@pytest.mark.parametrize("required", [f"[{OMS_V1}]", "[]"])
def test_policy_requiring_the_oms_type_accepts_it(
    registry: Registry, oms_signed: tuple[str, Path, Path], required: str
) -> None:
    token, root, sig = oms_signed
    policy = (
        f"version: 1\ntrust_registered_signers: true\nrequired_predicate_types: {required}\n"
        "aliases:\n  - pattern: '*'\n    roles: [publisher]\n"
    )
    result = _push(registry, token, root, sig, policy)
    assert result.returncode == 0, result.stdout + result.stderr


def test_push_ignore_path_leaves_the_ignored_paths_out_of_the_pushed_bundle(
    registry: Registry, oms_signed: tuple[str, Path, Path], tmp_path: Path
) -> None:
    """``push --ignore-path`` pushes the bundle ``bundle sign --ignore-path`` signed: the
    ignored directory (here a file the scanner would refuse) is not in the manifest."""
    token, _, _ = oms_signed
    root = make_bundle_dir(tmp_path / "bundle")
    (root / "ignore-me").mkdir()
    (root / "ignore-me" / "notes.pkl").write_bytes(b"\x80\x04not a model, never loaded")
    key = tmp_path / "ec.pem"
    registry.cli("key", "generate", "--type", "ecdsa-p256", "--out", str(key), check=True)
    registry.cli("key", "register", str(key.with_name("ec.pem.pub")), token=token, check=True)
    sig = tmp_path / "model.sig"
    registry.cli(
        "bundle",
        "sign",
        str(root),
        "--format",
        "oms",
        "--key",
        str(key),
        "--out",
        str(sig),
        "--ignore-path",
        "ignore-me",
        check=True,
    )
    policy = (
        f"version: 1\ntrust_registered_signers: true\nrequired_predicate_types: [{OMS_V1}]\n"
        "aliases:\n  - pattern: '*'\n    roles: [publisher]\n"
    )
    name = registry.repo(policy_yaml=policy)
    publisher = next(a.name for a in registry._actors if a.token == token)
    registry.admin.add_publisher(name, publisher)
    refused = registry.cli("push", str(root), name, "--attestation", str(sig), token=token)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "notes.pkl" in refused.stderr
    pushed = registry.cli(
        "push",
        str(root),
        name,
        "--attestation",
        str(sig),
        "--ignore-path",
        "ignore-me",
        "--json",
        token=token,
    )
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    digest = json.loads(pushed.stdout)["digest"]
    shown = registry.cli("bundle", "show", f"{name}@{digest}", "--json", token=token, check=True)
    assert "ignore-me" not in shown.stdout
    assert "model.safetensors" in shown.stdout or "config.json" in shown.stdout
