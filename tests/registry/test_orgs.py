"""Orgs own repositories (docs/registry.md#orgs): one test per attack on who creates
repositories in an org and on the org's policy floor, then the happy path and the CLI, each
against a real server (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from modelward.client.api import APIError, ConflictError, ForbiddenError
from tests.registry.conftest import Registry, new_publisher, push_new, unique


def floor(*protect: tuple[str, int]) -> dict[str, Any]:
    """A floor document as the registry answers it."""
    return {
        "aliases": [{"pattern": p, "approvals": n, "require_baseline": False} for p, n in protect]
    }


FLOOR = floor(("prod", 2), ("release-*", 2))
HEADER = "version: 1\ntrust_registered_signers: true\naliases:\n"
MEETS = HEADER + (
    "  - {pattern: prod, roles: [publisher, admin], protected: true, approvals: 2}\n"
    "  - {pattern: 'release-*', roles: [publisher, admin], protected: true, approvals: 3}\n"
    "  - {pattern: '*', roles: [publisher, admin]}\n"
)


def audit_mark(reg: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in reg.admin.iter_audit())])


def denials(reg: Registry, mark: int, actor: str) -> list[dict[str, Any]]:
    return [
        e
        for e in reg.admin.iter_audit(after=mark)
        if e["actor"] == actor and e["action"] == "denied"
    ]


def org_with_floor(reg: Registry, *owners: str) -> str:
    org = unique("org")
    reg.admin.put_org(org, owners=list(owners), floor=FLOOR)
    return org


def test_publisher_cannot_create_a_repo_in_an_org_it_does_not_own(registry: Registry) -> None:
    mallory, alice = new_publisher(registry), new_publisher(registry)
    owned = unique("org")
    registry.admin.put_org(owned, owners=[alice.name])
    unowned = unique("org")
    registry.admin.create_repo(f"{unowned}/seed")  # the admin's: an org owned by nobody
    mark = audit_mark(registry)
    # an org someone else owns, an org nobody owns, an org that does not exist yet
    for org in (owned, unowned, unique("org")):
        with pytest.raises(ForbiddenError) as info:
            mallory.actor.client.create_repo(f"{org}/model", MEETS)
        assert org in str(info.value)
        with pytest.raises(APIError):
            registry.admin.get_repo(f"{org}/model")
    assert len(denials(registry, mark, mallory.name)) == 3
    # the owner may; an owner removed may no longer
    alice.actor.client.create_repo(f"{owned}/model")
    registry.admin.remove_org_owner(owned, alice.name)
    with pytest.raises(ForbiddenError):
        alice.actor.client.create_repo(f"{owned}/other")


def test_repo_policy_weaker_than_the_org_floor_is_refused(registry: Registry) -> None:
    pub = new_publisher(registry)
    org = org_with_floor(registry, pub.name)
    weak = {
        "unprotected": HEADER + "  - {pattern: '*', roles: [publisher]}\n",
        "fewer approvals": HEADER
        + (
            "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1}\n"
            "  - {pattern: 'release-*', roles: [publisher], protected: true, approvals: 2}\n"
        ),
        "no rule covers prod": HEADER
        + ("  - {pattern: 'release-*', roles: [publisher], protected: true, approvals: 2}\n"),
        "release-* half covered": HEADER
        + (
            "  - {pattern: prod, roles: [publisher], protected: true, approvals: 2}\n"
            "  - {pattern: 'release-[0-9]*', roles: [publisher], protected: true, approvals: 2}\n"
            "  - {pattern: '*', roles: [publisher]}\n"
        ),
        # the server's default policy: prod needs one approval, release-* none
        "the default policy": None,
    }
    mark = audit_mark(registry)
    for case, policy in weak.items():
        name = f"{org}/{unique('m')}"
        with pytest.raises(APIError) as info:
            pub.actor.client.create_repo(name, policy)
        err = info.value
        assert (err.status, err.code) == (400, "policy_below_floor"), (case, err)
        assert err.detail["shortfalls"], case
        with pytest.raises(APIError):
            registry.admin.get_repo(name)
    assert len(denials(registry, mark, pub.name)) == len(weak)


def test_policy_replacement_weaker_than_the_floor_is_refused(registry: Registry) -> None:
    pub = new_publisher(registry)
    org = org_with_floor(registry, pub.name)
    name = f"{org}/{unique('m')}"
    pub.actor.client.create_repo(name, MEETS)
    weaker = MEETS.replace("approvals: 2", "approvals: 1")
    with pytest.raises(APIError) as info:
        registry.admin.set_policy(name, weaker)
    assert (info.value.status, info.value.code) == (400, "policy_below_floor")
    assert "'prod'" in info.value.message
    assert registry.admin.get_repo(name)["policy_yaml"] == MEETS
    stronger = MEETS.replace("approvals: 3", "approvals: 4")
    assert registry.admin.set_policy(name, stronger)["policy_yaml"] == stronger


def test_alias_rule_that_shadows_a_floor_alias_is_refused(registry: Registry) -> None:
    """A `*` rule listed before the strict `prod` rule governs `prod` (first match wins)."""
    pub = new_publisher(registry)
    org = org_with_floor(registry, pub.name)
    shadowed = HEADER + (
        "  - {pattern: '*', roles: [publisher]}\n"
        "  - {pattern: prod, roles: [publisher], protected: true, approvals: 5}\n"
        "  - {pattern: 'release-*', roles: [publisher], protected: true, approvals: 5}\n"
    )
    with pytest.raises(APIError) as info:
        pub.actor.client.create_repo(f"{org}/{unique('m')}", shadowed)
    assert info.value.code == "policy_below_floor"
    assert "aliases[0] (pattern '*') governs it" in info.value.message
    name = f"{org}/{unique('m')}"
    pub.actor.client.create_repo(name, MEETS)
    with pytest.raises(APIError) as info:
        registry.admin.set_policy(name, shadowed)
    assert info.value.code == "policy_below_floor"


def test_raising_the_floor_above_an_existing_repo_is_refused(registry: Registry) -> None:
    pub = new_publisher(registry)
    org = org_with_floor(registry, pub.name)
    name = f"{org}/{unique('m')}"
    pub.actor.client.create_repo(name, MEETS)
    higher = floor(("prod", 3))
    with pytest.raises(ConflictError) as info:
        registry.admin.put_org(org, floor=higher)
    assert info.value.code == "policy_below_floor"
    assert info.value.detail["repositories"][0]["repository"] == name
    assert registry.admin.get_org(org)["floor"] == FLOOR
    # the repository first, then the floor
    registry.admin.set_policy(name, MEETS.replace("approvals: 2", "approvals: 3"))
    assert registry.admin.put_org(org, floor=higher)["floor"] == higher


def test_owner_creates_and_publishes_in_an_org_with_a_floor(
    registry: Registry, tmp_path: Path
) -> None:
    """The happy path: an admin creates the org with an owner and a floor; the owner
    creates a repository whose policy meets it, pushes, and prod needs two approvals."""
    pub = new_publisher(registry)
    org = unique("org")
    created = registry.admin.put_org(org, owners=[pub.name], floor=FLOOR)
    assert (created["owners"], created["floor"], created["repositories"]) == ([pub.name], FLOOR, 0)
    name = f"{org}/{unique('m')}"
    repo = pub.actor.client.create_repo(name, MEETS)
    assert (repo["org"], repo["publishers"]) == (org, [pub.name])
    assert registry.admin.get_org(org)["repositories"] == 1
    digest = push_new(pub, name, tmp_path, alias="staging")
    reviewers = [registry.actor("reviewer") for _ in range(2)]
    reviewers[0].client.approve(name, digest, "prod")
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(name, "prod", digest)
    assert info.value.code == "approvals_required"
    reviewers[1].client.approve(name, digest, "prod")
    assert pub.actor.client.set_alias(name, "prod", digest)["digest"] == digest
    events = [e for e in registry.admin.iter_audit() if e["subject"] == org]
    assert [e["action"] for e in events][:1] == ["org.create"]


def test_admin_creating_a_repo_in_a_new_org_creates_it_owned_by_nobody(
    registry: Registry,
) -> None:
    org = unique("org")
    registry.admin.create_repo(f"{org}/m")
    shown = registry.admin.get_org(org)
    assert (shown["owners"], shown["floor"], shown["repositories"]) == ([], None, 1)
    event = next(
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "org.create" and e["subject"] == org
    )
    assert event["details"]["implicit"] is True


def test_only_admins_change_orgs_and_owners_must_be_publishers(registry: Registry) -> None:
    pub = new_publisher(registry)
    reader = registry.actor("reader")
    org = unique("org")
    with pytest.raises(ForbiddenError):
        pub.actor.client.put_org(org, owners=[pub.name])
    with pytest.raises(APIError) as info:
        registry.admin.put_org(org, owners=[reader.name])
    assert info.value.status == 400
    assert reader.name in info.value.message
    registry.admin.put_org(org)
    with pytest.raises(ForbiddenError):
        pub.actor.client.add_org_owner(org, pub.name)
    for bad in (
        {"aliases": []},
        {"aliases": [{"pattern": "prod", "approvals": 10**40}]},
        {"aliases": [{"pattern": "prod"}]},
        {"x": 1},
    ):
        response = httpx.put(
            f"{registry.url}/v1/orgs/{org}",
            json={"floor": bad},
            timeout=30,
            headers={"Authorization": f"Bearer {registry.server.admin_token}"},
        )
        assert response.status_code == 422, (bad, response.text)
    for bad_name in ("Acme", "-x", "a" * 101):
        with pytest.raises(APIError) as info:
            registry.admin.put_org(bad_name)
        assert 400 <= info.value.status < 500


def test_org_cli(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    org = unique("org")
    floor = tmp_path / "floor.yaml"
    floor.write_text("aliases:\n  - {pattern: prod, approvals: 2}\n")
    registry.cli("org", "create", org, "--owner", pub.name, "--floor", str(floor), check=True)
    shown = json.loads(registry.cli("org", "show", org, "--json", check=True).stdout)
    assert shown["owners"] == [pub.name]
    assert shown["floor"] == {
        "aliases": [{"pattern": "prod", "approvals": 2, "require_baseline": False}]
    }
    text = registry.cli("org", "show", org, check=True).stdout
    assert "prod (protected, >= 2 approvals)" in text
    listed = json.loads(
        registry.cli("org", "list", "--json", token=pub.actor.token, check=True).stdout
    )
    assert org in [o["name"] for o in listed]
    refused = registry.cli("org", "owner", "add", org, pub.name, token=pub.actor.token)
    assert refused.returncode == 1
    assert "forbidden" in refused.stderr.lower()
    other = new_publisher(registry)
    registry.cli("org", "owner", "add", org, other.name, check=True)
    registry.cli("org", "owner", "remove", org, pub.name, check=True)
    registry.cli("org", "create", org, "--protect", "prod:3", check=True)
    registry.cli("org", "create", org, "--no-floor", check=True)
    shown = json.loads(registry.cli("org", "show", org, "--json", check=True).stdout)
    assert (shown["owners"], shown["floor"]) == ([other.name], None)
    weak = registry.cli("repo", "create", f"{org}/m", token=other.actor.token)
    assert weak.returncode == 0, weak.stderr  # no floor any more: the default policy will do


def test_a_repository_whose_default_policy_drops_below_the_floor_refuses_decisions(
    tmp_path: Path,
) -> None:
    """A repository without its own policy follows the operator's --policy; when that changes
    to one weaker than the org's floor, every decision through repo_policy refuses (409)."""
    from modelward.attest.policy import PolicyFloor
    from modelward.registry.db import Database, make_engine, upgrade
    from modelward.registry.domains.auth.service import Caller
    from modelward.registry.domains.orgs.service import put_org
    from modelward.registry.domains.principals.service import create_principal
    from modelward.registry.domains.repos.service import create_repo, get_repo, repo_policy
    from modelward.registry.policy import FloorNotMet

    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    db = Database(make_engine(url))
    try:
        with db.write() as session:
            admin = create_principal(session, name="root", role="admin", actor="test")
        caller = Caller(admin.id, admin.name, admin.role)
        with db.write() as session:
            put_org(
                session,
                name="acme",
                owner_names=None,
                caller=caller,
                floor=PolicyFloor.model_validate(floor(("prod", 2))),
                default_policy_yaml=None,
            )
            create_repo(
                session, name="acme/m", policy_yaml=None, caller=caller, default_policy_yaml=MEETS
            )
        with db.read() as session:
            assert repo_policy(get_repo(session, "acme/m", caller), MEETS).aliases
            weaker = MEETS.replace("approvals: 2", "approvals: 1")
            with pytest.raises(FloorNotMet) as info:
                repo_policy(get_repo(session, "acme/m", caller), weaker)
            assert info.value.status == 409
            assert "acme/m" in info.value.message
    finally:
        db.dispose()
