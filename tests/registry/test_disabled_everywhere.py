"""Issue 36 item 3: a disabled principal is disabled everywhere, against a real
``modelward serve`` (SQLite and PostgreSQL). One authentication function
(``auth.service.authenticate_until``) serves ``/v1``, ``/v2``, ``/tuf`` and ``/ui``:

- a ``/v2`` bearer token issued before the disable stops at its next request (it pushed a
  blob and moved a tag for up to 300 s before);
- a console session stops at its next page;
- a disabled reviewer's signature on a pending two-approval ``prod`` no longer counts: it
  comes off the proposal and her key leaves the delegations, as a revoked key's does; nor
  does her bundle approval (docs/registry.md#approvals);
- a database writer who clears ``disabled_at`` does not bring her key back: the row's
  seal covers the disable (registry/domains/signing/tuf/seals.py).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from modelward.attest.tuf import protected_role
from modelward.client.errors import APIError
from modelward.registry.domains.signing.tuf.seals import RowSeals
from modelward.registry.models import Principal
from tests.oci.conftest import bearer_for
from tests.registry.conftest import Registry, new_publisher, push_new
from tests.tuf.test_delegation_attacks import (
    TWO_POLICY,
    delegated_roles,
    new_reviewer,
    propose,
    sign,
)


def test_disabled_principal_v2_bearer_token_issued_before_is_refused(
    registry: Registry,
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    bearer = bearer_for(registry, pub.name, pub.actor.token, f"repository:{repo}:pull,push")
    v2 = httpx.Client(
        base_url=f"{registry.url}/v2/{repo}",
        timeout=60,
        headers={"Authorization": f"Bearer {bearer}"},
    )
    with v2:
        assert v2.post("/blobs/uploads/").status_code == 202  # it pushes, before
        registry.admin.set_principal_disabled(pub.name, True)
        # its next request: no blob pushed, no tag moved
        push = v2.post("/blobs/uploads/")
        assert push.status_code == 401, push.text
        assert f"principal {pub.name} is disabled" in push.text
        tag = v2.put(
            "/manifests/latest",
            content=b"{}",
            headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        )
        assert tag.status_code == 401, tag.text
        assert v2.get("/tags/list").status_code == 401
    registry.admin.set_principal_disabled(pub.name, False)  # its tokens are kept: back again
    assert httpx.get(
        f"{registry.url}/v2/{repo}/tags/list",
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=60,
    ).status_code in (200, 404)


def test_disabled_principal_console_session_ends_at_its_next_page(registry: Registry) -> None:
    rev = registry.actor("reviewer")
    with httpx.Client(base_url=registry.url, follow_redirects=False, timeout=60) as client:
        form = client.get("/ui/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        done = client.post("/ui/login", data={"token": rev.token, "csrf": csrf.group(1)})
        assert done.status_code == 303, done.text
        assert client.get("/ui/").status_code == 200
        registry.admin.set_principal_disabled(rev.name, True)
        after = client.get("/ui/")
        assert after.status_code == 303
        assert after.headers["location"] == "/ui/login"


def test_disabled_reviewers_signature_no_longer_counts_towards_a_two_approval_prod(
    registry: Registry, tmp_path: Path
) -> None:
    pub, r1, r2 = new_publisher(registry), new_reviewer(registry), new_reviewer(registry)
    repo = registry.repo(pub, policy_yaml=TWO_POLICY)
    proposal = propose(pub, repo, "prod", push_new(pub, repo, tmp_path))
    assert len(sign(r1, proposal)["signatures"]) == 1
    registry.admin.set_principal_disabled(r1.name, True)
    # her signature came off the pending proposal, and her key left prod's role
    assert registry.admin.tuf_proposal(proposal)["signatures"] == []
    assert r1.keyid not in delegated_roles(registry)[protected_role(repo, "prod")]["keyids"]
    # r2's signature alone is one of two: prod does not move
    after = sign(r2, proposal)
    assert (after["state"], len(after["signatures"])) == ("pending", 1)
    withdrawn = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "tuf.signature.withdraw" and proposal in e["details"]["proposals"]
    ]
    assert withdrawn
    assert withdrawn[0]["details"]["why"] == f"principal {r1.name} disabled"


def test_disabled_reviewers_bundle_approval_stops_counting(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    digest = push_new(pub, repo, tmp_path)
    reviewer = registry.actor("reviewer")
    assert reviewer.client.approve(repo, digest, "prod")["approvers"] == [reviewer.name]
    registry.admin.set_principal_disabled(reviewer.name, True)
    with pytest.raises(APIError) as refused:
        pub.actor.client.set_alias(repo, "prod", digest)
    assert (refused.value.status, refused.value.code) == (403, "approvals_required")
    assert refused.value.detail["have"] == []
    registry.admin.set_principal_disabled(reviewer.name, False)  # enabled: it counts again
    assert pub.actor.client.set_alias(repo, "prod", digest)["digest"] == digest


def test_a_database_writer_clearing_disabled_at_does_not_bring_the_key_back() -> None:
    seals = RowSeals(b"k" * 32)
    row = Principal(id=7, name="rev", role="reviewer")
    enabled = seals.principal(row)
    row.seal = enabled
    assert seals.principal_ok(row)
    assert not seals.disabled_by_seal(row)
    # the registry disables it and reseals it
    row.disabled_at = datetime(2026, 1, 1, tzinfo=UTC)
    row.seal = seals.principal(row)
    assert row.seal != enabled
    assert seals.principal_ok(row)
    # a database writer clears disabled_at: the seal no longer matches the row, and the row
    # still reads as sealed disabled (registry.domains.signing.tuf.state leaves its keys out)
    row.disabled_at = None
    assert not seals.principal_ok(row)
    assert seals.disabled_by_seal(row)
