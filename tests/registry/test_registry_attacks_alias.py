"""Attacks on approvals, protected aliases, rollbacks, compare-and-swap and signer names.

One real ``modelward serve`` per module (helpers in test_registry_attacks.py); each test
asserts the refusal, the JSON error shape, that nothing changed, and the audit event.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.registry.test_registry_attacks import (
    Actor,
    Reg,
    _pem,
    alias_put,
    alias_version,
    assert_denied,
    error,
    make_bundle,
    open_registry,
    provenance,
    push,
    statement,
)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    with open_registry(tmp_path_factory.mktemp("attacks-alias")) as registry:
        yield registry


# -- approvals and protected aliases ---------------------------------------------------------
def test_self_approval_by_publishing_admin_is_refused(reg: Reg) -> None:
    bundle = push(reg, "admin2")
    admin2 = reg.actors["admin2"].client
    since = reg.last_seq()
    r = admin2.post(f"/v1/repos/acme/a/bundles/{bundle.digest}/approvals", json={"alias": "prod"})
    error(r, 403, "forbidden")
    error(alias_put(admin2, "acme/a", "prod", bundle.digest, 0), 403, "approvals_required")
    assert_denied(reg, since, 403, "approvals_required", actor="admin2")


def test_approval_for_another_alias_does_not_count(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    rev = reg.actors["rev1"].client
    r = rev.post(f"/v1/repos/acme/a/bundles/{bundle.digest}/approvals", json={"alias": "staging"})
    assert r.status_code == 201, r.text
    version = alias_version(reg, "acme/a", "prod")
    r = alias_put(reg.actors["pub_a"].client, "acme/a", "prod", bundle.digest, version)
    assert error(r, 403, "approvals_required")["detail"]["have"] == []
    assert alias_version(reg, "acme/a", "prod") == version


def test_approval_in_another_repo_does_not_count(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    # the same manifest pushed to repo b, and approved there
    r = reg.actors["pub_b"].client.put(
        f"/v1/repos/acme/b/bundles/{bundle.digest}",
        json=bundle.body(provenance(reg.actors["pub_b"].key, bundle.digest)),
    )
    assert r.status_code == 201, r.text
    r = reg.actors["rev1"].client.post(
        f"/v1/repos/acme/b/bundles/{bundle.digest}/approvals", json={"alias": "prod"}
    )
    assert r.status_code == 201, r.text
    version = alias_version(reg, "acme/a", "prod")
    r = alias_put(reg.actors["pub_a"].client, "acme/a", "prod", bundle.digest, version)
    error(r, 403, "approvals_required")
    assert alias_version(reg, "acme/a", "prod") == version


def test_mover_own_approval_does_not_count(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    admin2 = reg.actors["admin2"].client
    r = admin2.post(f"/v1/repos/acme/a/bundles/{bundle.digest}/approvals", json={"alias": "prod"})
    assert r.status_code == 201, r.text
    version = alias_version(reg, "acme/a", "prod")
    error(alias_put(admin2, "acme/a", "prod", bundle.digest, version), 403, "approvals_required")
    assert alias_version(reg, "acme/a", "prod") == version


def test_repeated_approval_counts_once(reg: Reg) -> None:
    r = reg.actors["pub_b"].client.post(
        "/v1/repos",
        json={
            "name": "acme/two",
            "policy_yaml": (
                "version: 1\ntrust_registered_signers: true\naliases:\n"
                "  - {pattern: prod, roles: [publisher], protected: true, approvals: 2}\n"
            ),
        },
    )
    assert r.status_code == 201, r.text
    bundle = push(reg, "pub_b", repo="acme/two")
    url = f"/v1/repos/acme/two/bundles/{bundle.digest}/approvals"
    for _ in range(3):
        r = reg.actors["rev1"].client.post(url, json={"alias": "prod"})
        assert r.status_code == 201, r.text
    assert r.json()["approvers"] == ["rev1"]
    r = alias_put(reg.actors["pub_b"].client, "acme/two", "prod", bundle.digest)
    assert error(r, 403, "approvals_required")["detail"]["have"] == ["rev1"]
    r = reg.actors["rev2"].client.post(url, json={"alias": "prod"})
    assert r.json()["approvers"] == ["rev1", "rev2"]
    r = alias_put(reg.actors["pub_b"].client, "acme/two", "prod", bundle.digest)
    assert r.status_code == 200, r.text


def test_protected_alias_refuses_quarantined_bundle(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    base = f"/v1/repos/acme/a/bundles/{bundle.digest}"
    rev = reg.actors["rev1"].client
    assert rev.post(f"{base}/approvals", json={"alias": "prod"}).status_code == 201
    assert rev.post(f"{base}/quarantine", json={"reason": "backdoor"}).status_code == 200
    version = alias_version(reg, "acme/a", "prod")
    since = reg.last_seq()
    pub = reg.actors["pub_a"].client
    error(alias_put(pub, "acme/a", "prod", bundle.digest, version), 409, "bundle_quarantined")
    error(alias_put(pub, "acme/a", "any", bundle.digest), 409, "bundle_quarantined")
    r = reg.actors["rev2"].client.post(f"{base}/approvals", json={"alias": "prod"})
    error(r, 409, "bundle_quarantined")
    error(reg.actors["worker"].client.get(f"{base}/manifest"), 409, "bundle_quarantined")
    att = provenance(reg.actors["admin2"].key, bundle.digest)
    error(
        reg.actors["rev2"].client.post(f"{base}/attestations", content=att),
        409,
        "bundle_quarantined",
    )
    assert alias_version(reg, "acme/a", "prod") == version
    assert_denied(reg, since, 409, "bundle_quarantined", actor="pub_a")


def test_alias_refuses_tombstoned_bundle_and_its_repush(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    base = f"/v1/repos/acme/a/bundles/{bundle.digest}"
    assert reg.admin.request("DELETE", base, json={"reason": "leaked"}).status_code == 204
    since = reg.last_seq()
    pub = reg.actors["pub_a"]
    error(alias_put(pub.client, "acme/a", "tomb", bundle.digest), 410, "bundle_tombstoned")
    error(pub.client.get(f"{base}/manifest"), 410, "bundle_tombstoned")
    r = pub.client.put(base, json=bundle.body(provenance(pub.key, bundle.digest)))
    error(r, 410, "bundle_tombstoned")
    r = reg.actors["rev1"].client.post(f"{base}/approvals", json={"alias": "prod"})
    error(r, 410, "bundle_tombstoned")
    assert reg.admin.get(base).json()["tombstoned"] is True
    assert alias_version(reg, "acme/a", "tomb") == 0
    assert_denied(reg, since, 410, "bundle_tombstoned", actor="pub_a")


def test_rollback_to_bundle_the_policy_now_rejects(reg: Reg) -> None:
    from modelward.attest.keys import generate_private_key

    pub = reg.actors["pub_a"]
    old_key = generate_private_key("ed25519")
    kid = pub.client.post("/v1/keys", json={"public_key_pem": _pem(old_key)}).json()["keyid"]
    first = make_bundle(reg)
    r = pub.client.put(
        f"/v1/repos/acme/a/bundles/{first.digest}",
        json=first.body(provenance(old_key, first.digest)),
    )
    assert r.status_code == 201, r.text
    second = push(reg, "pub_a")
    assert alias_put(pub.client, "acme/a", "canary", first.digest, 0).status_code == 200
    assert alias_put(pub.client, "acme/a", "canary", second.digest, 1).status_code == 200
    assert pub.client.delete(f"/v1/keys/{kid}").status_code == 204  # the old key is distrusted
    since = reg.last_seq()
    r = alias_put(pub.client, "acme/a", "canary", first.digest, 2, rollback=True)
    error(r, 422, "policy_denied")
    state = reg.admin.get("/v1/repos/acme/a/aliases/canary").json()
    assert state == {"alias": "canary", "digest": second.digest, "version": 2, "signed": False}
    assert len(reg.admin.get("/v1/repos/acme/a/aliases/canary/history").json()) == 2
    assert_denied(reg, since, 422, "policy_denied", actor="pub_a")


def test_rollback_flag_for_a_never_targeted_digest_is_refused(reg: Reg) -> None:
    first, other = push(reg, "pub_a"), push(reg, "pub_a")
    pub = reg.actors["pub_a"].client
    assert alias_put(pub, "acme/a", "rb", first.digest, 0).status_code == 200
    since = reg.last_seq()
    error(alias_put(pub, "acme/a", "rb", other.digest, 1, rollback=True), 400, "not_a_rollback")
    assert alias_version(reg, "acme/a", "rb") == 1
    assert_denied(reg, since, 400, "not_a_rollback")


def test_stale_compare_and_swap_writer_gets_409(reg: Reg) -> None:
    first, second = push(reg, "pub_a"), push(reg, "pub_a")
    pub = reg.actors["pub_a"].client
    assert alias_put(pub, "acme/a", "cas", first.digest, 0).status_code == 200
    since = reg.last_seq()
    for expected in (0, 2, 7):
        err = error(alias_put(pub, "acme/a", "cas", second.digest, expected), 409, "stale_version")
        assert err["detail"] == {"alias": "cas", "digest": first.digest, "version": 1}
    history = reg.admin.get("/v1/repos/acme/a/aliases/cas/history").json()
    assert [h["to_digest"] for h in history] == [first.digest]
    assert_denied(reg, since, 409, "stale_version")


def test_self_signed_baseline_by_publisher_does_not_satisfy_require_baseline(reg: Reg) -> None:
    """A determinism baseline is a serving worker's evidence: the publisher forging one for its
    own bundle must not unlock a protected alias that requires a baseline."""
    from modelward.attest.statement import PredicateType

    policy = (
        "version: 1\ntrust_registered_signers: true\nevidence: {roles: [reader]}\naliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1,"
        " require_baseline: true}\n"
    )
    r = reg.actors["pub_b"].client.post(
        "/v1/repos", json={"name": "acme/base", "policy_yaml": policy}
    )
    assert r.status_code == 201, r.text
    bundle = push(reg, "pub_b", repo="acme/base")
    base = f"/v1/repos/acme/base/bundles/{bundle.digest}"
    forged = statement(
        reg.actors["pub_b"].key,
        bundle.digest,
        PredicateType.BASELINE,
        {"fingerprint_id": "forged", "outputs": []},
    )
    reg.actors["pub_b"].client.post(f"{base}/attestations", content=forged)
    assert reg.actors["rev1"].client.post(f"{base}/approvals", json={"alias": "prod"}).is_success
    r = alias_put(reg.actors["pub_b"].client, "acme/base", "prod", bundle.digest)
    error(r, 422, "baseline_required")
    assert alias_version(reg, "acme/base", "prod") == 0


def test_baseline_signed_by_a_serving_worker_satisfies_require_baseline(reg: Reg) -> None:
    """The counterpart of the attack above: the same policy is satisfiable by a reader's key."""
    from modelward.attest.keys import generate_private_key
    from modelward.attest.statement import PredicateType

    policy = (
        "version: 1\ntrust_registered_signers: true\nevidence: {roles: [reader]}\naliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1,"
        " require_baseline: true}\n"
    )
    r = reg.actors["pub_b"].client.post(
        "/v1/repos", json={"name": "acme/base-ok", "policy_yaml": policy}
    )
    assert r.status_code == 201, r.text
    bundle = push(reg, "pub_b", repo="acme/base-ok")
    worker_key = generate_private_key("ed25519")
    r = reg.admin.post("/v1/keys", json={"public_key_pem": _pem(worker_key), "principal": "worker"})
    assert r.status_code == 201, r.text
    base = f"/v1/repos/acme/base-ok/bundles/{bundle.digest}"
    baseline = statement(
        worker_key, bundle.digest, PredicateType.BASELINE, {"fingerprint_id": "f", "outputs": []}
    )
    r = reg.actors["worker"].client.post(f"{base}/attestations", content=baseline)
    assert r.status_code == 201, r.text
    assert r.json()["signers"][0]["name"] == "@worker"  # registered signers: @<principal>
    assert reg.actors["rev1"].client.post(f"{base}/approvals", json={"alias": "prod"}).is_success
    r = alias_put(reg.actors["pub_b"].client, "acme/base-ok", "prod", bundle.digest)
    assert r.status_code == 200, r.text


