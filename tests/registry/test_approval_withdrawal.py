"""Approvals are the approver's, not the token's; the approver may withdraw one.

An approval counts while its approver is a reviewer or an admin, survives the revocation of
the token that made it (revoking a token ends a credential, not a decision), and stops
counting once the approver withdraws it with a reason (``DELETE .../approvals``): the record
stays, the withdrawal is audited. Only the approver may withdraw their own approval. Real
server, SQLite and PostgreSQL (the CLI test on SQLite).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.client.api import APIError
from tests.registry.conftest import Actor, Registry, new_publisher, push_new


def _mark(registry: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in registry.admin.iter_audit())])


def _events(registry: Registry, mark: int, action: str) -> list[dict[str, object]]:
    return [e for e in registry.admin.iter_audit(after=mark) if e["action"] == action]


def _refused(info: pytest.ExceptionInfo[APIError], status: int, code: str) -> None:
    assert (info.value.status, info.value.code) == (status, code), info.value


def test_withdrawn_approval_no_longer_counts(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    reviewer = registry.actor("reviewer")
    assert reviewer.client.approve(repo, digest, "prod")["approvers"] == [reviewer.name]
    mark = _mark(registry)
    answer = reviewer.client.withdraw_approval(repo, digest, "prod", "found a regression")
    assert answer["approvers"] == []
    assert answer["withdrawn"]["approver"] == reviewer.name
    assert answer["withdrawn"]["reason"] == "found a regression"
    [event] = _events(registry, mark, "bundle.approval.withdraw")
    assert event["actor"] == reviewer.name
    assert event["details"] == {"alias": "prod", "reason": "found a regression"}
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(repo, "prod", digest)
    _refused(info, 403, "approvals_required")
    assert info.value.detail["have"] == []
    # withdrawing twice is a conflict; approving again counts again
    with pytest.raises(APIError) as info:
        reviewer.client.withdraw_approval(repo, digest, "prod", "again")
    _refused(info, 409, "conflict")
    assert reviewer.client.approve(repo, digest, "prod")["approvers"] == [reviewer.name]
    assert pub.actor.client.set_alias(repo, "prod", digest)["digest"] == digest


def test_only_the_approver_may_withdraw_an_approval(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    approver, other = registry.actor("reviewer"), registry.actor("reviewer")
    admin = registry.actor("admin")
    approver.client.approve(repo, digest, "prod")
    mark = _mark(registry)
    for intruder in (other, admin):
        with pytest.raises(APIError) as info:
            intruder.client.withdraw_approval(repo, digest, "prod", "not mine to withdraw")
        _refused(info, 403, "forbidden")
        assert info.value.detail["approvers"] == [approver.name]
    with pytest.raises(APIError) as info:  # not even a reviewer
        pub.actor.client.withdraw_approval(repo, digest, "prod", "my own bundle")
    _refused(info, 403, "forbidden")
    denied = [e for e in _events(registry, mark, "denied") if e["details"].get("status") == 403]
    assert {other.name, admin.name, pub.name} <= {str(e["actor"]) for e in denied}
    assert _events(registry, mark, "bundle.approval.withdraw") == []
    # the approval still counts
    assert pub.actor.client.set_alias(repo, "prod", digest)["digest"] == digest


def test_approval_survives_a_revoked_token(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    reviewer = registry.actor("reviewer")
    token = registry.admin.create_token(reviewer.name)
    with registry.client(str(token["token"])) as laptop:
        laptop.approve(repo, digest, "prod")
        registry.admin.revoke_token(str(token["id"]))
        with pytest.raises(APIError) as info:  # the revoked token can do nothing more
            laptop.withdraw_approval(repo, digest, "prod", "stolen laptop")
        _refused(info, 401, "unauthenticated")
    # the approval is the principal's: it still counts ...
    moved = pub.actor.client.set_alias(repo, "prod", digest)
    assert moved["digest"] == digest
    # ... until the principal (with another token) withdraws it
    second = push_new(pub, repo, tmp_path)
    with registry.client(str(token["token"])) as revoked, pytest.raises(APIError):
        revoked.approve(repo, second, "prod")
    reviewer.client.approve(repo, second, "prod")
    reviewer.client.withdraw_approval(repo, second, "prod", "approved from a stolen laptop")
    with pytest.raises(APIError) as info:
        pub.actor.client.set_alias(repo, "prod", second)
    _refused(info, 403, "approvals_required")


@pytest.mark.parametrize("registry", ["sqlite"], indirect=True)  # CLI behaviour: one backend
def test_cli_approve_withdraw(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    reviewer: Actor = registry.actor("reviewer")
    ref = f"{repo}@{digest}"
    assert registry.cli("approve", ref, "--alias", "prod", token=reviewer.token).returncode == 0
    no_reason = registry.cli("approve", ref, "--alias", "prod", "--withdraw", token=reviewer.token)
    assert no_reason.returncode == 2
    assert "--reason" in no_reason.stderr
    out = registry.cli(
        "approve",
        ref,
        "--alias",
        "prod",
        "--withdraw",
        "--reason",
        "regression",
        "--json",
        token=reviewer.token,
    )
    assert out.returncode == 0, out.stderr
    assert '"approvers": []' in out.stdout
    again = registry.cli(
        "approve", ref, "--alias", "prod", "--withdraw", "--reason", "again", token=reviewer.token
    )
    assert again.returncode == 1
    assert "already withdrew" in again.stderr
    assert "hint" not in again.stderr  # not a stale alias: no alias hint
