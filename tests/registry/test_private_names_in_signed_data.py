"""Issue 38 item 4, the last two doors: private names in data every reader is served.

- The signed quarantine role is served to every reader. A digest only private repositories
  hold was listed there with the reason its reviewer gave (``exfil-backdoor-in-q``); now
  its target's signed ``custom`` says only that the reason is withheld, and the worker
  says so, naming where a reader of the repository finds it. A digest a public repository
  holds keeps its signed reason.
- A signature sent to a private-only digest's quarantine proposal is answered as for a
  missing proposal, as its listing is.
- ``POST /v1/tuf/impact`` for a pending top-level targets proposal listed
  ``ORG/secret@prod`` and its digest to any reader; now a reader of the repository is
  shown it, anyone else only how many were withheld, and ``refuse_if_lost`` counts them.

Against a real ``modelward serve`` (SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from modelward.attest.keys import generate_private_key, public_key_pem, save_private_key
from modelward.attest.tuf import quarantine_path
from modelward.client.errors import APIError
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    push_new,
    unique,
)
from tests.tuf.test_delegation_attacks import PROD_POLICY, new_reviewer, propose, reg, sign

__all__ = ["reg"]  # the fixture

PRIVATE_REASON = "exfil-backdoor-in-q"
PUBLIC_REASON = "CVE-2026-0038: tokenizer merges"


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _private_repo(reg: Registry, owner: Publisher) -> str:
    org = unique("ps")
    reg.admin.put_org(org, owners=[owner.name])
    secret = f"{org}/secret"
    reg.cli("repo", "create", secret, "--private", "--json", token=owner.actor.token, check=True)
    return secret


def _served_quarantine(reg: Registry, token: str) -> bytes:
    """The newest quarantine role as ``token``'s holder is served it (timestamp, snapshot)."""
    client = reg.client(token)
    try:
        timestamp = json.loads(client.tuf_file("timestamp.json"))["signed"]
        snapshot_version = timestamp["meta"]["snapshot.json"]["version"]
        snapshot = json.loads(client.tuf_file(f"{snapshot_version}.snapshot.json"))["signed"]
        version = snapshot["meta"]["quarantine.json"]["version"]
        return client.tuf_file(f"{version}.quarantine.json")
    finally:
        client.close()


def _quarantined_and_signed(reviewer: Publisher, repo: str, digest: str, reason: str) -> int:
    proposal = int(reviewer.actor.client.quarantine(repo, digest, reason)["proposal"])
    assert sign(reviewer, proposal)["state"] == "published"
    return proposal


def test_quarantine_role_never_carries_a_private_only_digests_reason(
    registry: Registry, tmp_path: Path
) -> None:
    reg = registry
    owner, public_pub = new_publisher(reg), new_publisher(reg)
    secret = _private_repo(reg, owner)
    reviewer = new_reviewer(reg)
    private_only = push_new(owner, secret, tmp_path)
    # the same bundle in the private repository and in a public one
    public = reg.repo(public_pub)
    both = make_bundle_dir(tmp_path / unique("b"))
    shared = owner.actor.client.push(both, secret, sign=owner.sign).digest
    assert public_pub.actor.client.push(both, public, sign=public_pub.sign).digest == shared
    _quarantined_and_signed(reviewer, secret, private_only, PRIVATE_REASON)
    _quarantined_and_signed(reviewer, secret, shared, PUBLIC_REASON)

    raw = _served_quarantine(reg, reg.actor("reader").token)
    targets = json.loads(raw)["signed"]["targets"]
    # a worker learns the digest is quarantined, and that its reason is withheld
    assert targets[quarantine_path(private_only)]["custom"] == {"reason_withheld": "private"}
    for private_fact in (PRIVATE_REASON, secret, reviewer.name, owner.name):
        assert private_fact.encode() not in raw, private_fact
    # a bundle a public repository holds keeps the reason its reviewer signed
    assert targets[quarantine_path(shared)]["custom"] == {"reason": PUBLIC_REASON}


def test_a_worker_refusing_a_private_only_bundle_says_its_reason_is_withheld(
    registry: Registry, tmp_path: Path
) -> None:
    reg = registry
    owner = new_publisher(reg)
    secret = _private_repo(reg, owner)
    digest = push_new(owner, secret, tmp_path)
    _quarantined_and_signed(new_reviewer(reg), secret, digest, PRIVATE_REASON)
    root, pem = tmp_path / "root.json", tmp_path / "publisher.pem"
    _ok(reg.cli("trust", "root", "--out", str(root), token=owner.actor.token))
    pem.write_bytes(public_key_pem(owner.key.public_key()))
    refused = reg.cli(
        "pull", f"{secret}@{digest}", "--trust-root", str(root), "--public-key", str(pem),
        "--cache-dir", str(tmp_path / "cache"),
        token=owner.actor.token,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())  # the console wraps long lines
    assert "listed by the signed quarantine role" in said, said
    assert "reason withheld: only private repositories hold the bundle" in said, said
    assert f"modelward bundle show ORG/NAME@{digest}" in said, said
    assert PRIVATE_REASON not in said


