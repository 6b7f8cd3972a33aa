"""Issue 30 item 1: a threshold a worker counts must be a count of people, against a real
``modelward serve`` (SQLite and PostgreSQL), the attacker writing the registry's database.

- one reviewer who registered two keys has one key in the reviewers' role, so her two
  signatures stored around the registry as ``prod``'s next version do not meet a
  two-approval threshold a worker checks;
- the registry's online snapshot never lists a role version the registry did not accept
  itself, even one whose signatures meet the delegation (two reviewers signing around the
  registry's two-person rule and gates): the next snapshot, made after an unrelated signed
  move, lists the version the registry published.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tuf.api.metadata import Metadata, Snapshot

from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.attest.tuf import alias_path, open_role, protected_role
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
    unique,
)
from tests.tuf.test_registry_attacks_tuf import (
    KINDS,
    POLICY,
    attacker,
    forge,
    new_reviewer,
    resolve,
    sign,
    uncached_registry,
)


@pytest.fixture(scope="module", params=KINDS)
def registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """This module's own registry (``tuf_freshness_seconds`` 0): ``attacker`` rewrites its
    stored rows behind its back (docs/tuf.md#serving)."""
    yield from uncached_registry(request, tmp_path_factory)


def _second_key(registry: Registry, reviewer: Publisher) -> Publisher:
    key = generate_private_key()
    pem = public_key_pem(key.public_key()).decode()
    kid = str(registry.admin.register_key(pem, principal=reviewer.name)["keyid"])
    return Publisher(reviewer.actor, key, kid)


def _release(registry: Registry, tmp: Path) -> tuple[str, Publisher, Publisher, Publisher, str]:
    """A repository whose prod (2 approvals) the registry published at ``approved``, signed
    by r1 (with the second key she registered) and r2."""
    pub, r1, r2 = new_publisher(registry), new_reviewer(registry), new_reviewer(registry)
    r1_again = _second_key(registry, r1)
    repo = registry.repo(pub, policy_yaml=POLICY)
    approved = push_new(pub, repo, tmp / unique("w"))
    answer = pub.actor.client.set_alias(repo, "prod", approved, propose=True)
    proposal = int(answer["pending"]["id"])
    sign(r1_again, proposal)
    assert sign(r2, proposal)["state"] == "published"
    return repo, pub, r1, r1_again, approved


def _unrelated_signed_move(registry: Registry, pub: Publisher, repo: str, tmp: Path) -> None:
    digest = push_new(pub, repo, tmp / unique("w"))
    answer = pub.actor.client.set_alias(repo, "dev", digest)
    assert sign(pub, int(answer["proposal"]))["state"] == "published"


def test_one_reviewer_with_two_keys_stored_as_prods_next_version_is_not_resolved(
    registry: Registry, tmp_path: Path
) -> None:
    repo, pub, r1, r1_again, approved = _release(registry, tmp_path)
    role, path = protected_role(repo, "prod"), alias_path(repo, "prod")
    root = registry.admin.tuf_file("1.root.json")
    with attacker(registry) as db:
        # her two keys sign prod -> a digest nobody proposed, stored as the next version
        evil = push_new(pub, repo, tmp_path / unique("w"))
        forged = forge(db.metadata(role), path, evil, version=2, keys=[r1.key, r1_again.key])
        db.write(role, 2, forged)
        _unrelated_signed_move(registry, pub, repo, tmp_path)
        snapshot = Metadata[Snapshot].from_bytes(db.metadata("snapshot")).signed
        assert snapshot.meta[f"{role}.json"].version == 1
        assert f"{open_role(repo)}.json" in snapshot.meta  # the unrelated move is listed
        assert resolve(registry.admin, root, repo, "prod", tmp_path / "worker") == approved
        assert registry.admin.get_alias(repo, "prod")["digest"] == approved


def test_a_role_version_the_registry_did_not_accept_is_never_in_its_snapshot(
    registry: Registry, tmp_path: Path
) -> None:
    repo, pub, _r1, r1_again, approved = _release(registry, tmp_path)
    r2 = new_reviewer(registry)  # a reviewer who joins later; both keys are delegated
    _unrelated_signed_move(registry, pub, repo, tmp_path)  # the delegations now name r2
    role, path = protected_role(repo, "prod"), alias_path(repo, "prod")
    root = registry.admin.tuf_file("1.root.json")
    with attacker(registry) as db:
        # two reviewers' keys meet the threshold, but the registry never accepted this
        # version (no proposal, no gates, no two-person rule): stored around it
        evil = push_new(pub, repo, tmp_path / unique("w"))
        forged = forge(db.metadata(role), path, evil, version=2, keys=[r1_again.key, r2.key])
        db.write(role, 2, forged)
        _unrelated_signed_move(registry, pub, repo, tmp_path)
        snapshot = Metadata[Snapshot].from_bytes(db.metadata("snapshot")).signed
        assert snapshot.meta[f"{role}.json"].version == 1
        assert resolve(registry.admin, root, repo, "prod", tmp_path / "worker") == approved
        shown = registry.admin.get_alias(repo, "prod")
        assert (shown["digest"], shown["signed"]) == (approved, True)


@pytest.mark.sqlite_only
def test_a_second_key_replaces_the_first_in_every_delegation(
    registry: Registry, tmp_path: Path
) -> None:
    from tests.tuf.test_delegation_attacks import delegated_roles

    repo, _pub, r1, r1_again, _approved = _release(registry, tmp_path)
    keyids = delegated_roles(registry)[protected_role(repo, "prod")]["keyids"]
    assert r1_again.keyid in keyids
    assert r1.keyid not in keyids
    # revoking the new key gives the old one back (it was never revoked)
    registry.admin.revoke_key(r1_again.keyid, force=True)  # prod is short until re-signed
    keyids = delegated_roles(registry)[protected_role(repo, "prod")]["keyids"]
    assert (r1.keyid in keyids, r1_again.keyid in keyids) == (True, False)
