"""``trust adopt`` goes through the alias decision (docs/tuf.md#migration): an adoption signs
aliases the registry recorded on its word alone, and a database writer can edit those rows.
Against a real ``modelward serve`` (SQLite and PostgreSQL); the attacker writes the
``aliases`` table with SQLAlchemy on the registry's database URL, as in
test_registry_attacks_tuf.py, and holds no key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, update

from modelward.attest.tuf import protected_role
from modelward.client.api import APIError
from modelward.registry.models import Alias, Principal, Repository
from tests.registry.conftest import Registry, new_publisher, push_new
from tests.tuf.test_registry_attacks_tuf import new_reviewer, sign

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: one database is enough here

POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, admin], protected: true, approvals: 1}\n"
    "  - {pattern: '*', roles: [publisher]}\n"
)

ONLINE_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: 'dev-*', roles: [publisher], online: true}\n"
    "  - {pattern: '*', roles: [publisher]}\n"
)


def point_alias_row(reg: Registry, repo: str, alias: str, digest: str) -> None:
    """The database writer: ``UPDATE aliases SET digest=...``, nothing signed."""
    engine = create_engine(reg.database_url)
    try:
        repo_id = select(Repository.id).where(Repository.name == repo).scalar_subquery()
        with engine.begin() as conn:
            moved = conn.execute(
                update(Alias)
                .where(Alias.repo_id == repo_id, Alias.name == alias)
                .values(digest=digest)
            )
        assert moved.rowcount == 1
    finally:
        engine.dispose()


def test_adopt_of_an_alias_row_a_db_writer_pointed_at_a_quarantined_bundle_is_refused(
    registry: Registry, tmp_path: Path
) -> None:
    publisher, reviewer = new_publisher(registry), new_reviewer(registry)
    repo = registry.repo(publisher, policy_yaml=POLICY)
    role = protected_role(repo, "prod")
    good, evil, later = (push_new(publisher, repo, tmp_path / n) for n in ("g", "e", "l"))
    # prod -> good, signed by the reviewer (the role is delegated to the reviewers' keys)
    proposed = publisher.actor.client.set_alias(repo, "prod", good, propose=True)
    assert sign(reviewer, int(proposed["pending"]["id"]))["state"] == "published"

    # (1) at adopt time: the row points at a quarantined bundle; nothing is proposed for it
    registry.admin.quarantine(repo, evil, "exfiltrates weights")
    point_alias_row(registry, repo, "prod", evil)
    adopted = registry.admin.tuf_adopt()
    assert [p for p in adopted if p["role"] == role] == []
    event = [e for e in registry.admin.iter_audit() if e["action"] == "tuf.adopt"][-1]
    assert {
        "alias": f"{repo}@prod",
        "digest": evil,
        "why": "the bundle is quarantined",
    } in event["details"]["skipped"]

    # (2) at signing time: the bundle adopted is quarantined after the adoption was proposed
    point_alias_row(registry, repo, "prod", later)
    proposal = next(p for p in registry.admin.tuf_adopt() if p["role"] == role)
    assert proposal["target"] == "adopt"
    registry.admin.quarantine(repo, later, "backdoored tokenizer")
    with pytest.raises(APIError) as refused:
        sign(reviewer, int(proposal["id"]))
    assert refused.value.status == 409
    assert refused.value.code == "bundle_quarantined"
    assert f"adopts {repo}@prod" in refused.value.message
    assert refused.value.detail["alias"] == f"{repo}@prod"
    assert registry.admin.tuf_proposal(int(proposal["id"]))["state"] == "pending"


def test_adopt_signed_by_the_publisher_of_an_adopted_bundle_is_refused(
    registry: Registry, tmp_path: Path
) -> None:
    """The two-person rule holds per adopted alias: a publisher the database writer made a
    reviewer (its key now in the role) may not sign the adoption of its own bundle."""
    publisher, insider, reviewer = (
        new_publisher(registry),
        new_publisher(registry),
        new_reviewer(registry),
    )
    repo = registry.repo(publisher, insider, policy_yaml=POLICY)
    role = protected_role(repo, "prod")
    good = push_new(publisher, repo, tmp_path / "g")
    proposed = publisher.actor.client.set_alias(repo, "prod", good, propose=True)
    assert sign(reviewer, int(proposed["pending"]["id"]))["state"] == "published"
    own = push_new(insider, repo, tmp_path / "o")
    point_alias_row(registry, repo, "prod", own)
    engine = create_engine(registry.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                update(Principal).where(Principal.name == insider.name).values(role="reviewer")
            )
    finally:
        engine.dispose()
    proposal = next(p for p in registry.admin.tuf_adopt() if p["role"] == role)
    # the edited role carries no seal the registry made (issue 30 item 9): its key is in no
    # reviewers' role, so it signs nothing (before, the two-person rule refused it here)
    assert insider.keyid not in proposal["keyids"]
    with pytest.raises(APIError) as refused:
        sign(insider, int(proposal["id"]))
    assert refused.value.code == "signature_refused"
    assert registry.admin.tuf_proposal(int(proposal["id"]))["state"] == "pending"


def test_adopt_of_an_online_alias_row_a_db_writer_moved_is_not_signed_by_the_registry(
    registry: Registry, tmp_path: Path
) -> None:
    """An online role is signed by the registry's own key at adoption: the move is decided
    there first, with the adopter (an admin this rule does not name) as the mover."""
    publisher = new_publisher(registry)
    repo = registry.repo(publisher, policy_yaml=ONLINE_POLICY)
    good, other = (push_new(publisher, repo, tmp_path / n) for n in ("g", "o"))
    assert publisher.actor.client.set_alias(repo, "dev-a", good)["signed"] is True
    point_alias_row(registry, repo, "dev-a", other)
    adopted = registry.admin.tuf_adopt()
    assert [p for p in adopted if p["role"].startswith(repo.replace("/", ":"))] == []
    event = [e for e in registry.admin.iter_audit() if e["action"] == "tuf.adopt"][-1]
    skipped = [s for s in event["details"]["skipped"] if s["alias"] == f"{repo}@dev-a"]
    assert [s["digest"] for s in skipped] == [other]
    assert skipped[0]["why"].startswith("forbidden: ")
    assert publisher.actor.client.get_alias(repo, "dev-a")["signed"] is False
