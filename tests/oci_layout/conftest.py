"""Two real registries (``modelward serve`` on loopback) and a bundle exported from the first.

``world`` (module-scoped): the source registry holds ``bundle`` (signed SLSA provenance as a
DSSE envelope, plus an OMS ``model.sig`` by the same key, under alias ``staging``) and
``bare`` (its one attestation retracted: no live attestation). The target registry knows
the same publisher key under another principal, so a bundle imported there passes the
default policy on its own evidence. ``layout`` is ``modelward bundle export`` of ``bundle``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.registry.conftest import (
    Actor,
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    start_registry,
    unique,
)


@dataclass
class World:
    source: Registry
    target: Registry
    pub: Publisher
    target_pub: Actor  # the same key, registered on the target registry
    pem: Path
    repo: str
    bundle: str  # digest, alias staging, DSSE + OMS attestations
    bare: str  # digest, no live attestation
    layout: Path  # exported `bundle`, tag staging
    tmp: Path
    hostile: str = ""  # digest of a bundle the hostile tests never let into the target
    hostile_layout: Path = Path()  # exported `hostile`, tag h

    def hostile_copy(self) -> Path:
        dest = self.tmp / unique("hostile")
        shutil.copytree(self.hostile_layout, dest, symlinks=True)
        return dest

    def target_repo(self) -> str:
        return self.target.repo(self.target_pub)

    def export(self, ref: str, dest: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.source.cli(
            "bundle", "export", ref, "--oci-layout", str(dest), *extra, token=self.pub.actor.token
        )

    def import_(self, layout: Path, repo: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.target.cli(
            "bundle", "import", str(layout), repo, *extra, token=self.target_pub.token
        )

    def copy_layout(self, name: str | None = None) -> Path:
        dest = self.tmp / (name or unique("layout"))
        shutil.copytree(self.layout, dest, symlinks=True)
        return dest


def _oms_signature(source: Registry, root: Path, key_file: Path, out: Path) -> bytes:
    source.cli(
        "bundle",
        "sign",
        str(root),
        "--format",
        "oms",
        "--key",
        str(key_file),
        "--out",
        str(out),
        check=True,
    )
    return out.read_bytes()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key

    base = tmp_path_factory.mktemp("oci")
    source = start_registry("sqlite", base / "source", None)
    target = start_registry("sqlite", base / "target", None)
    try:
        pub = new_publisher(source)
        pem = save_private_key(pub.key, base / "publisher.key")
        oms_key = generate_private_key("ecdsa-p256")  # model_signing verifies P-256 only
        oms_pem = public_key_pem(oms_key.public_key()).decode()
        pub.actor.client.register_key(oms_pem)
        save_private_key(oms_key, base / "oms.key")
        target_pub = target.actor("publisher")
        target_pub.client.register_key(public_key_pem(pub.key.public_key()).decode())
        target_pub.client.register_key(oms_pem)
        repo = source.repo(pub)
        root = make_bundle_dir(base / "bundle")
        bundle = pub.actor.client.push(root, repo, sign=pub.sign, alias="staging").digest
        oms = _oms_signature(source, root, base / "oms.key", base / "model.sig")
        pub.actor.client.add_attestation(repo, bundle, oms)
        bare = pub.actor.client.push(make_bundle_dir(base / "bare"), repo, sign=pub.sign).digest
        for item in pub.actor.client.list_attestations(repo, bare):
            pub.actor.client.retract_attestation(repo, bare, item["id"], "exported bare")
        world = World(
            source, target, pub, target_pub, pem, repo, bundle, bare, base / "layout", base
        )
        done = world.export(f"{repo}@staging", world.layout)
        assert done.returncode == 0, done.stderr
        world.hostile = pub.actor.client.push(
            make_bundle_dir(base / "hostile"), repo, sign=pub.sign
        ).digest
        world.hostile_layout = base / "hostile-layout"
        done = world.export(f"{repo}@{world.hostile}", world.hostile_layout, "--tag", "h")
        assert done.returncode == 0, done.stderr
        yield world
    finally:
        for reg in (source, target):
            reg.close()
            reg.server.stop()