def test_a_signature_sent_to_a_private_only_quarantine_proposal_is_answered_as_missing(
    registry: Registry, tmp_path: Path
) -> None:
    reg = registry
    owner = new_publisher(reg)
    secret = _private_repo(reg, owner)
    digest = push_new(owner, secret, tmp_path)
    proposal = int(
        reg.actor("reviewer").client.quarantine(secret, digest, PRIVATE_REASON)["proposal"]
    )
    outsider = new_publisher(reg)  # holds a registered key, reads no private repository
    answers = []
    for proposal_id in (proposal, 2**31 - 1):  # the private one, and one never made
        with pytest.raises(APIError) as refused:
            outsider.actor.client.tuf_sign(proposal_id, outsider.keyid, "00" * 64)
        said = f"{refused.value} {refused.value.detail}"
        said = said.replace(f"proposal {proposal_id}", "proposal N")
        answers.append((refused.value.status, refused.value.code, said))
    assert answers[0] == answers[1], answers
    assert answers[0][0] == 404


def _sign_pending_targets(reg: Registry, targets_key: Path) -> None:
    for proposal in [p for p in reg.admin.tuf_proposals() if p["role"] == "targets"]:
        _ok(
            reg.cli(
                "trust", "sign", str(proposal["id"]), "--key", str(targets_key), "--yes",
                "--accept-signer-changes",
            )
        )  # fmt: skip


def test_impact_of_a_targets_proposal_does_not_name_a_private_alias_to_an_outsider(
    reg: Registry, tmp_path: Path
) -> None:
    """``reg``: a registry of its own (SQLite and PostgreSQL) whose targets key goes
    offline, so that a change of who may sign waits as a targets proposal."""
    owner, reviewer = new_publisher(reg), new_reviewer(reg)
    new_reviewer(reg)  # a second one: the quarantine role keeps a key when the first goes
    secret = reg.repo(owner, policy_yaml=PROD_POLICY)  # prod: one reviewer's approval
    reg.admin.set_repo_visibility(secret, private=True)
    root_key, targets_key = tmp_path / "root.key", tmp_path / "targets.key"
    for path in (root_key, targets_key):
        save_private_key(generate_private_key(), path)
    init = ("trust", "init", "--root-key", str(root_key), "--targets-key", str(targets_key))
    _ok(reg.cli(*init, "--accept-signer-changes"))
    _sign_pending_targets(reg, targets_key)
    digest = push_new(owner, secret, tmp_path)
    assert sign(reviewer, propose(owner, secret, "prod", digest))["state"] == "published"
    # the reviewer's key goes (forced): the delegations without it wait for the admins
    reviewer.actor.client.revoke_key(reviewer.keyid, force=True)
    change = next(
        int(p["id"])
        for p in reg.admin.tuf_proposals()
        if p["role"] == "targets" and p["state"] == "pending"
    )

    # a reader of nothing private learns how many would be unsigned, not which
    outsider = reg.actor("reader")
    answer = outsider.client.tuf_impact(proposal=change)
    for private_fact in (secret, digest):
        assert private_fact not in json.dumps(answer), answer
    assert (answer["lost"], answer.get("withheld")) == ([], 1), answer
    # the safety check counts what it withholds
    refused = outsider.client.tuf_impact(proposal=change, refuse_if_lost=True)
    assert (refused["lost"], refused["withheld"], refused["refused"]) == ([], 1, True)
    # an admin (a reader of every repository) is told which alias it would unsign
    told = reg.admin.tuf_impact(proposal=change)
    assert [x["target"] for x in told["lost"]] == [f"{secret}@prod"], told
    assert told["withheld"] == 0


@pytest.mark.parametrize("proposal_id", [2**31, 2**40])
def test_a_proposal_id_past_the_column_is_missing_on_both_databases(
    registry: Registry, proposal_id: int
) -> None:
    """Ids the 32-bit column cannot hold name no proposal: 404, as on SQLite, never
    PostgreSQL's 400 for a number out of range (two parsers of one id agree)."""
    reader = registry.actor("reader")
    for method, path, body in (
        ("GET", f"/v1/tuf/proposals/{proposal_id}", None),
        ("POST", f"/v1/tuf/proposals/{proposal_id}/signatures", {"keyid": "k", "signature": "s"}),
    ):
        answer = httpx.request(
            method,
            registry.url + path,
            json=body,
            headers={"Authorization": f"Bearer {reader.token}"},
            timeout=30,
        )
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "not_found"
