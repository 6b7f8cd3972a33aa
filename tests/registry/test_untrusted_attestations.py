"""An unknown signer is not tampering: statements a worker does not trust are ignored.

Before the single verifier, one statement validly signed by a key the worker did not trust
made ``pull`` fail fleet-wide ("no valid signature by a trusted key"), and nothing could
remove it. Each test attaches such a statement through the real registry and pulls with a
worker that trusts only the publisher's first key.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import forkserver
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    unique,
)


def _pull(
    registry: Registry,
    token: str,
    ref: str,
    pem: Path,
    cache: Path,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MODELWARD_URL": registry.url, "MODELWARD_TOKEN": token}
    return forkserver.run(
        ["pull", ref, "--unsigned-aliases", "--public-key", str(pem), "--cache-dir", str(cache)],
        env,
        timeout=120,
    )


def _pem(pub: Publisher, path: Path) -> Path:
    from modelward.attest.keys import public_key_pem

    path.write_bytes(public_key_pem(pub.key.public_key()))
    return path


def _push(pub: Publisher, repo: str, tmp: Path) -> tuple[Path, str]:
    root = make_bundle_dir(tmp / unique("b"))
    return root, pub.actor.client.push(root, repo, sign=pub.sign, alias="dev").digest


def test_statement_signed_by_a_key_the_worker_does_not_trust_leaves_pull_working(
    registry: Registry, tmp_path: Path
) -> None:
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.keys import generate_private_key, public_key_pem
    from modelward.attest.statement import PredicateType, make_statement

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    _, digest = _push(pub, repo, tmp_path)
    # A reviewer with a registered key attaches a validly signed evaluation statement.
    reviewer = registry.actor("reviewer")
    reviewer_key = generate_private_key()
    registry.admin.register_key(
        public_key_pem(reviewer_key.public_key()).decode(), principal=reviewer.name
    )
    evaluation = sign_envelope(
        make_statement(repo, digest, PredicateType.EVALUATION, {"suite": "smoke"}),
        [reviewer_key],
    )
    reviewer.client.add_attestation(repo, digest, evaluation)
    # A worker that trusts only the publisher ignores it, and the pull works.
    worker = registry.actor("reader")
    result = _pull(
        registry, worker.token, f"{repo}@dev", _pem(pub, tmp_path / "pub.pem"), tmp_path / "cache"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == digest
    assert "ignored: " in result.stderr  # reported, never a reason to refuse


def test_publisher_second_key_oms_signature_leaves_pull_working(
    registry: Registry, tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from modelward.attest.keys import public_key_pem
    from modelward.attest.oms import sign_oms

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root, digest = _push(pub, repo, tmp_path)
    # The publisher signs an OMS model.sig with a second (P-256) key, registered too.
    second = ec.generate_private_key(ec.SECP256R1())
    key_file = tmp_path / "second.key"
    key_file.write_bytes(
        second.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pub.actor.client.register_key(public_key_pem(second.public_key()).decode())
    pub.actor.client.add_attestation(repo, digest, sign_oms(root, key_file))
    # A worker that trusts only her first key still pulls.
    worker = registry.actor("reader")
    result = _pull(
        registry, worker.token, f"{repo}@dev", _pem(pub, tmp_path / "first.pem"), tmp_path / "cache"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == digest
    assert "ignored: " in result.stderr  # reported, never a reason to refuse


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_push_reports_each_ignored_attestation_with_its_reason(
    registry: Registry, tmp_path: Path
) -> None:
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.keys import generate_private_key
    from modelward.attest.manifest import build_bundle
    from modelward.attest.statement import PredicateType, make_statement

    pub = new_publisher(registry)
    repo = registry.repo(pub)
    root = make_bundle_dir(tmp_path / "b")
    digest = build_bundle(root).manifest.digest
    signed = tmp_path / "signed.json"
    signed.write_bytes(pub.sign_digest(digest))
    stranger = tmp_path / "stranger.json"
    stranger.write_bytes(
        sign_envelope(
            make_statement("bundle", digest, PredicateType.PROVENANCE, {}), [generate_private_key()]
        )
    )
    out = registry.cli(
        "push",
        str(root),
        repo,
        "--attestation",
        str(signed),
        "--attestation",
        str(stranger),
        token=pub.actor.token,
    )
    assert out.returncode == 0, out.stderr
    assert (
        f"warning: attestation {stranger} not recorded: no registered or policy signer"
        in out.stderr
    )
    assert str(signed) not in out.stderr
    kept = pub.actor.client.list_attestations(repo, digest)
    assert len(kept) == 1
