"""One test per attack on what a signature counts for (docs/tuf.md#proposals, #keys), against
a real ``modelward serve`` on loopback, SQLite and PostgreSQL; where the attacker is a
database writer, the test edits the registry's database directly.

- one reviewer with two registered keys is one approval, not two;
- a withdrawn approval's signature comes off an adoption proposal too (it sets many aliases);
- a move signed only by a key since revoked is not carried into the next proposal (where the
  others would sign it again unseen), and ``approve`` shows the proposal against what is
  published; a role with no verifying version in reach is a 409, never a 500;
- a revocation follows into the delegations even when a stored policy no longer parses.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from sqlalchemy import create_engine, insert, update
from tuf.api.metadata import Metadata, Targets

from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
from modelward.attest.tuf import alias_path, open_role, protected_role
from modelward.client.api import APIError
from modelward.registry.domains.signing.tuf.repository import MAX_UNVERIFIED
from modelward.registry.domains.signing.tuf.tables import TufMetadata
from modelward.registry.models import Repository
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
)
from tests.tuf.test_delegation_attacks import (
    PROD_POLICY,
    TWO_POLICY,
    delegated_roles,
    new_reviewer,
    propose,
    refused,
    reg,  # noqa: F401 - a registry of its own, SQLite and PostgreSQL
    sign,
)

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: one database is enough here

OPEN_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n  - {pattern: '*', roles: [publisher]}\n"
)
REL_POLICY = PROD_POLICY.replace("pattern: prod", "pattern: 'rel-*'")


def _second_key(registry: Registry, reviewer: Publisher) -> Publisher:
    """Another key registered to the same reviewer."""
    key = generate_private_key()
    pem = public_key_pem(key.public_key()).decode()
    kid = str(registry.admin.register_key(pem, principal=reviewer.name)["keyid"])
    return Publisher(reviewer.actor, key, kid)


def test_one_reviewer_with_two_keys_cannot_meet_a_two_approval_rule(
    registry: Registry, tmp_path: Path
) -> None:
    pub, r1, r2 = new_publisher(registry), new_reviewer(registry), new_reviewer(registry)
    r1_again = _second_key(registry, r1)
    repo = registry.repo(pub, policy_yaml=TWO_POLICY)
    proposal = propose(pub, repo, "prod", push_new(pub, repo, tmp_path))
    # one key per person in the reviewers' role (issue 30 item 1): her second key replaced
    # the first there, so what a worker counts (keys) is what the registry counts (people)
    keyids = delegated_roles(registry)[protected_role(repo, "prod")]["keyids"]
    assert r1_again.keyid in keyids
    assert r1.keyid not in keyids
    with pytest.raises(APIError) as info:
        sign(r1, proposal)
    refused(info, 403, "signature_refused")
    assert sign(r1_again, proposal)["state"] == "pending"
    shown = registry.admin.tuf_proposal(proposal)
    assert (shown["state"], [s["keyid"] for s in shown["signatures"]]) == (
        "pending",
        [r1_again.keyid],
    )
    # a second person is the second approval
    assert sign(r2, proposal)["state"] == "published"


def test_a_withdrawn_approvals_signature_on_an_adoption_no_longer_counts(
    reg: Registry,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    pub, r1 = new_publisher(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=OPEN_POLICY)
    digest = push_new(pub, repo, tmp_path)
    # prod moves on the registry's word (unsigned); its proposal goes stale when the role
    # moves on with another alias the publisher signs
    unsigned = pub.actor.client.set_alias(repo, "prod", digest)["proposal"]
    other = pub.actor.client.set_alias(repo, "other", digest)["proposal"]
    assert sign(pub, other)["state"] == "published"
    assert reg.admin.tuf_proposal(unsigned)["state"] == "stale"
    # prod becomes protected: adopting it is a proposal of the reviewers' role, labelled adopt
    reg.admin.set_policy(repo, TWO_POLICY)
    [adoption] = [p for p in reg.admin.tuf_adopt() if p["role"] == protected_role(repo, "prod")]
    assert adoption["target"] == "adopt"
    assert len(sign(r1, adoption["id"])["signatures"]) == 1
    answer = r1.actor.client.withdraw_approval(repo, digest, "prod", "found a regression")
    assert answer["unsigned_proposals"] == [adoption["id"]]
    assert reg.admin.tuf_proposal(adoption["id"])["signatures"] == []


def test_a_move_signed_only_by_a_revoked_key_is_not_carried_into_the_next_proposal(
    registry: Registry, tmp_path: Path
) -> None:
    pub, r1, r2 = new_publisher(registry), new_reviewer(registry), new_reviewer(registry)
    repo = registry.repo(pub, policy_yaml=REL_POLICY)
    evil = push_new(pub, repo, tmp_path)
    # r1 alone signed rel-a -> evil; then r1's key is revoked (stolen, say)
    assert sign(r1, propose(pub, repo, "rel-a", evil))["state"] == "published"
    registry.admin.revoke_key(r1.keyid, force=True)  # it unsigns rel-a: meant
    good = push_new(pub, repo, tmp_path)
    proposal = propose(pub, repo, "rel-b", good)
    payload = base64.b64decode(registry.admin.tuf_proposal(proposal)["payload"])
    # what r2 is asked to sign sets rel-b only: rel-a -> evil is not signed again unseen
    targets = Metadata[Targets].from_bytes(payload).signed.targets
    assert set(targets) == {alias_path(repo, "rel-b")}
    # approve shows the proposal against what a worker reads now (no verified rel-* version),
    # so it sees one change and signs
    key = tmp_path / "r2.key"
    save_private_key(r2.key, key)
    approved = registry.cli("approve", f"{repo}@{good}", "--alias", "rel-b", "--key", str(key),
                            token=r2.actor.token, check=True)  # fmt: skip
    assert "published" in approved.stdout
    assert registry.admin.get_alias(repo, "rel-b")["signed"] is True
    assert registry.admin.get_alias(repo, "rel-a")["signed"] is False


def test_a_role_buried_under_forged_versions_is_proposed_past_them_not_a_500(
    registry: Registry, tmp_path: Path
) -> None:
    pub, _reviewer = new_publisher(registry), new_reviewer(registry)
    repo = registry.repo(pub, policy_yaml=PROD_POLICY)
    digest = push_new(pub, repo, tmp_path)
    propose(pub, repo, "prod", digest)  # the role is delegated
    # a database writer buries the role under more forged versions than are ever walked
    role = protected_role(repo, "prod")
    engine = create_engine(registry.database_url)
    with engine.begin() as conn:
        for version in range(1, MAX_UNVERIFIED + 2):
            forged = Metadata(Targets(version=version)).to_bytes()  # parses; signed by nobody
            conn.execute(insert(TufMetadata).values(role=role, version=version, data=forged))
    engine.dispose()
    # no snapshot of the registry lists any of them: they are not its versions, so the
    # next proposal is made from nothing signed, past them (issue 30 item 6: stored rows
    # cannot freeze a role)
    answer = pub.actor.client.set_alias(repo, "prod", push_new(pub, repo, tmp_path), propose=True)
    shown = registry.admin.tuf_proposal(int(answer["pending"]["id"]))
    assert shown["version"] == MAX_UNVERIFIED + 2


def test_a_revocation_reaches_the_delegations_even_when_a_stored_policy_no_longer_parses(
    registry: Registry,
) -> None:
    pub, reviewer = new_publisher(registry), new_reviewer(registry)
    broken, fine = (
        registry.repo(pub, policy_yaml=PROD_POLICY),
        registry.repo(pub, policy_yaml=PROD_POLICY),
    )
    # a database writer (or a policy stored before the rule existed) leaves a policy the
    # registry refuses to load now: a protected pattern written twice
    twice = PROD_POLICY + "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1}\n"
    engine = create_engine(registry.database_url)
    with engine.begin() as conn:
        conn.execute(update(Repository).where(Repository.name == broken).values(policy_yaml=twice))
    try:
        registry.admin.revoke_key(reviewer.keyid)
        roles = delegated_roles(registry)
        # the revoked key left every role
        assert all(reviewer.keyid not in role["keyids"] for role in roles.values())
        assert roles[protected_role(fine, "prod")]["threshold"] == 1
        # the broken repository alone fails closed: its aliases' role has no keys
        assert protected_role(broken, "prod") not in roles
        assert roles[open_role(broken)]["keyids"] == []
        assert pub.keyid in roles[open_role(fine)]["keyids"]
        log = registry.server.log()
        assert '"event": "tuf_policy_unusable"' in log
        assert f'"repository": "{broken}"' in log
    finally:
        with engine.begin() as conn:
            conn.execute(
                update(Repository).where(Repository.name == broken).values(policy_yaml=PROD_POLICY)
            )
        engine.dispose()
