"""Issue 36 item 2: every change of who may sign goes through one server-side impact check
(registry/domains/signing/impact.py), against a real ``modelward serve`` (SQLite and
PostgreSQL):

- ``admin principal set-role REVIEWER reader`` that would leave a two-approval ``prod``
  short is refused naming ``prod`` (audited), goes through with ``--force`` (audited
  ``tuf.unsigning.forced``), and ``GET /v1/tuf/status`` then lists the role short of its
  threshold;
- a reviewer's ``DELETE /v1/keys/ID`` that would unsign ``prod`` is refused by default
  (it answered 204 silently before);
- disabling a signer of ``prod``, removing a publisher whose signature a live alias needs
  and raising a policy's approvals are refused the same way, and ``POST /v1/tuf/impact``
  previews each with the same answer;
- the preview names a rollout plan as a rollout plan (issue 39), never as a quarantine.

Signatures are made as ``approve --key`` makes them (tests/tuf/test_delegation_attacks.py
``sign``): locally over the proposal's payload, sent through the client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from modelward.attest.tuf import open_role, protected_role
from modelward.client.errors import APIError
from modelward.registry.domains.signing.tuf.rotation import SignaturesLost, kind_of
from tests.registry.conftest import Publisher, Registry, new_publisher, push_new
from tests.tuf.test_delegation_attacks import TWO_POLICY, new_reviewer, propose, sign


def _released(reg: Registry, tmp: Path) -> tuple[Publisher, Publisher, Publisher, str]:
    """A repository whose two-approval prod is published, signed by two fresh reviewers."""
    pub, r1, r2 = new_publisher(reg), new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(pub, policy_yaml=TWO_POLICY)
    proposal = propose(pub, repo, "prod", push_new(pub, repo, tmp))
    sign(r1, proposal)
    assert sign(r2, proposal)["state"] == "published"
    return pub, r1, r2, repo


def _refused(reg: Registry, change: str) -> list[dict[str, object]]:
    return [
        e
        for e in reg.admin.iter_audit()
        if e["action"] == "denied"
        and e["details"].get("code") == "signers_would_be_short"
        and change in str(e["details"].get("message"))
    ]


def _forced(reg: Registry, change: str) -> list[dict[str, object]]:
    return [
        e
        for e in reg.admin.iter_audit()
        if e["action"] == "tuf.unsigning.forced" and e["subject"] == change
    ]


def _role(reg: Registry, name: str) -> str:
    return str(next(p["role"] for p in reg.admin.list_principals() if p["name"] == name))


def test_role_change_that_leaves_prod_short_is_refused_then_forced_and_listed_short(
    registry: Registry, tmp_path: Path
) -> None:
    _, r1, _, repo = _released(registry, tmp_path)
    line = f"{repo}@prod: 1 of 2 signatures would remain; workers will refuse it"

    # the API refuses it by default, naming prod; the refusal is audited; nothing changed
    with pytest.raises(APIError) as refused:
        registry.admin.set_principal_role(r1.name, "reader")
    assert (refused.value.status, refused.value.code) == (409, "signers_would_be_short")
    assert line in refused.value.message
    assert [x["target"] for x in refused.value.detail["lost"]] == [f"{repo}@prod"]
    assert _refused(registry, f"set role of {r1.name} to reader")
    assert _role(registry, r1.name) == "reviewer"

    # the CLI previews it through the same check and changes nothing without --force
    cli = registry.cli("admin", "principal", "set-role", r1.name, "reader")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert f"would unsign: {line}" in cli.stderr
    assert "--force" in cli.stderr
    assert _role(registry, r1.name) == "reviewer"

    # with the override it goes through, audited with what it left short
    forced = registry.cli("admin", "principal", "set-role", r1.name, "reader", "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"warning: {line}" in forced.stderr
    assert _role(registry, r1.name) == "reader"
    [event] = _forced(registry, f"set role of {r1.name} to reader")
    assert line in str(event["details"])

    # trust status's API names the role short of its threshold now, and what it decides
    short = {r["role"]: r for r in registry.admin.tuf_status()["short_of_threshold"]}
    prod = short[protected_role(repo, "prod")]
    assert (prod["threshold"], prod["valid_signers"]) == (2, 1)
    assert f"{repo}@prod" in prod["decides"]
    text = registry.cli("trust", "status", check=True).stdout
    assert f"SHORT: {protected_role(repo, 'prod')} v" in text
    assert "has 1 of the 2 valid signer(s) it needs: workers refuse what it signs" in text


def test_api_key_deletion_that_unsigns_prod_is_refused_by_default(
    registry: Registry, tmp_path: Path
) -> None:
    _, r1, _, repo = _released(registry, tmp_path)
    # a reviewer deletes her own key over the API: refused (it answered 204 silently)
    with pytest.raises(APIError) as refused:
        r1.actor.client.revoke_key(r1.keyid)
    assert (refused.value.status, refused.value.code) == (409, "signers_would_be_short")
    assert f"{repo}@prod: 1 of 2 signatures would remain" in refused.value.message
    keys = {k["keyid"]: k for k in registry.admin.list_keys()}
    assert keys[r1.keyid]["revoked"] is False
    assert _refused(registry, f"revoke key {r1.keyid}")

    # the preview answers the same; with force the key goes, audited
    preview = r1.actor.client.tuf_impact(change="revoke_key", args={"keyid": r1.keyid})
    assert [x["target"] for x in preview["lost"]] == [f"{repo}@prod"]
    r1.actor.client.revoke_key(r1.keyid, force=True)
    assert {k["keyid"]: k for k in registry.admin.list_keys()}[r1.keyid]["revoked"] is True
    assert _forced(registry, f"revoke key {r1.keyid}")


def test_disabling_a_signer_of_prod_is_refused_naming_prod(
    registry: Registry, tmp_path: Path
) -> None:
    _, _, r2, repo = _released(registry, tmp_path)
    preview = registry.admin.tuf_impact(change="disable_principal", args={"principal": r2.name})
    assert [x["target"] for x in preview["lost"]] == [f"{repo}@prod"]
    with pytest.raises(APIError) as refused:
        registry.admin.set_principal_disabled(r2.name, True)
    assert refused.value.code == "signers_would_be_short"
    assert f"{repo}@prod" in refused.value.message
    listed = {p["name"]: p for p in registry.admin.list_principals()}
    assert listed[r2.name]["disabled"] is False
    cli = registry.cli("admin", "principal", "disable", r2.name)
    assert cli.returncode == 1
    assert f"would unsign: {repo}@prod" in cli.stderr


def test_removing_the_publisher_who_signed_dev_is_refused_naming_dev(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    # dev: the publishers' role, threshold 1, signed by pub's key (what alias set --key does)
    moved = pub.actor.client.set_alias(repo, "dev", digest, propose=True)
    assert sign(pub, int(moved["proposal"]))["state"] == "published"
    cli = registry.cli("repo", "remove-publisher", repo, pub.name)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert f"would unsign: {repo}@dev: 0 of 1 signatures would remain" in cli.stderr
    assert pub.name in registry.admin.get_repo(repo)["publishers"]
    with pytest.raises(APIError) as refused:
        registry.admin.remove_publisher(repo, pub.name)
    assert refused.value.code == "signers_would_be_short"
    assert refused.value.detail["lost"][0]["role"] == open_role(repo)
    done = registry.cli("repo", "remove-publisher", repo, pub.name, "--force")
    assert done.returncode == 0, done.stderr
    assert _forced(registry, f"remove publisher {pub.name} from {repo}")


def test_raising_prods_approvals_past_its_signatures_is_refused(
    registry: Registry, tmp_path: Path
) -> None:
    _, _, _, repo = _released(registry, tmp_path)
    three = TWO_POLICY.replace("approvals: 2", "approvals: 3")
    with pytest.raises(APIError) as refused:
        registry.admin.set_policy(repo, three)
    assert refused.value.code == "signers_would_be_short"
    assert f"{repo}@prod: 2 of 3 signatures would remain" in refused.value.message
    assert "approvals: 2" in registry.admin.get_repo(repo)["policy_yaml"]
    registry.admin.set_policy(repo, three, force=True)
    assert _forced(registry, f"replace the policy of {repo}")


def test_a_change_that_unsigns_nothing_goes_ahead_unprompted(
    registry: Registry, tmp_path: Path
) -> None:
    _, _, _, repo = _released(registry, tmp_path)
    spare = new_reviewer(registry)  # a third reviewer signed nothing
    preview = registry.admin.tuf_impact(
        change="set_role", args={"principal": spare.name, "role": "reader"}
    )
    assert preview["lost"] == []
    done = registry.cli("admin", "principal", "set-role", spare.name, "reader")
    assert done.returncode == 0, done.stderr
    assert "would unsign" not in done.stderr
    assert protected_role(repo, "prod") not in {
        r["role"] for r in registry.admin.tuf_status()["short_of_threshold"]
    }


def test_the_preview_names_a_rollout_plan_as_a_rollout_plan() -> None:
    plan = SignaturesLost("acme/tiny/rollouts/prod", "acme:tiny@prod", 3, "sha256:ab", 1, 2)
    assert kind_of(plan.path) == "rollout plan"
    assert plan.line.startswith("rollout plan of acme/tiny@prod: 1 of 2 signatures")
    assert "quarantine" not in plan.line
    held = SignaturesLost("quarantine/ab", "quarantine", 2, "sha256:ab", 0, 1)
    assert held.line.startswith("quarantine of sha256:ab: 0 of 1 signatures")
    alias = SignaturesLost("acme/tiny/aliases/prod", "acme:tiny@prod", 3, "sha256:ab", 1, 2)
    assert alias.name == "acme/tiny@prod"