# -- signer names ----------------------------------------------------------------------------
def new_signer(reg: Reg, name: str, role: str = "publisher") -> Actor:
    from modelward.attest.keys import generate_private_key

    assert reg.admin.post("/v1/admin/principals", json={"name": name, "role": role}).is_success
    token = reg.admin.post(f"/v1/admin/principals/{name}/tokens", json={}).json()
    actor = Actor(name, token["token"], token["id"], reg.client(token["token"]))
    actor.key = generate_private_key("ed25519")
    r = actor.client.post("/v1/keys", json={"public_key_pem": _pem(actor.key)})
    assert r.status_code == 201, r.text
    reg.actors[name] = actor
    return actor


def test_registered_key_cannot_impersonate_a_policy_signer_by_name(reg: Reg) -> None:
    """A policy pins the key of signer ``release``; a principal that happens to be called
    ``release`` (publisher of nothing here) must not sign in its place with its own key."""
    from modelward.attest.keys import generate_private_key

    impostor = new_signer(reg, "release")
    pinned = _pem(generate_private_key("ed25519")).replace("\n", "\\n")
    policy = (
        "version: 1\ntrust_registered_signers: false\n"
        f'signers:\n  keys:\n    - {{name: release, pem: "{pinned}"}}\n'
        "aliases:\n  - {pattern: '*', roles: [admin]}\n"
    )
    r = reg.admin.post("/v1/repos", json={"name": "acme/pinned", "policy_yaml": policy})
    assert r.status_code == 201, r.text
    bundle = make_bundle(reg, "acme/pinned")
    since = reg.last_seq()
    r = reg.admin.put(
        f"/v1/repos/acme/pinned/bundles/{bundle.digest}",
        json=bundle.body(provenance(impostor.key, bundle.digest)),
    )
    error(r, 422, "policy_denied")
    assert reg.admin.get(f"/v1/repos/acme/pinned/bundles/{bundle.digest}").status_code == 404
    assert_denied(reg, since, 422, "policy_denied", actor="admin")


