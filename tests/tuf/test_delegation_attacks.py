"""One test per attack on who the TUF delegations let sign (docs/tuf.md#roles, #keys,
#proposals), against a real ``modelward serve`` on loopback, SQLite and PostgreSQL; where
the attacker is a database writer, the test edits the registry's database directly.

- a protected rule whose pattern spells another kind's role name (``*``, ``online``) must
  stay the reviewers' role: the proposer may not sign her own protected move;
- a database writer who inserts a reviewer, a token and a signing key: the rows carry no
  seal the registry made (``signing.tuf.seals``), so the inserted key is in no delegation
  and signs nothing, with the targets key online (the embedded default) or offline;
- a withdrawn approval's signature and a revoked key's signature stop counting, and a role
  whose current version a revoked key signed takes the next proposal (never a 500).
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, select
from tuf.api.metadata import Metadata, Targets

from modelward.attest.keys import generate_private_key, keyid, public_key_pem, save_private_key
from modelward.attest.tuf import online_role, open_role, protected_role, tuf_signer
from modelward.client.api import APIError
from modelward.registry.domains.auth.service import hash_token
from modelward.registry.models import Principal, SigningKey, Token
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
    start_registry,
)

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
JSON = dict[str, Any]
PROD_POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1}\n"
    "  - {pattern: '*', roles: [publisher]}\n"
)


@pytest.fixture(params=KINDS)
def reg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    """A registry of its own (some tests take its targets key offline)."""
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    registry = start_registry(request.param, tmp_path / "reg", pg)
    try:
        yield registry
    finally:
        registry.close()
        registry.server.stop()


def new_reviewer(reg: Registry) -> Publisher:
    actor = reg.actor("reviewer")
    key = generate_private_key()
    pem = public_key_pem(key.public_key()).decode()
    return Publisher(actor, key, str(reg.admin.register_key(pem, principal=actor.name)["keyid"]))


def sign(signer: Publisher, proposal_id: int) -> JSON:
    """What ``approve --key`` does: sign the payload locally, send the signature."""
    proposal = signer.actor.client.tuf_proposal(proposal_id)
    payload = Metadata.from_bytes(base64.b64decode(proposal["payload"]))
    signature = payload.sign(tuf_signer(signer.key))
    return signer.actor.client.tuf_sign(proposal_id, signature.keyid, signature.signature)


def propose(pub: Publisher, repo: str, alias: str, digest: str) -> int:
    answer = pub.actor.client.set_alias(repo, alias, digest, propose=True)
    return int(answer["pending"]["id"])


def delegated_roles(reg: Registry) -> dict[str, JSON]:
    [version] = [r["version"] for r in reg.admin.tuf_status()["roles"] if r["role"] == "targets"]
    targets = Metadata[Targets].from_bytes(reg.admin.tuf_file(f"{version}.targets.json")).signed
    assert targets.delegations is not None
    return {name: role.to_dict() for name, role in (targets.delegations.roles or {}).items()}


def refused(info: pytest.ExceptionInfo[APIError], status: int, code: str) -> None:
    assert (info.value.status, info.value.code) == (status, code), info.value


# -- item 1: role names ---------------------------------------------------------------------
@pytest.mark.parametrize("pattern", ["*", "online"])
def test_a_protected_rule_spelt_like_another_role_does_not_let_the_proposer_sign_her_own_move(
    reg: Registry, tmp_path: Path, pattern: str
) -> None:
    policy = (
        "version: 1\ntrust_registered_signers: true\naliases:\n"
        f"  - {{pattern: '{pattern}', roles: [publisher], protected: true, approvals: 1}}\n"
        "  - {pattern: 'dev-*', roles: [publisher], online: true}\n"
        "  - {pattern: '*', roles: [publisher]}\n"
        if pattern == "online"
        else "version: 1\ntrust_registered_signers: true\naliases:\n"
        "  - {pattern: '*', roles: [publisher], protected: true, approvals: 1}\n"
    )
    pub, reviewer = new_publisher(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=policy)
    digest = push_new(pub, repo, tmp_path)
    alias = "online" if pattern == "online" else "prod"
    proposal = propose(pub, repo, alias, digest)
    # the proposer signs her own protected move: her key is not the reviewers'
    with pytest.raises(APIError) as info:
        sign(pub, proposal)
    refused(info, 403, "signature_refused")
    # the reviewers' role, under a name no other kind of role has
    roles = delegated_roles(reg)
    guarded = protected_role(repo, pattern)
    assert guarded == f"{repo.replace('/', ':')}@={pattern}"
    assert roles[guarded]["keyids"] == [reviewer.keyid]
    assert guarded not in (online_role(repo), open_role(repo))
    assert reg.admin.tuf_proposal(proposal)["role"] == guarded
    assert sign(reviewer, proposal)["state"] == "published"
    shown = reg.admin.get_alias(repo, alias)
    assert (shown["digest"], shown["signed"]) == (digest, True)


@pytest.mark.sqlite_only
def test_a_protected_pattern_written_twice_is_refused_at_policy_load(reg: Registry) -> None:
    policy = (
        "version: 1\ntrust_registered_signers: true\naliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true, approvals: 2}\n"
        "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1}\n"
    )
    with pytest.raises(APIError) as info:
        reg.admin.create_repo(f"o{secrets.token_hex(4)}/m", policy)
    refused(info, 400, "invalid_policy")
    assert "aliases[1]: pattern 'prod' repeats aliases[0]" in str(info.value)


# -- item 2: a database writer's key ----------------------------------------------------------
def _insert_rex(reg: Registry) -> tuple[Publisher, str]:
    """As a database writer: a reviewer "rex", a token and a signing key for him."""
    from modelward.client.api import RegistryClient
    from tests.registry.conftest import Actor

    key = generate_private_key()
    name, token_id = f"rex-{secrets.token_hex(3)}", secrets.token_hex(8)
    token = f"mwt_{token_id}_{secrets.token_urlsafe(32)}"
    engine = create_engine(reg.database_url)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(Principal).values(name=name, role="reviewer", created_at=now))
        pid = conn.scalar(select(Principal.id).where(Principal.name == name))
        conn.execute(
            insert(Token).values(
                id=token_id, principal_id=pid, secret_hash=hash_token(token), created_at=now
            )
        )
        kid = keyid(key.public_key())
        conn.execute(
            insert(SigningKey).values(
                keyid=kid,
                principal_id=pid,
                public_key_pem=public_key_pem(key.public_key()).decode(),
                created_at=now,
            )
        )
    engine.dispose()
    client = RegistryClient(reg.url, token, timeout=60)
    return Publisher(Actor(name, "reviewer", token, client), key, kid), token


def test_a_db_writers_key_signs_nothing_under_the_embedded_default_and_the_registry_says_so(
    reg: Registry, tmp_path: Path
) -> None:
    # issue 30 item 9: the registry delegates only rows it sealed (signing.tuf.seals)
    status = reg.admin.tuf_status()
    assert (status["targets_key"], status["protects_against_db_writer"]) == ("online", True)
    assert "a database writer cannot add a key" in status["db_writer"]
    assert "a database writer cannot add a key" in reg.server.log()  # serve's stderr
    text = reg.cli("trust", "status", check=True).stdout
    assert "protects against a database writer: yes" in text
    pub, _reviewer = new_publisher(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=PROD_POLICY)
    digest = push_new(pub, repo, tmp_path)
    rex, _token = _insert_rex(reg)
    proposal = propose(pub, repo, "prod", digest)
    assert rex.keyid not in delegated_roles(reg)[protected_role(repo, "prod")]["keyids"]
    with pytest.raises(APIError) as info:
        sign(rex, proposal)
    refused(info, 403, "signature_refused")
    rex.actor.client.close()


@pytest.mark.sqlite_only
def test_a_db_writers_key_signs_nothing_once_targets_is_offline(
    reg: Registry, tmp_path: Path
) -> None:
    root_key, targets_key = tmp_path / "root.key", tmp_path / "targets.key"
    save_private_key(generate_private_key(), root_key)
    save_private_key(generate_private_key(), targets_key)
    reg.cli(
        "trust", "init", "--root-key", str(root_key), "--targets-key", str(targets_key), check=True
    )
    status = json.loads(reg.cli("trust", "status", "--json", check=True).stdout)
    assert (status["targets_key"], status["protects_against_db_writer"]) == ("offline", True)
    pub, _reviewer = new_publisher(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=PROD_POLICY)
    # the admins sign the delegations for the new repository and reviewer
    reg.admin.tuf_sync()
    for pending in reg.admin.tuf_proposals(pending=True):
        if pending["role"] == "targets":
            reg.cli("trust", "sign", str(pending["id"]), "--key", str(targets_key), "--yes",
                    "--accept-signer-changes", check=True)  # fmt: skip
    digest = push_new(pub, repo, tmp_path)
    before = delegated_roles(reg)[protected_role(repo, "prod")]["keyids"]
    rex, _token = _insert_rex(reg)
    proposal = propose(pub, repo, "prod", digest)
    # rex's rows carry no seal (signing.tuf.seals): not even a proposal for the admins
    assert delegated_roles(reg)[protected_role(repo, "prod")]["keyids"] == before
    waiting = [p for p in reg.admin.tuf_proposals(pending=True) if p["role"] == "targets"]
    assert not waiting, "an unsealed row changes no delegation"
    with pytest.raises(APIError) as info:
        sign(rex, proposal)
    refused(info, 403, "signature_refused")
    assert reg.admin.tuf_proposal(proposal)["state"] == "pending"
    rex.actor.client.close()


# -- item 3: withdrawn and revoked signatures ---------------------------------------------------
TWO_POLICY = PROD_POLICY.replace("approvals: 1", "approvals: 2")


def test_a_withdrawn_approvals_signature_no_longer_counts(reg: Registry, tmp_path: Path) -> None:
    pub, r1, r2 = new_publisher(reg), new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=TWO_POLICY)
    digest = push_new(pub, repo, tmp_path)
    proposal = propose(pub, repo, "prod", digest)
    assert len(sign(r1, proposal)["signatures"]) == 1
    answer = r1.actor.client.withdraw_approval(repo, digest, "prod", "found a regression")
    assert answer["unsigned_proposals"] == [proposal]
    assert reg.admin.tuf_proposal(proposal)["signatures"] == []
    # r2's signature alone is one of two: the move stays pending
    after = sign(r2, proposal)
    assert (after["state"], len(after["signatures"])) == ("pending", 1)
    events = [e for e in reg.admin.iter_audit() if e["action"] == "tuf.signature.withdraw"]
    assert any(e["actor"] == r1.name and proposal in e["details"]["proposals"] for e in events)


def test_a_revoked_keys_signature_no_longer_counts_and_the_alias_is_not_stuck(
    reg: Registry, tmp_path: Path
) -> None:
    pub, r1, r2 = new_publisher(reg), new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=PROD_POLICY)
    first = push_new(pub, repo, tmp_path)
    assert sign(r1, propose(pub, repo, "prod", first))["state"] == "published"
    pending = propose(pub, repo, "prod", push_new(pub, repo, tmp_path))
    reg.admin.revoke_key(r1.keyid, force=True)  # it unsigns prod: meant
    # same transaction: out of the delegation; the registry refuses its signatures
    assert r1.keyid not in delegated_roles(reg)[protected_role(repo, "prod")]["keyids"]
    assert reg.admin.tuf_proposal(pending)["keyids"] == [r2.keyid]
    with pytest.raises(APIError) as info:
        sign(r1, pending)
    refused(info, 403, "forbidden")
    # prod's current version was signed by the revoked key alone, so it no longer verifies:
    # a new proposal is still made (never a 500), and r2 publishes it
    third = push_new(pub, repo, tmp_path)
    later = propose(pub, repo, "prod", third)
    assert sign(r2, later)["state"] == "published"
    shown = reg.admin.get_alias(repo, "prod")
    assert (shown["digest"], shown["signed"]) == (third, True)
    fourth = push_new(pub, repo, tmp_path)
    assert sign(r2, propose(pub, repo, "prod", fourth))["state"] == "published"


@pytest.mark.sqlite_only
def test_a_signature_collected_before_its_key_was_revoked_is_not_counted(
    reg: Registry, tmp_path: Path
) -> None:
    pub, r1, r2 = new_publisher(reg), new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=TWO_POLICY)
    digest = push_new(pub, repo, tmp_path)
    proposal = propose(pub, repo, "prod", digest)
    sign(r1, proposal)
    reg.admin.revoke_key(r1.keyid)
    assert reg.admin.tuf_proposal(proposal)["signatures"] == []
    after = sign(r2, proposal)
    assert (after["state"], len(after["signatures"])) == ("pending", 1)
    r3 = new_reviewer(reg)
    reg.admin.tuf_sync()  # a new key joins the delegations with the next sync
    assert sign(r3, proposal)["state"] == "published"


# -- issue 22 item 5: a late approval -----------------------------------------------------------
def test_a_late_approve_says_the_alias_already_points_there(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    reg = fresh_registry
    pub, r1, r2 = new_publisher(reg), new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=PROD_POLICY)
    digest = push_new(pub, repo, tmp_path)
    propose(pub, repo, "prod", digest)
    keys = {}
    for reviewer in (r1, r2):
        keys[reviewer.name] = tmp_path / f"{reviewer.name}.key"
        save_private_key(reviewer.key, keys[reviewer.name])
    ref = f"{repo}@{digest}"
    first = reg.cli("approve", ref, "--alias", "prod", "--key", str(keys[r1.name]),
                    token=r1.actor.token, check=True)  # fmt: skip
    assert "published" in first.stdout
    late = reg.cli("approve", ref, "--alias", "prod", "--key", str(keys[r2.name]),
                   token=r2.actor.token)  # fmt: skip
    assert late.returncode == 0, late.stdout + late.stderr
    assert f"{repo}@prod already points to {digest} (signed): nothing to approve" in late.stdout
    as_json = reg.cli("approve", ref, "--alias", "prod", "--key", str(keys[r2.name]), "--json",
                      token=r2.actor.token, check=True)  # fmt: skip
    assert json.loads(as_json.stdout)["already"] is True


def test_approve_withdraw_takes_a_signed_approval_off_the_pending_move(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    reg = fresh_registry
    pub, r1, _r2 = new_publisher(reg), new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=TWO_POLICY)
    digest = push_new(pub, repo, tmp_path)
    proposal = propose(pub, repo, "prod", digest)
    key = tmp_path / "r1.key"
    save_private_key(r1.key, key)
    ref = f"{repo}@{digest}"
    reg.cli("approve", ref, "--alias", "prod", "--key", str(key), token=r1.actor.token,
            check=True)  # fmt: skip
    assert len(reg.admin.tuf_proposal(proposal)["signatures"]) == 1
    withdrawn = reg.cli("approve", ref, "--alias", "prod", "--withdraw", "--reason", "a regression",
                        token=r1.actor.token, check=True)  # fmt: skip
    assert f"your signature taken off pending proposal(s) {proposal}" in withdrawn.stdout
    assert reg.admin.tuf_proposal(proposal)["signatures"] == []
