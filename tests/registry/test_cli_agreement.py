"""Small CLI behaviours agree with the one grammar and the documented answers (docs/cli.md),
against a real ``modelward serve`` (SQLite and PostgreSQL):

- ``alias pending`` reads its filter with the reference grammar: a malformed one is a usage
  error (exit 2), never "no proposals"; ``REPO:TAG`` filters on the alias ``TAG``;
- the client and the registry accept the same alias names (one definition, at most 100);
- ``bundle import`` refuses a malformed repository as a usage error, and says when its
  ``--alias`` move is left UNSIGNED, as ``push --alias`` does;
- a keyless ``approve`` of a move that is signed already warns of nothing;
- ``approve --withdraw`` names the proposals the reviewer's signature came off, on every path.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from modelward.attest.keys import save_private_key
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    push_new,
    unique,
)

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: one database is enough here


def _policy(approvals: int) -> str:
    return (
        "version: 1\ntrust_registered_signers: true\naliases:\n"
        f"  - {{pattern: prod, roles: [publisher], protected: true, approvals: {approvals}}}\n"
        "  - {pattern: '*', roles: [publisher]}\n"
    )


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _usage_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def _key(pub: Publisher, tmp: Path) -> Path:
    path = tmp / unique("k") / "key.pem"
    path.parent.mkdir()
    save_private_key(pub.key, path)
    return path


def _proposed(registry: Registry, pub: Publisher, approvals: int, tmp: Path) -> tuple[str, str]:
    """A repository whose ``prod`` is protected, and a bundle proposed for it (pending)."""
    repo = registry.repo(pub, policy_yaml=_policy(approvals))
    digest = push_new(pub, repo, tmp)
    _ok(registry.cli("alias", "set", f"{repo}@prod", digest, token=pub.actor.token))
    return repo, digest


def test_alias_pending_with_a_malformed_filter_is_refused_not_answered_empty(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo, digest = _proposed(registry, pub, 1, tmp_path)
    for bad in (f"{repo}@", f"{repo}:", "Acme/x", f"{repo}@sha256:{'0' * 64}"):
        _usage_error(registry.cli("alias", "pending", bad, token=pub.actor.token), bad)
    # REPO:TAG is the alias TAG, as everywhere else (it filtered on a repository "REPO:prod")
    for ref in (f"{repo}:prod", f"{repo}@prod", repo):
        listed = json.loads(_ok(registry.cli("alias", "pending", ref, "--json")).stdout)
        assert [(p["target"], p["to_digest"]) for p in listed] == [
            (f"{repo}/aliases/prod", digest)
        ], ref
    assert json.loads(_ok(registry.cli("alias", "pending", f"{repo}:dev", "--json")).stdout) == []


def test_an_alias_name_the_registry_refuses_is_refused_by_the_client_first(
    registry: Registry,
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    longest, too_long = "a" * 100, "a" * 101
    _usage_error(
        registry.cli("alias", "get", f"{repo}@{too_long}", token=pub.actor.token), "at most 100"
    )
    _usage_error(registry.cli("alias", "get", f"{repo}:{too_long}", token=pub.actor.token))
    # the longest name both accept reaches the registry, which answers for the alias itself
    got = registry.cli("alias", "get", f"{repo}@{longest}", token=pub.actor.token)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "not_found" in got.stderr, got.stderr


def test_bundle_import_with_a_malformed_repository_is_a_usage_error_and_its_alias_warns(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    source, target = registry.repo(pub), registry.repo(pub)
    digest = push_new(pub, source, tmp_path)
    layout = tmp_path / "layout"
    _ok(
        registry.cli(
            "bundle", "export", f"{source}@{digest}", "--oci-layout", str(layout),
            token=pub.actor.token,
        )
    )  # fmt: skip
    bad = registry.cli("bundle", "import", str(layout), "Acme/Models", token=pub.actor.token)
    _usage_error(bad, "Acme/Models")
    done = _ok(
        registry.cli(
            "bundle", "import", str(layout), target, "--alias", "dev", token=pub.actor.token
        )
    )
    assert f"warning: {target}@dev now names {digest}" in done.stderr, done.stderr
    assert "UNSIGNED" in done.stderr
    assert "modelward trust sign" in done.stderr
    got = json.loads(_ok(registry.cli("alias", "get", f"{target}@dev", "--json")).stdout)
    assert (got["digest"], got["signed"]) == (digest, False)


def test_a_late_keyless_approval_of_a_signed_move_warns_of_nothing(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    first, late = new_publisher(registry, "reviewer"), new_publisher(registry, "reviewer")
    repo, digest = _proposed(registry, pub, 1, tmp_path)
    signed = registry.cli(
        "approve", f"{repo}@{digest}", "--alias", "prod", "--key", str(_key(first, tmp_path)),
        "--json", token=first.actor.token,
    )  # fmt: skip
    assert json.loads(_ok(signed).stdout)["state"] == "published"
    approved = _ok(
        registry.cli(
            "approve", f"{repo}@{digest}", "--alias", "prod", "--json", token=late.actor.token
        )
    )
    answer = json.loads(approved.stdout)
    assert (answer["signed"], answer["sign_with"]) == (True, None)
    assert "UNSIGNED" not in approved.stderr
    assert "warning" not in approved.stderr


def test_withdrawing_an_approval_that_was_also_signed_names_the_unsigned_proposal(
    registry: Registry, tmp_path: Path
) -> None:
    pub, reviewer = new_publisher(registry), new_publisher(registry, "reviewer")
    repo, digest = _proposed(registry, pub, 2, tmp_path)
    (proposal,) = [
        p["id"] for p in pub.actor.client.tuf_proposals(repo=repo, alias="prod", pending=True)
    ]
    # the common path: an approval row (keyless) and a signature on the pending move
    _ok(registry.cli("approve", f"{repo}@{digest}", "--alias", "prod", token=reviewer.actor.token))
    _ok(
        registry.cli(
            "approve", f"{repo}@{digest}", "--alias", "prod", "--key",
            str(_key(reviewer, tmp_path)), token=reviewer.actor.token,
        )
    )  # fmt: skip
    withdrawn = _ok(
        registry.cli(
            "approve", f"{repo}@{digest}", "--alias", "prod", "--withdraw", "--reason",
            "found a regression", "--json", token=reviewer.actor.token,
        )
    )  # fmt: skip
    answer = json.loads(withdrawn.stdout)
    assert answer["unsigned_proposals"] == [proposal]
    assert answer["withdrawn"]["approver"] == reviewer.name
    assert registry.admin.tuf_proposal(proposal)["signatures"] == []