def test_registering_an_identity_does_not_disable_key_signatures(reg: Reg) -> None:
    """Registering a Sigstore identity must not make the same principal's key signatures stop
    counting (a signer name maps to one kind only in attest.policy._evaluate)."""
    signer = new_signer(reg, "pub_id")
    r = reg.admin.post("/v1/repos/acme/a/publishers", json={"principal": "pub_id"})
    assert r.status_code == 201, r.text
    r = signer.client.post(
        "/v1/identities",
        json={"identity": "pub_id@example.com", "issuer": "https://accounts.example.com"},
    )
    assert r.status_code == 201, r.text
    push(reg, "pub_id")


# -- alias moves judge the bundle as it is now -----------------------------------------------
def test_alias_move_rescans_the_bundle_under_the_current_policy(reg: Reg) -> None:
    """Findings stored at push time are not reused: a scanner limit added since counts."""
    policy = (
        "version: 1\ntrust_registered_signers: true\n"
        "aliases:\n  - {pattern: '*', roles: [publisher]}\n"
    )
    r = reg.actors["pub_a"].client.post(
        "/v1/repos", json={"name": "acme/rescan", "policy_yaml": policy}
    )
    assert r.status_code == 201, r.text
    bundle = push(reg, "pub_a", repo="acme/rescan")
    stricter = policy + "limits:\n  max_safetensors_header: 8\n"
    r = reg.admin.put("/v1/repos/acme/rescan/policy", json={"policy_yaml": stricter})
    assert r.status_code == 200, r.text
    since = reg.last_seq()
    r = alias_put(reg.actors["pub_a"].client, "acme/rescan", "dev", bundle.digest)
    err = error(r, 422, "policy_denied")
    assert "scan: model.safetensors" in err["message"], err
    assert alias_version(reg, "acme/rescan", "dev") == 0
    assert_denied(reg, since, 422, "policy_denied", actor="pub_a")


