"""Issue 38 item 4 (first door): a 409/403 about a quarantine names the private repository
it was quarantined through, and the reviewer who did it, only to a reader of that repository.

A bundle held in a public repository and in a private one is quarantined through the private
one. Before, every answer about it (the manifest, ``/v2`` by digest and by tag, an alias move
and its dry run) carried ``"quarantined_in": "<org>/secret"`` and the reviewer's name to any
reader of the public repository. Against a real ``modelward serve`` (SQLite and PostgreSQL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from modelward.client.api import APIError
from tests.registry.conftest import Registry, make_bundle_dir, new_publisher, unique
from tests.tuf.test_metadata_mirror import signed_move


def _call(reg: Registry, token: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method,
        f"{reg.url}{path}",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )


def test_a_quarantine_answer_does_not_name_the_private_repository_or_its_reviewer(
    registry: Registry, tmp_path: Path
) -> None:
    reg = registry
    owner, public_pub = new_publisher(reg), new_publisher(reg)
    org = unique("pq")
    reg.admin.put_org(org, owners=[owner.name])
    secret = f"{org}/secret"
    reg.cli("repo", "create", secret, "--private", "--json", token=owner.actor.token, check=True)
    public = reg.repo(public_pub)
    root = make_bundle_dir(tmp_path / unique("b"))
    digest = owner.actor.client.push(root, secret, sign=owner.sign).digest
    assert public_pub.actor.client.push(root, public, sign=public_pub.sign).digest == digest
    public_pub.actor.client.set_alias(public, "dev", digest)  # an alias that names it
    reviewer = reg.actor("reviewer")
    reviewer.client.quarantine(secret, digest, "exfil-backdoor")
    outsider = reg.actor("reader")

    doors = [
        (outsider.token, "GET", f"/v1/repos/{public}/bundles/{digest}/manifest", None),
        (outsider.token, "GET", f"/v2/{public}/manifests/{digest}", None),
        (outsider.token, "GET", f"/v2/{public}/manifests/dev", None),
        (
            public_pub.actor.token,
            "POST",
            f"/v1/repos/{public}/aliases/beta/dry-run",
            {"digest": digest},
        ),
        (
            public_pub.actor.token,
            "PUT",
            f"/v1/repos/{public}/aliases/beta",
            {"digest": digest, "expected_version": 0},
        ),
    ]
    answered = []
    for token, method, path, body in doors:
        answer = _call(reg, token, method, path, body)
        answered.append((path, answer.status_code))
        assert secret not in answer.text, (method, path, answer.text)
        assert reviewer.name not in answer.text, (method, path, answer.text)
    # refused everywhere (the dry run answers 200 with the refusal)
    assert [status for _, status in answered] == [409, 403, 403, 200, 409], answered
    # a reader of the private repository is told where, and by whom
    told = _call(reg, owner.actor.token, "GET", f"/v1/repos/{public}/bundles/{digest}/manifest")
    assert told.status_code in (403, 409), told.text
    assert secret in told.text, told.text
    assert reviewer.name in told.text, told.text


def test_a_push_of_a_private_quarantined_bundles_weights_does_not_name_its_digest_or_repository(
    registry: Registry, tmp_path: Path
) -> None:
    reg = registry
    owner, stranger = new_publisher(reg), new_publisher(reg)
    org = unique("pw")
    reg.admin.put_org(org, owners=[owner.name])
    secret = f"{org}/secret"
    reg.cli("repo", "create", secret, "--private", "--json", token=owner.actor.token, check=True)
    shared = tmp_path / unique("weights")  # one directory: the same weights in both bundles
    private = owner.actor.client.push(make_bundle_dir(shared / "a"), secret, sign=owner.sign).digest
    reg.actor("reviewer").client.quarantine(secret, private, "exfil-backdoor-in-q")
    own = reg.repo(stranger)
    with pytest.raises(APIError) as refused:
        stranger.actor.client.push(make_bundle_dir(shared / "b"), own, sign=stranger.sign)
    assert (refused.value.status, refused.value.code) == (409, "bundle_quarantined")
    said = f"{refused.value} {refused.value.detail}"
    for private_fact in (private, secret, "exfil-backdoor-in-q"):
        assert private_fact not in said, said
    assert "belongs to a quarantined bundle" in said, said


def test_a_quarantine_proposal_for_a_private_only_digest_is_not_listed_to_an_outsider(
    registry: Registry, tmp_path: Path
) -> None:
    reg = registry
    owner = new_publisher(reg)
    org = unique("pp")
    reg.admin.put_org(org, owners=[owner.name])
    secret = f"{org}/secret"
    reg.cli("repo", "create", secret, "--private", "--json", token=owner.actor.token, check=True)
    digest = owner.actor.client.push(
        make_bundle_dir(tmp_path / unique("b")), secret, sign=owner.sign
    ).digest
    proposal = int(reg.actor("reviewer").client.quarantine(secret, digest, "exfil")["proposal"])
    outsider = reg.actor("reader")
    listed = [p["id"] for p in outsider.client.tuf_proposals(pending=False)]
    assert proposal not in listed
    with pytest.raises(APIError) as missing:
        outsider.client.tuf_proposal(proposal)
    assert missing.value.status == 404, missing.value
    # a reader of the repository sees it
    assert proposal in [p["id"] for p in owner.actor.client.tuf_proposals(pending=False)]
    assert owner.actor.client.tuf_proposal(proposal)["to_digest"] == digest


def test_tuf_status_does_not_list_a_private_repositorys_roles_to_an_outsider(
    registry: Registry, tmp_path: Path
) -> None:
    reg = registry
    owner = new_publisher(reg)
    org = unique("ps")
    reg.admin.put_org(org, owners=[owner.name])
    secret = f"{org}/secret"
    reg.cli("repo", "create", secret, "--private", "--json", token=owner.actor.token, check=True)
    digest = owner.actor.client.push(
        make_bundle_dir(tmp_path / unique("b")), secret, sign=owner.sign
    ).digest
    signed_move(owner, secret, "dev", digest)

    def roles(token: str) -> list[str]:
        answer = _call(reg, token, "GET", "/v1/tuf/status")
        assert answer.status_code == 200, answer.text
        return [str(r["role"]) for r in answer.json()["roles"]]

    outsider = roles(reg.actor("reader").token)
    assert "snapshot" in outsider
    assert not [r for r in outsider if r.startswith(f"{org}:")], outsider
    assert [r for r in roles(owner.actor.token) if r.startswith(f"{org}:")]
