"""Issue 28 finding 4: the admin's missing commands, through the real ``modelward`` CLI against
a real ``serve`` (SQLite and PostgreSQL): tombstone a bundle, list and revoke tokens by id,
disable/enable a principal and change its role, remove a publisher, lift a quarantine (a
signed, reviewer-approved, audited decision, like setting one), and a quota set below the
usage that warns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelward.attest.keys import save_private_key
from modelward.client.api import ForbiddenError, UnauthorizedError
from tests.registry.conftest import Publisher, Registry, new_publisher, push_new, unique


def _audited(reg: Registry, action: str, subject: str) -> list[dict[str, object]]:
    return [e for e in reg.admin.iter_audit() if e["action"] == action and e["subject"] == subject]


def _json(reg: Registry, *args: str, token: str | None = None) -> dict[str, object]:
    result = reg.cli(*args, "--json", token=token)
    assert result.returncode == 0, result.stderr
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def test_admin_lists_tokens_without_secrets_and_revokes_one_by_id(registry: Registry) -> None:
    who = registry.actor("reader")
    second = str(registry.admin.create_token(who.name)["id"])
    listed = _json(registry, "admin", "token", "list", "--principal", who.name)
    tokens = listed["tokens"]
    assert isinstance(tokens, list)
    assert len(tokens) == 2
    assert {t["principal"] for t in tokens} == {who.name}
    assert second in {t["id"] for t in tokens}
    text = json.dumps(listed)
    assert who.token not in text
    assert "secret" not in text
    assert "hash" not in text
    plain = registry.cli("admin", "token", "list", "--principal", who.name, check=True).stdout
    assert second in plain
    assert who.token not in plain
    # revoke by id: that token stops, the other one works on
    first = next(t["id"] for t in tokens if t["id"] != second)
    registry.cli("admin", "token", "revoke", str(first), check=True)
    with pytest.raises(UnauthorizedError, match=str(first)):
        who.client.whoami()
    again = _json(registry, "admin", "token", "list", "--principal", who.name)["tokens"]
    assert isinstance(again, list)
    assert next(t for t in again if t["id"] == first)["revoked_at"] is not None
    missing = registry.cli("admin", "token", "list", "--principal", unique("nobody"))
    assert missing.returncode == 1
    assert "no principal named" in missing.stderr


def test_a_disabled_principal_is_refused_at_once_and_enabled_again(registry: Registry) -> None:
    who = registry.actor("reviewer")
    assert who.client.whoami()["principal"] == who.name
    off = _json(registry, "admin", "principal", "disable", who.name)
    assert off["disabled"] is True
    with pytest.raises(UnauthorizedError, match="disabled"):
        who.client.whoami()
    listed = registry.cli("admin", "principal", "list", check=True).stdout.splitlines()
    assert f"{who.name}\treviewer\tdisabled" in listed
    on = registry.cli("admin", "principal", "enable", who.name, check=True)
    assert "enabled principal" in on.stdout
    assert who.client.whoami()["principal"] == who.name
    assert [e["actor"] for e in _audited(registry, "principal.disable", who.name)] == ["admin"]
    assert len(_audited(registry, "principal.enable", who.name)) == 1
    # the registry never locks itself out: its last enabled admin cannot be disabled
    admins = [p for p in registry.admin.list_principals() if p["role"] == "admin"]
    if len(admins) == 1:
        last = registry.cli("admin", "principal", "disable", "admin")
        assert last.returncode == 1
        assert "no enabled admin" in last.stderr


def test_set_role_is_validated_audited_and_takes_effect(registry: Registry) -> None:
    who = registry.actor("reader")
    bad = registry.cli("admin", "principal", "set-role", who.name, "superuser")
    assert bad.returncode == 2
    assert "superuser" in bad.stderr
    assert "Traceback" not in bad.stderr
    changed = _json(registry, "admin", "principal", "set-role", who.name, "publisher")
    assert changed["role"] == "publisher"
    assert who.client.whoami()["role"] == "publisher"
    [event] = _audited(registry, "principal.role", who.name)
    assert event["details"] == {"from": "reader", "to": "publisher"}
    missing = registry.cli("admin", "principal", "set-role", unique("nobody"), "reader")
    assert missing.returncode == 1
    assert "no principal named" in missing.stderr


def test_remove_publisher_stops_its_pushes(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    push_new(pub, repo, tmp_path)
    removed = _json(registry, "repo", "remove-publisher", repo, pub.name)
    assert pub.name not in (removed["publishers"] or [])  # type: ignore[operator]
    with pytest.raises(ForbiddenError):
        push_new(pub, repo, tmp_path)
    assert [e["details"] for e in _audited(registry, "repo.publisher.remove", repo)] == [
        {"principal": pub.name}
    ]
    again = registry.cli("repo", "remove-publisher", repo, pub.name)
    assert again.returncode == 1
    assert f"{pub.name} is not a publisher of {repo}" in again.stderr


def test_bundle_delete_tombstones_with_a_reason(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    blank = registry.cli("bundle", "delete", f"{repo}@{digest}", "--reason", " ")
    assert blank.returncode == 2
    assert "--reason" in blank.stderr
    by_publisher = registry.cli(
        "bundle", "delete", f"{repo}@{digest}", "--reason", "x", token=pub.actor.token
    )
    assert by_publisher.returncode == 1
    deleted = _json(registry, "bundle", "delete", f"{repo}@{digest}", "--reason", "leaked data")
    assert deleted["tombstoned"] is True
    assert registry.admin.get_bundle(repo, digest)["tombstoned"] is True
    [event] = _audited(registry, "bundle.tombstone", f"{repo}@{digest}")
    assert event["details"] == {"reason": "leaked data"}


def test_quota_set_below_usage_warns_and_says_what_it_blocks(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    push_new(pub, repo, tmp_path)
    used = int(_json(registry, "repo", "quota", "show", repo)["usage_bytes"])  # type: ignore[call-overload]
    assert used > 1
    below = registry.cli("repo", "quota", "set", repo, str(used - 1), "--json", check=True)
    answer = json.loads(below.stdout)
    assert (answer["usage_bytes"], answer["quota_bytes"]) == (used, used - 1)
    assert f"warning: {repo} uses {used} bytes" in below.stderr
    assert "new pushes to it are refused until usage falls below" in below.stderr
    above = registry.cli("repo", "quota", "set", repo, str(used + 1), check=True)
    assert "warning" not in above.stderr


def _key_file(who: Publisher, base: Path) -> Path:
    path = base / f"{who.name}.key"
    save_private_key(who.key, path)
    return path


def test_quarantine_lift_is_a_signed_reviewer_decision(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    rev = new_publisher(registry, "reviewer")
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    ref = f"{repo}@{digest}"
    key = str(_key_file(rev, tmp_path))
    held = _json(registry, "quarantine", ref, "--reason", "bad weights", "--key", key,
                 token=rev.actor.token)  # fmt: skip
    assert held["signed"] is True
    # a publisher may not lift it; a blank reason is a usage error
    by_pub = registry.cli("quarantine", "lift", ref, "--reason", "fine", token=pub.actor.token)
    assert by_pub.returncode == 1
    blank = registry.cli("quarantine", "lift", ref, "--reason", "", token=rev.actor.token)
    assert blank.returncode == 2
    # without a signature the lift is only proposed: the quarantine holds
    proposed = registry.cli("quarantine", "lift", ref, "--reason", "false alarm", "--json",
                            token=rev.actor.token)  # fmt: skip
    assert proposed.returncode == 0, proposed.stderr
    assert json.loads(proposed.stdout)["lifted"] is False
    assert "still in force" in proposed.stderr
    assert registry.admin.get_bundle(repo, digest)["quarantined"] is True
    # signed by a reviewer: lifted, audited with who signed it
    lifted = _json(registry, "quarantine", "lift", ref, "--reason", "false alarm", "--key", key,
                   token=rev.actor.token)  # fmt: skip
    assert lifted["lifted"] is True
    assert registry.admin.get_bundle(repo, digest)["quarantined"] is False
    [event] = _audited(registry, "bundle.quarantine.lift", ref)
    assert event["details"]["signed_by"] == rev.name  # type: ignore[index]
    assert event["details"]["reason"] == "false alarm"  # type: ignore[index]
    gone = registry.cli("quarantine", "lift", ref, "--reason", "again", token=rev.actor.token)
    assert gone.returncode == 1
    assert "is not quarantined" in gone.stderr


def test_a_lift_never_puts_a_bundle_back_on_an_alias(registry: Registry, tmp_path: Path) -> None:
    pub = new_publisher(registry)
    rev = registry.actor("reviewer")
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path, alias="canary")
    ref = f"{repo}@{digest}"
    registry.cli("quarantine", ref, "--reason", "bad", token=rev.token, check=True)
    refused = registry.cli("quarantine", "lift", ref, "--reason", "ok", token=rev.token)
    assert refused.returncode == 1
    assert f"{repo}@canary" in refused.stderr
    assert registry.admin.get_bundle(repo, digest)["quarantined"] is True