def test_replay_result_against_an_unrelated_digest_does_not_satisfy_the_gate(reg: Reg) -> None:
    from modelward.attest.keys import generate_private_key
    from modelward.attest.statement import PredicateType

    policy = (
        "version: 1\ntrust_registered_signers: true\nevidence: {roles: [reader]}\naliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true,"
        " replay: {min_consecutive: 3}}\n"
    )
    pub = reg.actors["pub_b"].client
    assert pub.post("/v1/repos", json={"name": "acme/gate", "policy_yaml": policy}).is_success
    worker, worker_key = reg.actors["worker"], generate_private_key("ed25519")
    r = reg.admin.post("/v1/keys", json={"public_key_pem": _pem(worker_key), "principal": "worker"})
    assert r.status_code == 201, r.text

    def replay_result(digest: str, against: str | None) -> None:
        predicate = {"consecutive_matches": 5, "divergence_count": 0, "against": against}
        data = statement(worker_key, digest, PredicateType.REPLAY, predicate)
        url = f"/v1/repos/acme/gate/bundles/{digest}/attestations"
        assert worker.client.post(url, content=data).status_code == 201

    first = push(reg, "pub_b", repo="acme/gate")
    replay_result(first.digest, None)  # the alias is new: a replay against none counts
    assert alias_put(pub, "acme/gate", "prod", first.digest).status_code == 200
    second = push(reg, "pub_b", repo="acme/gate")
    replay_result(second.digest, "sha256:" + "cd" * 32)  # against an unrelated bundle
    replay_result(second.digest, None)  # against nothing at all
    r = alias_put(pub, "acme/gate", "prod", second.digest, 1)
    err = error(r, 422, "replay_required")
    assert first.digest in err["message"]
    replay_result(second.digest, first.digest)  # against the bundle on the alias now
    r = alias_put(pub, "acme/gate", "prod", second.digest, 1)
    assert r.status_code == 200, r.text
