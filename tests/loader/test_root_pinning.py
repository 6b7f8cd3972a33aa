"""A worker's pinned TUF root (docs/guides/serving-workers.md#pinning-the-root): another root
than the one its cache pinned is refused naming both, a first pin with the wrong root is not
kept, a cache pinned wrong is re-pinned with ``trust pin --replace``, and a JSON file that is
not a root is a usage error. Real registries on SQLite and PostgreSQL, driven through the CLI.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from securesystemslib.signer import CryptoSigner
from tuf.api.metadata import Metadata, Root
from tuf.api.serialization.json import JSONSerializer

from modelward.attest.keys import public_key_pem, save_private_key
from modelward.loader.tuf_resolve import metadata_dir
from tests.registry.conftest import (  # the fixtures, for this directory
    Registry,
    new_publisher,
    pg_cluster,
    push_new,
    registry,
)

__all__ = ["pg_cluster", "registry"]


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _other_root(path: Path) -> Path:
    """A well-formed, self-signed TUF root that is not the registry's."""
    signer = CryptoSigner.generate_ed25519()
    root = Root(expires=datetime.now(UTC) + timedelta(days=30))
    for role in ("root", "timestamp", "snapshot", "targets"):
        root.add_key(signer.public_key, role)
    metadata = Metadata(root)
    metadata.sign(signer)
    path.write_bytes(metadata.to_bytes(JSONSerializer()))
    return path


class World:
    """A repository whose ``dev`` alias its publisher signed; a reader worker; the registry's
    root saved as a worker would pin it; another, valid root."""

    def __init__(self, reg: Registry, tmp: Path) -> None:
        pub = new_publisher(reg)
        self.reg = reg
        self.worker = reg.actor("reader")
        self.repo = reg.repo(pub)
        self.digest = push_new(pub, self.repo, tmp)
        key = tmp / "pub.key"
        save_private_key(pub.key, key)
        _ok(
            reg.cli(
                "alias", "set", f"{self.repo}@dev", self.digest, "--key", str(key),
                token=pub.actor.token,
            )
        )  # fmt: skip
        self.root = tmp / "root.json"
        _ok(reg.cli("trust", "root", "--out", str(self.root), token=self.worker.token))
        self.other = _other_root(tmp / "other-root.json")
        self.pem = tmp / "publisher.pem"
        self.pem.write_bytes(public_key_pem(pub.key.public_key()))

    def pull(self, root: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.reg.cli(
            "pull", f"{self.repo}@dev", "--trust-root", str(root), "--public-key",
            str(self.pem), "--cache-dir", str(cache), *extra,
            token=self.worker.token,
        )  # fmt: skip


def test_pull_with_another_root_than_the_pinned_one_is_refused_naming_both(
    registry: Registry, tmp_path: Path
) -> None:
    world = World(registry, tmp_path)
    cache = tmp_path / "cache"
    assert world.digest in _ok(world.pull(world.root, cache)).stdout
    refused = world.pull(world.other, cache)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout == ""
    assert str(world.other) in refused.stderr  # the root given ...
    pinned = metadata_dir(cache, registry.url)
    assert str(pinned) in refused.stderr  # ... and the root the cache pinned
    assert "root v1" in refused.stderr
    assert (
        f"modelward trust pin --trust-root {world.other} --replace --cache-dir {cache}"
        in refused.stderr
    )
    assert "Traceback" not in refused.stderr
    # the same root again (the cache's own) still resolves
    assert world.digest in _ok(world.pull(world.root, cache)).stdout


@pytest.mark.sqlite_only
def test_a_first_pin_with_the_wrong_root_is_not_kept_and_says_so(
    registry: Registry, tmp_path: Path
) -> None:
    world = World(registry, tmp_path)
    cache = tmp_path / "cache"
    refused = world.pull(world.other, cache)
    assert refused.returncode == 1
    assert "nothing was pinned" in refused.stderr
    assert "is it this registry's root?" in refused.stderr
    assert "modelward trust root --out" in refused.stderr
    # the right root afterwards is not refused forever
    assert world.digest in _ok(world.pull(world.root, cache)).stdout


@pytest.mark.sqlite_only
def test_a_cache_pinned_with_the_wrong_root_is_re_pinned_with_trust_pin_replace(
    registry: Registry, tmp_path: Path
) -> None:
    world = World(registry, tmp_path)
    cache = tmp_path / "cache"
    # a cache an earlier version pinned with the wrong root (as python-tuf lays it out)
    stale = metadata_dir(cache, registry.url)
    (stale / "root_history").mkdir(parents=True)
    (stale / "root_history" / "1.root.json").write_bytes(world.other.read_bytes())
    (stale / "root.json").symlink_to(Path("root_history") / "1.root.json")
    refused = world.pull(world.root, cache)
    assert refused.returncode == 1
    repin = f"modelward trust pin --trust-root {world.root} --replace --cache-dir {cache}"
    assert repin in refused.stderr
    kept = registry.cli(
        "trust", "pin", "--trust-root", str(world.root), "--cache-dir", str(cache),
        token=world.worker.token,
    )  # fmt: skip
    assert kept.returncode == 1  # without --replace the earlier pin stays
    assert (stale / "root_history" / "1.root.json").read_bytes() == world.other.read_bytes()
    pinned = registry.cli(*repin.split()[1:], "--json", token=world.worker.token)
    answer = json.loads(_ok(pinned).stdout)
    assert answer["replaced"] is True
    assert answer["pinned_version"] == 1
    assert world.digest in _ok(world.pull(world.root, cache)).stdout
    # pinning it again changes nothing
    again = registry.cli(*repin.split()[1:], "--json", token=world.worker.token)
    assert json.loads(_ok(again).stdout)["unchanged"] is True


@pytest.mark.sqlite_only
@pytest.mark.parametrize("kind", ["not-a-root", "timestamp"])
def test_a_json_file_that_is_not_a_root_is_a_usage_error(
    registry: Registry, tmp_path: Path, kind: str
) -> None:
    world = World(registry, tmp_path)
    bad = tmp_path / f"{kind}.json"
    if kind == "timestamp":
        bad.write_bytes(registry.admin.tuf_file("timestamp.json"))
    else:
        bad.write_text(json.dumps({"hello": "world"}))
    pulled = world.pull(bad, tmp_path / "cache")
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    shown = registry.cli(
        "baseline", "show", f"{world.repo}@dev", "--trust-root", str(bad),
        "--worker-public-key", str(world.pem),
        token=world.worker.token, env=xdg,
    )  # fmt: skip
    pinned = registry.cli(
        "trust", "pin", "--trust-root", str(bad), token=world.worker.token, env=xdg
    )
    for result in (pulled, shown, pinned):
        assert result.returncode == 2, result.stdout + result.stderr
        assert str(bad) in result.stderr
        assert "Traceback" not in result.stderr
    said = "TUF timestamp metadata, not a root" if kind == "timestamp" else "not TUF root metadata"
    assert said in pulled.stderr
