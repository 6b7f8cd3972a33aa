"""``modelward trust``: the ceremony that takes the root and targets keys offline, a worker
pinned to the old root following the rotation, targets signed offline, the migration of
aliases recorded unsigned, and aliases the registry's online key signs. Real registries on
SQLite and PostgreSQL, driven through the CLI."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tuf.api.metadata import Metadata, Timestamp

from modelward.attest.keys import generate_private_key, save_private_key
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    push_new,
    start_registry,
)

ONLINE_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, admin], protected: true, approvals: 1}\n"
    "  - {pattern: 'dev-*', roles: [publisher, admin], online: true}\n"
    "  - {pattern: '*', roles: [publisher, admin]}\n"
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    """A registry of its own: these tests replace its root (the key ceremony runs on both
    databases; the rest takes conftest's SQLite ``fresh_registry``)."""
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    reg = start_registry(request.param, tmp_path / "reg", pg)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


def _key(path: Path) -> Path:
    save_private_key(generate_private_key(), path)
    return path


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _pull(
    reg: Registry, token: str, ref: str, root: Path, pem: Path, cache: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return reg.cli(
        "pull",
        ref,
        "--trust-root",
        str(root),
        "--public-key",
        str(pem),
        "--cache-dir",
        str(cache),
        *extra,
        token=token,
    )


def _pem(pub: Publisher, tmp: Path) -> Path:
    from modelward.attest.keys import public_key_pem

    path = tmp / f"{pub.name}.pem"
    path.write_bytes(public_key_pem(pub.key.public_key()))
    return path


@dataclass(frozen=True)
class SignedDev:
    """A repository whose ``dev`` the publisher signed, and a worker that pinned root v1 and
    resolved it once (its cache is ``warm``)."""

    pub: Publisher
    worker_token: str
    repo: str
    digest: str
    pub_key: Path
    root: Path
    pem: Path


def _signed_dev(reg: Registry, tmp: Path) -> SignedDev:
    pub = new_publisher(reg)
    worker = reg.actor("reader")
    repo = reg.repo(pub)
    digest = push_new(pub, repo, tmp)
    pub_key = tmp / "pub.key"
    save_private_key(pub.key, pub_key)
    _ok(
        reg.cli("alias", "set", f"{repo}@dev", digest, "--key", str(pub_key), token=pub.actor.token)
    )
    root = tmp / "root-v1.json"
    _ok(reg.cli("trust", "root", "--out", str(root), token=worker.token))
    pem = _pem(pub, tmp)
    assert digest in _ok(_pull(reg, worker.token, f"{repo}@dev", root, pem, tmp / "warm")).stdout
    return SignedDev(pub, worker.token, repo, digest, pub_key, root, pem)


def test_trust_init_takes_root_and_targets_offline_and_old_workers_follow(
    fresh: Registry, tmp_path: Path
) -> None:
    dev = _signed_dev(fresh, tmp_path)
    status = json.loads(_ok(fresh.cli("trust", "status", "--json")).stdout)
    assert status["embedded"] is True
    assert set(status["online_keys"]) >= {"root", "targets", "snapshot", "timestamp"}

    roots = [_key(tmp_path / f"root{i}.key") for i in (1, 2)]
    targets = _key(tmp_path / "targets.key")
    init = _ok(
        fresh.cli(
            "trust",
            "init",
            "--root-key",
            str(roots[0]),
            "--root-key",
            str(roots[1]),
            "--root-threshold",
            "2",
            "--targets-key",
            str(targets),
            "--json",
        )
    )
    assert json.loads(init.stdout)["version"] == 2
    status = json.loads(_ok(fresh.cli("trust", "status", "--json")).stdout)
    assert status["embedded"] is False
    assert {"root", "targets"}.isdisjoint(status["online_keys"])  # deleted from the registry
    again = fresh.cli("trust", "init", "--root-key", str(roots[0]))
    assert again.returncode == 1
    assert "root key is already offline: `trust init` ran before" in again.stderr
    assert "trust rotate --old-root-key" in again.stderr
    # a worker that saw v1, and one that only has v1 pinned, both follow to v2
    for cache in ("warm", "cold"):
        pulled = _pull(
            fresh, dev.worker_token, f"{dev.repo}@dev", dev.root, dev.pem, tmp_path / cache
        )
        assert dev.digest in _ok(pulled).stdout

    # delegations change (a new repository): the admins sign the new targets offline
    repo2 = fresh.repo(dev.pub)
    d2 = push_new(dev.pub, repo2, tmp_path)
    moved = json.loads(
        _ok(
            fresh.cli("alias", "set", f"{repo2}@dev", d2, "--json", token=dev.pub.actor.token)
        ).stdout
    )
    assert moved["proposal"] is None  # no role is delegated repo2's aliases yet
    pending = json.loads(_ok(fresh.cli("trust", "pending", "--json")).stdout)
    proposal = next(p for p in pending if p["role"] == "targets")
    unconfirmed = fresh.cli("trust", "sign", str(proposal["id"]), "--key", str(targets))
    assert unconfirmed.returncode == 2
    assert "sign with --yes" in unconfirmed.stderr
    unaccepted = fresh.cli("trust", "sign", str(proposal["id"]), "--key", str(targets), "--yes")
    assert unaccepted.returncode == 1
    assert f"role {repo2.replace('/', ':')}@*: role added" in unaccepted.stderr
    assert "--accept-signer-changes" in unaccepted.stderr
    accept = ("--yes", "--accept-signer-changes")
    wrong = fresh.cli("trust", "sign", str(proposal["id"]), "--key", str(roots[0]), *accept)
    assert wrong.returncode == 1
    assert "is not one of the keys role targets is delegated to" in wrong.stderr
    signed = json.loads(
        _ok(
            fresh.cli(
                "trust", "sign", str(proposal["id"]), "--key", str(targets), *accept, "--json"
            )
        ).stdout
    )
    assert signed["state"] == "published"
    # the unsigned move is adopted: the migration step proposes it, the publisher signs
    adopted = json.loads(_ok(fresh.cli("trust", "adopt", "--json")).stdout)
    mine = next(p for p in adopted if p["role"].startswith(repo2.replace("/", ":")))
    assert mine["target"] == "adopt"
    _ok(
        fresh.cli(
            "trust",
            "sign",
            str(mine["id"]),
            "--key",
            str(dev.pub_key),
            "--yes",
            token=dev.pub.actor.token,
        )
    )
    assert (
        d2
        in _ok(
            _pull(fresh, dev.worker_token, f"{repo2}@dev", dev.root, dev.pem, tmp_path / "cold")
        ).stdout
    )


def test_a_rotation_not_signed_by_the_old_roots_threshold_is_refused(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    roots = [_key(tmp_path / f"root{i}.key") for i in (1, 2)]
    _ok(
        fresh_registry.cli(
            "trust",
            "init",
            "--root-key",
            str(roots[0]),
            "--root-key",
            str(roots[1]),
            "--root-threshold",
            "2",
        )
    )
    newer = _key(tmp_path / "root3.key")
    # only one of the two current root keys signs: below the old root's threshold
    refused = fresh_registry.cli(
        "trust", "rotate", "--old-root-key", str(roots[0]), "--root-key", str(newer)
    )
    assert refused.returncode == 1
    assert "root version 3 refused" in refused.stderr
    _ok(
        fresh_registry.cli(
            "trust",
            "rotate",
            "--old-root-key",
            str(roots[0]),
            "--old-root-key",
            str(roots[1]),
            "--root-key",
            str(newer),
        )
    )
    status = json.loads(_ok(fresh_registry.cli("trust", "status", "--json")).stdout)
    assert next(r for r in status["roles"] if r["role"] == "root")["version"] == 3


def test_online_keys_rotate_and_a_worker_with_the_first_root_follows(
    fresh: Registry, tmp_path: Path
) -> None:
    dev = _signed_dev(fresh, tmp_path)
    before = Metadata[Timestamp].from_bytes(fresh.admin.tuf_file("timestamp.json"))
    root = _key(tmp_path / "root.key")
    _ok(fresh.cli("trust", "init", "--root-key", str(root)))
    rotated = json.loads(
        _ok(
            fresh.cli(
                "trust",
                "rotate",
                "--old-root-key",
                str(root),
                "--root-key",
                str(root),
                "--online",
                "--json",
            )
        ).stdout
    )
    assert rotated["version"] == 3
    assert sorted(rotated["rotated"]) == ["snapshot", "timestamp"]
    after = Metadata[Timestamp].from_bytes(fresh.admin.tuf_file("timestamp.json"))
    assert set(after.signatures).isdisjoint(before.signatures)  # signed by the new key
    for cache in ("warm", "cold"):
        pulled = _pull(
            fresh, dev.worker_token, f"{dev.repo}@dev", dev.root, dev.pem, tmp_path / cache
        )
        assert dev.digest in _ok(pulled).stdout


def test_online_aliases_are_accepted_only_where_the_worker_says(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(fresh_registry)
    worker = fresh_registry.actor("reader")
    repo = fresh_registry.repo(pub, policy_yaml=ONLINE_POLICY)
    digest = push_new(pub, repo, tmp_path)
    moved = json.loads(
        _ok(
            fresh_registry.cli(
                "alias", "set", f"{repo}@dev-1", digest, "--json", token=pub.actor.token
            )
        ).stdout
    )
    assert moved["signed"] is True  # the registry's online key signed it, no publisher key
    root = tmp_path / "root.json"
    _ok(fresh_registry.cli("trust", "root", "--out", str(root), token=worker.token))
    pem = _pem(pub, tmp_path)
    refused = _pull(fresh_registry, worker.token, f"{repo}@dev-1", root, pem, tmp_path / "c")
    assert refused.returncode == 1
    assert "only the registry's online key signed this alias" in refused.stderr
    pulled = _pull(
        fresh_registry,
        worker.token,
        f"{repo}@dev-1",
        root,
        pem,
        tmp_path / "c",
        "--online-alias",
        "dev-*",
    )
    assert digest in _ok(pulled).stdout
    # the worker policy says the same
    policy = tmp_path / "worker.yaml"
    policy.write_text(
        "version: 1\nsigners:\n  keys:\n    - {name: publisher, path: " + str(pem) + "}\n"
        "required_predicate_types: []\n"
        "tuf:\n  root: root.json\n  online_aliases: ['dev-*']\n"
    )
    by_policy = fresh_registry.cli(
        "pull",
        f"{repo}@dev-1",
        "--policy",
        str(policy),
        "--cache-dir",
        str(tmp_path / "p"),
        token=worker.token,
    )
    assert digest in _ok(by_policy).stdout


def test_pulling_by_digest_with_a_pinned_root_refuses_a_signed_quarantine(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(fresh_registry)
    reviewer = new_publisher(fresh_registry, "reviewer")
    worker = fresh_registry.actor("reader")
    repo = fresh_registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    root = tmp_path / "root.json"
    _ok(fresh_registry.cli("trust", "root", "--out", str(root), token=worker.token))
    pem = _pem(pub, tmp_path)
    assert (
        digest
        in _ok(
            _pull(fresh_registry, worker.token, f"{repo}@{digest}", root, pem, tmp_path / "c")
        ).stdout
    )
    rkey = tmp_path / "rev.key"
    save_private_key(reviewer.key, rkey)
    _ok(
        fresh_registry.cli(
            "quarantine",
            f"{repo}@{digest}",
            "--reason",
            "bad",
            "--key",
            str(rkey),
            token=reviewer.actor.token,
        )
    )
    refused = _pull(fresh_registry, worker.token, f"{repo}@{digest}", root, pem, tmp_path / "c2")
    assert refused.returncode == 1
    assert "listed by the signed quarantine role" in refused.stderr


def test_exported_metadata_served_by_a_static_server_resolves_without_the_registry(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    from modelward.loader.tuf_resolve import resolve_alias
    from tests.tuf.test_tuf_attacks import _serve

    pub = new_publisher(fresh_registry)
    repo = fresh_registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    key = tmp_path / "pub.key"
    save_private_key(pub.key, key)
    _ok(
        fresh_registry.cli(
            "alias", "set", f"{repo}@dev", digest, "--key", str(key), token=pub.actor.token
        )
    )
    site = tmp_path / "site"
    first = json.loads(_ok(fresh_registry.cli("trust", "export", str(site), "--json")).stdout)
    assert first["written"] >= 5  # timestamp, snapshot, targets, the role, root
    again = json.loads(_ok(fresh_registry.cli("trust", "export", str(site), "--json")).stdout)
    assert again["written"] == 1  # only timestamp.json: versioned files never change
    url, server = _serve(site)
    try:
        resolved = resolve_alias(
            repo,
            "dev",
            metadata_url=url,
            cache_dir=tmp_path / "w",
            trust_root=(site / "1.root.json").read_bytes(),
        )
    finally:
        server.shutdown()
    assert resolved.digest == digest
