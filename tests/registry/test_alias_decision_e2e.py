"""One decision for an alias move, at every door (attest.alias_decision, docs/registry.md#aliases).

Against a real ``modelward serve`` on SQLite and PostgreSQL: ``alias set --dry-run`` reports
every check of the move (not just the first failure), moves nothing, proposes nothing, exits
1 when the move would be refused and is audited; the same refusal answers ``alias set`` and a
tag pushed through ``/v2`` (the OCI error carries the decision's typed reason as its code,
never a message to match).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from modelward.client.api import APIError
from tests.attest.test_evaluation import WORKED_GATES, worked_example
from tests.oci.conftest import bearer_for
from tests.registry.conftest import Registry, new_publisher, push_new
from tests.registry.test_release_gates import _attach, _results, _setup


def _audit(registry: Registry, action: str) -> list[dict[str, object]]:
    return [e for e in registry.admin.iter_audit() if e["action"] == action]


def test_dry_run_reports_every_failed_check_and_moves_nothing(
    registry: Registry, tmp_path: Path
) -> None:
    """A publisher of another repository asks for a protected move whose evaluation has two
    critical safety failures: the dry run names both refusals, the real move only the
    first, and nothing moves or is proposed."""
    pub, evaluator, key, repo = _setup(registry, tmp_path)
    baseline = push_new(pub, repo, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    attached = _attach(
        registry,
        evaluator,
        key,
        f"{repo}@{digest}",
        _results(tmp_path, worked_example()),
        "--baseline",
        f"{repo}@{baseline}",
    )
    assert attached.returncode == 0, attached.stderr
    outsider = new_publisher(registry)
    dry = registry.cli(
        "alias", "set", f"{repo}@prod", digest, "--dry-run", "--json", token=outsider.actor.token
    )
    assert dry.returncode == 1, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True
    assert report["allowed"] is False
    failed = [c["reason"] for c in report["checks"] if not c["passed"]]
    assert failed == ["not_a_publisher_of_repository", "gates_failed"]
    [gates] = [c for c in report["checks"] if c["check"] == "gates"]
    verdicts = {(g["name"], g["slice"]): g["verdict"] for g in gates["evidence"]["gates"]}
    assert verdicts[("max_critical_safety_failures", None)] == "fail"
    # the move itself stops at the first of them
    with pytest.raises(APIError) as info:
        outsider.actor.client.set_alias(repo, "prod", digest, expected_version=0)
    assert (info.value.status, info.value.detail["cause"]) == (
        403,
        "not_a_publisher_of_repository",
    )
    # nothing moved, nothing proposed; the dry run is audited with its verdict
    with pytest.raises(APIError) as missing:
        registry.admin.get_alias(repo, "prod")
    assert missing.value.status == 404
    assert not [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "alias.propose" and e["subject"].startswith(f"{repo}@")
    ]
    [event] = [e for e in _audit(registry, "alias.dry_run") if e["subject"] == f"{repo}@prod"]
    assert event["actor"] == outsider.name
    assert event["details"] == {
        "to": digest,
        "allowed": False,
        "refused": ["not_a_publisher_of_repository", "gates_failed"],
    }
    human = registry.cli("alias", "set", f"{repo}@prod", digest, "--dry-run", token=pub.actor.token)
    assert human.returncode == 1
    assert "FAIL (4c) gates: " in human.stdout
    assert "ok   (1) rule: " in human.stdout
    assert "would be refused; nothing moved" in human.stdout


@pytest.mark.sqlite_only
def test_dry_run_of_an_allowed_move_exits_0_and_moves_nothing(
    registry: Registry, tmp_path: Path
) -> None:
    pub, _evaluator, _key, repo = _setup(registry, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    dry = registry.cli(
        "alias", "set", f"{repo}@dev", digest, "--dry-run", "--json", token=pub.actor.token
    )
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["allowed"] is True
    assert all(c["passed"] for c in report["checks"])
    with pytest.raises(APIError) as missing:
        registry.admin.get_alias(repo, "dev")
    assert missing.value.status == 404


def test_dry_run_takes_no_key_and_no_expected_version(fresh_registry: Registry) -> None:
    digest = "sha256:" + "a" * 64
    result = fresh_registry.cli(
        "alias", "set", "acme/model@prod", digest, "--dry-run", "--expected-version", "1"
    )
    assert result.returncode == 2
    assert "a dry run moves nothing" in result.stderr


@pytest.mark.sqlite_only
def test_tag_pushed_through_oci_is_refused_by_the_same_decision(
    registry: Registry, tmp_path: Path
) -> None:
    """A bundle tagged ``prod`` through /v2 with no evaluation: DENIED, carrying the
    decision's typed reason (``gates_failed``) and its evidence; the tag does not move."""
    pub, _evaluator, _key, repo = _setup(registry, tmp_path)
    digest = push_new(pub, repo, tmp_path)
    manifest = pub.actor.client.get_manifest(repo, digest)
    bearer = bearer_for(registry, pub.name, pub.actor.token, f"repository:{repo}:pull,push")
    put = httpx.put(
        f"{registry.url}/v2/{repo}/manifests/prod",
        content=manifest,
        headers={
            "Authorization": f"Bearer {bearer}",
            "Content-Type": "application/vnd.oci.image.manifest.v1+json",
        },
        timeout=60,
    )
    assert put.status_code == 403, put.text
    [error] = put.json()["errors"]
    assert error["code"] == "DENIED"
    assert error["detail"]["code"] == "gates_failed"
    assert {g["name"] for g in error["detail"]["detail"]["gates"]} >= {
        g for g in WORKED_GATES if g != "required_slices"
    }
    with pytest.raises(APIError) as missing:
        registry.admin.get_alias(repo, "prod")
    assert missing.value.status == 404


