"""Issue 30 item 9: under the embedded default (targets key online, no ``trust init``) a
database writer cannot steer what the registry's online targets key signs, against a real
``modelward serve`` (SQLite and PostgreSQL). Every row the delegations are made from
carries the registry's seal (``registry.domains.signing.tuf.seals``: an HMAC by ``rows.key``, on the
registry's disk), and a row without a valid one counts for nothing:

- an inserted reviewer, token and signing key: the key is in no role and signs nothing;
- a principal's role edited to reviewer, a key row inserted for her, a publisher row
  inserted, a revoked key un-revoked, a policy edited to let the online key sign ``prod``:
  no delegation changes (the edited policy's repository fails closed, named in the log).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, delete, insert, select, update

from modelward.attest.keys import generate_private_key, keyid, public_key_pem
from modelward.attest.tuf import online_role, open_role, protected_role
from modelward.client.api import APIError
from modelward.registry.models import Principal, RepoPublisher, Repository, SigningKey
from tests.registry.conftest import (
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
)
from tests.tuf.test_delegation_attacks import (
    PROD_POLICY,
    _insert_rex,
    delegated_roles,
    new_reviewer,
    propose,
    refused,
    sign,
)


def test_a_db_writers_reviewer_token_and_key_sign_nothing_before_trust_init(
    registry: Registry, tmp_path: Path
) -> None:
    assert registry.admin.tuf_status()["targets_key"] == "online"  # the embedded default
    pub, reviewer = new_publisher(registry), new_reviewer(registry)
    repo = registry.repo(pub, policy_yaml=PROD_POLICY)
    digest = push_new(pub, repo, tmp_path)
    rex, _token = _insert_rex(registry)
    proposal = propose(pub, repo, "prod", digest)
    registry.admin.tuf_sync()
    keyids = delegated_roles(registry)[protected_role(repo, "prod")]["keyids"]
    assert reviewer.keyid in keyids
    assert rex.keyid not in keyids
    with pytest.raises(APIError) as info:
        sign(rex, proposal)
    refused(info, 403, "signature_refused")
    assert registry.admin.tuf_proposal(proposal)["state"] == "pending"
    assert '"event": "tuf_row_unsealed"' in registry.server.log()
    rex.actor.client.close()


def test_db_writer_edits_to_roles_publishers_keys_and_policies_change_no_delegation(
    registry: Registry, tmp_path: Path
) -> None:
    pub, other = new_publisher(registry), new_publisher(registry)
    reviewer = new_reviewer(registry)
    repo = registry.repo(pub, policy_yaml=PROD_POLICY)
    registry.repo(other)  # other publishes elsewhere, with a sealed key
    reader = registry.actor("reader")
    registry.admin.revoke_key(reviewer.keyid)
    registry.admin.tuf_sync()
    before = delegated_roles(registry)
    engine = create_engine(registry.database_url)
    key = generate_private_key()
    now = datetime.now(UTC)
    online = PROD_POLICY.replace("protected: true, approvals: 1", "online: true")
    try:
        with engine.begin() as conn:
            # a reader made a reviewer, with a key row of hers
            conn.execute(
                update(Principal).where(Principal.name == reader.name).values(role="reviewer")
            )
            reader_id = conn.scalar(select(Principal.id).where(Principal.name == reader.name))
            conn.execute(
                insert(SigningKey).values(
                    keyid=keyid(key.public_key()),
                    principal_id=reader_id,
                    public_key_pem=public_key_pem(key.public_key()).decode(),
                    created_at=now,
                )
            )
            # another publisher made a publisher of this repository
            repo_id = conn.scalar(select(Repository.id).where(Repository.name == repo))
            other_id = conn.scalar(select(Principal.id).where(Principal.name == other.name))
            conn.execute(insert(RepoPublisher).values(repo_id=repo_id, principal_id=other_id))
            # the revoked reviewer key un-revoked
            conn.execute(
                update(SigningKey).where(SigningKey.keyid == reviewer.keyid).values(revoked_at=None)
            )
        registry.admin.tuf_sync()
        after = delegated_roles(registry)
        assert after[protected_role(repo, "prod")] == before[protected_role(repo, "prod")]
        assert after[open_role(repo)]["keyids"] == [pub.keyid]
        for role in after.values():
            assert keyid(key.public_key()) not in role["keyids"]
            assert reviewer.keyid not in role["keyids"]
        # a policy edited to let the registry's online key sign prod: fails closed
        with engine.begin() as conn:
            conn.execute(
                update(Repository).where(Repository.id == repo_id).values(policy_yaml=online)
            )
        registry.admin.tuf_sync()
        roles = delegated_roles(registry)
        assert online_role(repo) not in roles
        assert roles[open_role(repo)]["keyids"] == []
        log = registry.server.log()
        assert '"code": "policy_unsealed"' in log
        assert f'"repository": "{repo}"' in log
    finally:
        with engine.begin() as conn:
            conn.execute(
                update(Repository).where(Repository.name == repo).values(policy_yaml=PROD_POLICY)
            )
            conn.execute(
                update(Principal).where(Principal.name == reader.name).values(role="reader")
            )
            conn.execute(
                delete(RepoPublisher).where(
                    RepoPublisher.repo_id == repo_id, RepoPublisher.principal_id == other_id
                )
            )
        engine.dispose()
        registry.admin.tuf_sync()
