"""oras pulls a bundle into a model directory (files named by the layers' title annotation,
docs/bundle-format.md#layers) that ``modelward bundle verify`` accepts; a directory that is
not the signed bundle is refused naming the files that differ."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from tests.oci.conftest import host_of, new_bundle, new_publisher, oras_client
from tests.registry.conftest import MODELWARD, Publisher, Registry

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: one database is enough here


def _pulled(mw: Registry, tmp: Path) -> tuple[Publisher, Path, Path, Path, str]:
    """A signed bundle pushed through /v1, pulled with oras's own ``pull`` into a directory:
    (publisher, directory, signature file, public key file, bundle digest)."""
    from modelward.attest.keys import public_key_pem

    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign).digest
    out = tmp / "pulled"
    client = oras_client(mw, pub.name, pub.actor.token)
    files = client.pull(target=f"{host_of(mw)}/{repo}@{digest}", outdir=str(out))
    assert sorted(Path(f).name for f in files) == sorted(p.name for p in bundle.root.iterdir())
    for name in ("config.json", "model.safetensors"):
        (out / name).chmod(0o644)
    signature = tmp / "bundle.sig"
    signature.write_bytes(bundle.signature)
    key = tmp / "pub.pem"
    key.write_bytes(public_key_pem(pub.key.public_key()))
    manifest = tmp / "manifest.json"
    answer = httpx.get(
        f"{mw.url}/v2/{repo}/manifests/{digest}",
        headers={"Authorization": f"Bearer {pub.actor.token}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert "sha256:" + hashlib.sha256(answer.content).hexdigest() == digest
    manifest.write_bytes(answer.content)
    return pub, out, signature, key, digest


def _verify(directory: Path, signature: Path, key: Path, *extra: str) -> tuple[int, str]:
    import subprocess

    args = ["verify", str(directory), "-s", str(signature), "--public-key", str(key), *extra]
    result = subprocess.run(
        [MODELWARD, "bundle", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def test_an_oras_pulled_directory_verifies(mw: Registry, tmp_path: Path) -> None:
    _pub, out, signature, key, digest = _pulled(mw, tmp_path)
    assert not [p.name for p in out.iterdir() if p.name.startswith("sha256:")]
    code, output = _verify(out, signature, key)
    assert code == 0, output
    assert f"bundle {digest}" in output
    code, output = _verify(out, signature, key, "--manifest", str(tmp_path / "manifest.json"))
    assert code == 0, output


def test_a_tampered_pull_is_refused_naming_the_files_that_differ(
    mw: Registry, tmp_path: Path
) -> None:
    _pub, out, signature, key, digest = _pulled(mw, tmp_path)
    (out / "model.safetensors").write_bytes(b"not the weights")
    (out / "extra.json").write_text("{}")
    (out / "config.json").unlink()
    code, output = _verify(out, signature, key)
    assert code == 1, output
    assert "--manifest" in output  # the hint: how to see which files differ
    code, output = _verify(out, signature, key, "--manifest", str(tmp_path / "manifest.json"))
    assert code == 1, output
    assert f"is not the bundle {digest}" in output
    assert "removed config.json, added extra.json, changed model.safetensors" in output
