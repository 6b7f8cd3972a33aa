"""One verdict: the same bundle and the same trust give the same answer through every door.

``bundle verify`` (a directory), ``push`` (the registry, its repository policy set to the
policy the trust flags mean), ``pull`` and ``boot`` (a worker against a registry stand-in that
serves exactly these attestations: the worker never takes the registry's word) all decide
with attest.verifier. Each case is an attack or its absence, named after it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.loader.hostile_registry import HostileRegistry, serve_dir
from tests.registry.conftest import (
    MODELWARD,
    Registry,
    make_bundle_dir,
    new_publisher,
    provenance_predicate,
    start_registry,
    unique,
)

pytestmark = pytest.mark.slow

DOORS = ["bundle-verify", "push", "pull", "boot"]


def _statement(digest: str, predicate_type: str | None = None) -> bytes:
    from modelward.attest.statement import PredicateType, make_statement

    return make_statement(
        "bundle", digest, predicate_type or PredicateType.PROVENANCE, provenance_predicate()
    )


def _signed(key: Any, digest: str) -> bytes:
    from modelward.attest.dsse import sign_envelope

    return sign_envelope(_statement(digest), [key])


def _bad_signature_claiming(key: Any, digest: str) -> bytes:
    """An envelope whose keyid hint names ``key`` and whose signature is garbage."""
    import base64

    doc = json.loads(_signed(key, digest))
    sig = bytearray(base64.b64decode(doc["signatures"][0]["sig"]))
    sig[5] ^= 0xFF
    doc["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    return json.dumps(doc).encode()


@dataclass(frozen=True)
class Case:
    allowed: bool
    attestations: Callable[[Any, Any, str], list[bytes]]  # (publisher key, mallory key, digest)
    reason: str = ""  # what every door says when it denies


CASES = {
    "signed_by_trusted_key": Case(True, lambda pub, mal, d: [_signed(pub, d)]),
    "untrusted_but_valid_statement_ignored": Case(
        True, lambda pub, mal, d: [_signed(pub, d), _signed(mal, d)]
    ),
    "only_an_untrusted_signer": Case(
        False, lambda pub, mal, d: [_signed(mal, d)], "0 of 1 required distinct signers"
    ),
    "trusted_keyid_with_a_bad_signature_denied": Case(
        False,
        lambda pub, mal, d: [_signed(pub, d), _bad_signature_claiming(pub, d)],
        "bad signature by a trusted key",
    ),
    "statement_for_another_digest_denied": Case(
        False,
        lambda pub, mal, d: [_signed(pub, d), _signed(pub, "sha256:" + "ab" * 32)],
        "statement is not about bundle",
    ),
}


@dataclass
class World:
    base: Path
    reg: Registry
    hostile: HostileRegistry
    publisher: Any
    mallory: Any
    publisher_pem: Path
    repo: str

    def env(self, url: str, token: str) -> dict[str, str]:
        return {
            **os.environ,
            "MODELWARD_URL": url,
            "MODELWARD_TOKEN": token,
            "VLLM_CPU_KVCACHE_SPACE": "1",
        }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from modelward.attest.keys import generate_private_key, public_key_pem

    base = tmp_path_factory.mktemp("one-verdict")
    reg = start_registry("sqlite", base / "registry", None)
    publisher = new_publisher(reg)
    pem = base / "publisher.pub"
    pem.write_bytes(public_key_pem(publisher.key.public_key()))
    # The repository's policy is the one `--public-key publisher.pub` means (docs/policy.md).
    policy = (
        "version: 1\nrequired_predicate_types: []\nsigners:\n  keys:\n"
        "    - name: publisher.pub\n      pem: |\n"
        + "".join(f"        {line}\n" for line in pem.read_text().splitlines())
    )
    repo = reg.repo(publisher, policy_yaml=policy)
    hostile = HostileRegistry()
    hostile.start()
    try:
        yield World(base, reg, hostile, publisher, generate_private_key(), pem, repo)
    finally:
        hostile.stop()
        reg.close()
        reg.server.stop()


def _door(world: World, door: str, name: str, case: Case) -> subprocess.CompletedProcess[str]:
    from modelward.attest.manifest import build_bundle

    root = make_bundle_dir(world.base / unique(name))
    digest = build_bundle(root).manifest.digest
    attestations = case.attestations(world.publisher.key, world.mallory, digest)
    files = []
    for i, data in enumerate(attestations):
        path = world.base / f"{unique('att')}-{i}.json"
        path.write_bytes(data)
        files.append(path)
    trust = ["--public-key", str(world.publisher_pem)]
    if door == "bundle-verify":
        sigs = [arg for f in files for arg in ("--signature", str(f))]
        argv = ["bundle", "verify", str(root), *sigs, *trust]
        env = os.environ.copy()
    elif door == "push":
        atts = [arg for f in files for arg in ("--attestation", str(f))]
        argv = ["push", str(root), world.repo, *atts]
        env = world.env(world.reg.url, world.publisher.actor.token)
    else:
        repo = f"acme/{unique('m')}"
        world.hostile.add(serve_dir(root, repo, lambda built: attestations))
        cache = ["--cache-dir", str(world.base / unique("cache"))]
        # the hostile registry publishes no TUF metadata: its word names the bundle
        argv = [door, f"{repo}@prod", "--unsigned-aliases", *trust, *cache]
        env = world.env(world.hostile.url, "worker-token")
    return subprocess.run(
        [MODELWARD, *argv], capture_output=True, text=True, env=env, timeout=300, check=False
    )


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_verdict_through_every_door(world: World, name: str, door: str) -> None:
    case = CASES[name]
    result = _door(world, door, name, case)
    out = result.stdout + result.stderr
    if door == "boot" and case.allowed:
        # Verified, then refused for the next reason: this bundle pins no serving config.
        assert "has no modelward.yaml" in out, out
        return
    if case.allowed:
        assert result.returncode == 0, out
    else:
        assert result.returncode == 1, out
        assert case.reason in out, out
