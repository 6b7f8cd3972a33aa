"""The registry's TUF repository in its own database: the embedded bootstrap, delegations
made from repositories, publishers and reviewers, and a worker resolving through them."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.metadata import Metadata, TargetFile

from modelward.attest.keys import generate_private_key, keyid, public_key_pem
from modelward.attest.rollout.paths import rollout_role
from modelward.attest.tuf import alias_path, open_role, protected_role, tuf_signer
from modelward.loader.tuf_resolve import TrustMetadataRefused, resolve_alias
from modelward.registry.db import Database, make_engine, upgrade
from modelward.registry.domains.signing.tuf.bootstrap import (
    bootstrap_embedded,
    open_repository,
    sync_delegations,
)
from modelward.registry.domains.signing.tuf.keys import OnlineKeys
from modelward.registry.domains.signing.tuf.proposals import (
    Added,
    SignatureRefused,
    add_signature,
    propose_target,
)
from modelward.registry.domains.signing.tuf.store import (
    DirectoryStore,
    SessionStore,
    export_metadata,
)
from modelward.registry.domains.signing.tuf.tables import TufProposal
from modelward.registry.errors import StaleVersion
from modelward.registry.models import Org, Principal, RepoPublisher, Repository, SigningKey, utcnow
from tests.tuf.test_tuf_attacks import _serve, digest_of, manifest

REPO = "acme/tiny"


@pytest.fixture
def db(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    upgrade(url)
    return Database(make_engine(url))


def _principal(session: Session, name: str, role: str) -> tuple[Principal, PrivateKeyTypes]:
    principal = Principal(name=name, role=role)
    session.add(principal)
    session.flush()
    key = generate_private_key("ed25519")
    session.add(
        SigningKey(
            keyid=keyid(key.public_key()),
            principal_id=principal.id,
            public_key_pem=public_key_pem(key.public_key()).decode(),
        )
    )
    return principal, key


@pytest.fixture
def people(db: Database) -> dict[str, PrivateKeyTypes]:
    with db.write() as session:
        alice, alice_key = _principal(session, "alice", "publisher")
        _, bob_key = _principal(session, "bob", "reviewer")
        _, carol_key = _principal(session, "carol", "reviewer")
        org = Org(name="acme", created_by=alice.id)
        session.add(org)
        session.flush()
        repo = Repository(name=REPO, org_id=org.id, created_by=alice.id)
        session.add(repo)
        session.flush()
        session.add(RepoPublisher(repo_id=repo.id, principal_id=alice.id))
    return {"alice": alice_key, "bob": bob_key, "carol": carol_key}


def test_the_embedded_bootstrap_publishes_root_once_with_0600_online_keys(
    db: Database, people: dict[str, PrivateKeyTypes], tmp_path: Path
) -> None:
    keys = OnlineKeys(tmp_path / "tuf-keys")
    with db.write() as session:
        assert bootstrap_embedded(session, keys, None)
    with db.write() as session:
        assert not bootstrap_embedded(session, keys, None)
    for role in ("root", "targets", "snapshot", "timestamp", "aliases"):
        assert stat.S_IMODE(keys.path(role).stat().st_mode) == 0o600
    with db.read() as session:
        versions = SessionStore(session).latest_versions()
        targets = open_repository(session, keys).targets()
    assert versions == {"root": 1, "targets": 1, "snapshot": 1, "timestamp": 1}
    assert targets.delegations is not None
    assert targets.delegations.roles is not None
    roles = targets.delegations.roles
    # quarantine first: delegated before it has metadata (workers read its absence from
    # the snapshot as "nothing is quarantined")
    # ... and the rollout steps' role, the online key's (docs/rollouts.md#signed-state)
    assert list(roles) == [
        "quarantine",
        protected_role(REPO, "prod"),
        rollout_role(REPO),
        open_role(REPO),
    ]
    reviewers = sorted(keyid(people[n].public_key()) for n in ("bob", "carol"))
    assert roles[protected_role(REPO, "prod")].keyids == reviewers
    assert roles[protected_role(REPO, "prod")].threshold == 1  # the default policy's approvals
    assert roles[open_role(REPO)].keyids == [keyid(people["alice"].public_key())]


def test_a_worker_resolves_an_alias_the_publisher_signed_and_loses_it_when_her_key_is_revoked(
    db: Database, people: dict[str, PrivateKeyTypes], tmp_path: Path
) -> None:
    keys = OnlineKeys(tmp_path / "tuf-keys")
    with db.write() as session:
        bootstrap_embedded(session, keys, None)
        repo = open_repository(session, keys)
        root = repo.store.read("root")
        data = manifest(7)
        md = repo.propose(
            open_role(REPO),
            lambda t: t.targets.__setitem__(
                alias_path(REPO, "dev"), TargetFile.from_data(alias_path(REPO, "dev"), data)
            ),
        )
        md.sign(tuf_signer(people["alice"]), append=True)
        repo.publish_delegated(open_role(REPO), md)
    served = DirectoryStore(tmp_path / "served")
    url, server = _serve(served.root)
    try:
        with db.read() as session:
            export_metadata(SessionStore(session), served)
        resolved = resolve_alias(
            REPO, "dev", metadata_url=url, cache_dir=tmp_path / "worker", trust_root=root
        )
        assert resolved.digest == digest_of(data)
        with db.write() as session:
            for row in session.query(SigningKey).join(Principal).filter(Principal.name == "alice"):
                row.revoked_at = utcnow()
            session.flush()
            assert sync_delegations(
                session, open_repository(session, keys), keys, None, proposer_id=None
            )
        with db.read() as session:
            assert export_metadata(SessionStore(session), served) == 3  # targets, snapshot, ts
        with pytest.raises(TrustMetadataRefused, match="UnsignedMetadataError"):
            resolve_alias(
                REPO, "dev", metadata_url=url, cache_dir=tmp_path / "worker", trust_root=root
            )
    finally:
        server.shutdown()


def _prod_proposal(session: Session, keys: OnlineKeys, data: bytes, proposer: str) -> TufProposal:
    repo = open_repository(session, keys)
    proposer_id = session.scalar(select(Principal.id).where(Principal.name == proposer))
    assert proposer_id is not None
    return propose_target(
        session,
        repo,
        path=alias_path(REPO, "prod"),
        data=data,
        proposer_id=proposer_id,
        reason="release",
        from_digest=None,
        to_digest=digest_of(data),
    )


def _sign(proposal: TufProposal, key: PrivateKeyTypes) -> tuple[str, str]:
    signature = Metadata.from_bytes(proposal.payload).sign(tuf_signer(key))
    return signature.keyid, signature.signature


@pytest.fixture
def bootstrapped(db: Database, people: dict[str, PrivateKeyTypes], tmp_path: Path) -> OnlineKeys:
    keys = OnlineKeys(tmp_path / "tuf-keys")
    with db.write() as session:
        bootstrap_embedded(session, keys, None)
    return keys


def test_a_reviewer_signature_publishes_a_prod_proposal(
    db: Database, people: dict[str, PrivateKeyTypes], bootstrapped: OnlineKeys
) -> None:
    with db.write() as session:
        proposal = _prod_proposal(session, bootstrapped, manifest(1), "alice")
        keyid_, sig = _sign(proposal, people["bob"])
        added = add_signature(
            session,
            open_repository(session, bootstrapped),
            proposal,
            keyid=keyid_,
            signature_hex=sig,
        )
        assert added == Added(signatures=1, threshold=1, published=True)
        assert proposal.state == "published"
        assert SessionStore(session).latest_versions()[protected_role(REPO, "prod")] == 1


def test_the_proposers_own_key_does_not_count(
    db: Database, people: dict[str, PrivateKeyTypes], bootstrapped: OnlineKeys
) -> None:
    with db.write() as session:
        proposal = _prod_proposal(session, bootstrapped, manifest(1), "bob")
        keyid_, sig = _sign(proposal, people["bob"])
        bob = session.scalar(select(Principal.id).where(Principal.name == "bob"))
        assert bob is not None
        with pytest.raises(SignatureRefused, match="belongs to the proposer"):
            add_signature(
                session,
                open_repository(session, bootstrapped),
                proposal,
                keyid=keyid_,
                signature_hex=sig,
                excluded={bob: "the proposer"},
            )


def test_a_key_the_role_is_not_delegated_to_does_not_count(
    db: Database, people: dict[str, PrivateKeyTypes], bootstrapped: OnlineKeys
) -> None:
    with db.write() as session:
        proposal = _prod_proposal(session, bootstrapped, manifest(1), "alice")
        keyid_, sig = _sign(proposal, people["alice"])  # a publisher, not a reviewer
        with pytest.raises(SignatureRefused, match="not one of the keys"):
            add_signature(
                session,
                open_repository(session, bootstrapped),
                proposal,
                keyid=keyid_,
                signature_hex=sig,
            )


def test_a_signature_by_another_key_under_a_reviewers_keyid_is_refused(
    db: Database, people: dict[str, PrivateKeyTypes], bootstrapped: OnlineKeys
) -> None:
    with db.write() as session:
        proposal = _prod_proposal(session, bootstrapped, manifest(1), "alice")
        _, sig = _sign(proposal, people["carol"])
        with pytest.raises(SignatureRefused, match="does not verify"):
            add_signature(
                session,
                open_repository(session, bootstrapped),
                proposal,
                keyid=keyid(people["bob"].public_key()),
                signature_hex=sig,
            )


def test_a_proposal_made_before_the_role_moved_is_stale(
    db: Database, people: dict[str, PrivateKeyTypes], bootstrapped: OnlineKeys
) -> None:
    with db.write() as session:
        first = _prod_proposal(session, bootstrapped, manifest(1), "alice")
        second = _prod_proposal(session, bootstrapped, manifest(2), "alice")
        repo = open_repository(session, bootstrapped)
        keyid_, sig = _sign(first, people["bob"])
        add_signature(session, repo, first, keyid=keyid_, signature_hex=sig)
        keyid_, sig = _sign(second, people["carol"])
        with pytest.raises(StaleVersion, match="propose again") as info:
            add_signature(session, repo, second, keyid=keyid_, signature_hex=sig)
        assert info.value.code == "proposal_stale"