@pytest.mark.sqlite_only
def test_publisher_rule_is_one_rule_for_moving_and_publishing(
    registry: Registry, tmp_path: Path
) -> None:
    """auth.authz.may decides both: a publisher added to the repository may move its
    unprotected aliases, and the same publisher removed from the rule's reach may not."""
    pub, _evaluator, _key, repo = _setup(registry, tmp_path)
    other = new_publisher(registry)
    digest = push_new(pub, repo, tmp_path)
    with pytest.raises(APIError) as info:
        other.actor.client.set_alias(repo, "dev", digest, expected_version=0)
    assert info.value.detail["cause"] == "not_a_publisher_of_repository"
    registry.admin.add_publisher(repo, other.name)
    moved = other.actor.client.set_alias(repo, "dev", digest, expected_version=0)
    assert moved["digest"] == digest


def test_signature_meeting_the_threshold_of_a_move_quarantined_meanwhile_publishes_nothing(
    registry: Registry, tmp_path: Path
) -> None:
    """A proposal of a protected move waits for its reviewer; the bundle is quarantined
    meanwhile; the signature that meets the threshold is refused by the same decision
    (step (2), 409 ``bundle_quarantined``) and the alias does not move."""
    from tests.tuf.test_registry_attacks_tuf import new_reviewer, sign

    pub = new_publisher(registry)
    reviewer = new_reviewer(registry)
    policy = (
        "version: 1\ntrust_registered_signers: true\naliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1}\n"
    )
    repo = registry.repo(pub, policy_yaml=policy)
    digest = push_new(pub, repo, tmp_path)
    pending = pub.actor.client.set_alias(repo, "prod", digest, propose=True)["pending"]
    registry.admin.quarantine(repo, digest, "exfiltrates weights")
    with pytest.raises(APIError) as info:
        sign(reviewer, int(pending["id"]))
    assert (info.value.status, info.value.code) == (409, "bundle_quarantined")
    assert "exfiltrates weights" in str(info.value)
    assert registry.admin.tuf_proposal(int(pending["id"]))["state"] == "pending"
    with pytest.raises(APIError) as missing:
        registry.admin.get_alias(repo, "prod")
    assert missing.value.status == 404
