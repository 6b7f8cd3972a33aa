"""Attacks on blobs, uploads, manifests, request limits, error hygiene, logs and the audit log.

One real ``modelward serve`` per module (see test_registry_attacks.py for the helpers); each
test asserts the refusal, the JSON error shape, that nothing was stored, and the audit event.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.registry.test_registry_attacks import (
    LIMIT_JSON,
    Reg,
    assert_denied,
    error,
    make_bundle,
    open_registry,
    provenance,
    push,
    sha,
)

LEAK_MARKERS = ("Traceback", "sqlalchemy", "sqlite3", 'File "', "SELECT ", "INSERT ")
A = {"repository": "acme/a"}  # the repository pub_a uploads blobs for (charged to its quota)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    with open_registry(tmp_path_factory.mktemp("attacks-io")) as registry:
        yield registry


def no_leak(resp: httpx.Response) -> None:
    for marker in LEAK_MARKERS:
        assert marker not in resp.text, resp.text[:500]


# -- blobs and uploads -----------------------------------------------------------------------
def test_blob_digest_path_traversal_and_other_forms_are_refused(reg: Reg) -> None:
    pub = reg.actors["pub_a"].client
    data = b"traversal payload"
    hexd = sha(data).removeprefix("sha256:")
    since = reg.last_seq()
    bad = [
        f"sha256:{hexd.upper()}",
        f"SHA256:{hexd}",
        f"sha512:{hexd}{hexd}",
        f"md5:{hexd[:32]}",
        hexd,
        f"sha256:{hexd[:-1]}",
        f"sha256:{hexd}0",
        "sha256:..",
        "sha256:.." + "0" * 62,
    ]
    for digest in bad:
        error(pub.put(f"/v1/blobs/{digest}", params=A, content=data), 400, "invalid_digest")
        error(pub.get(f"/v1/blobs/{digest}"), 400, "invalid_digest")
        assert pub.head(f"/v1/blobs/{digest}").status_code == 400
    for raw in ("sha256:..%2F..%2F..%2Fregistry.db", "..%2F..%2Fregistry.db", "sha256:%2e%2e"):
        for method in ("GET", "PUT"):
            r = pub.request(method, f"{reg.url}/v1/blobs/{raw}", params=A, content=data)
            assert r.status_code in (400, 404, 405), r.text
            assert r.json()["error"]["code"] in (
                "invalid_digest",
                "not_found",
                "method_not_allowed",
            )
            assert b"SQLite format" not in r.content
    assert pub.head(f"/v1/blobs/{sha(data)}").status_code == 404
    assert not list(reg.data_dir.glob("**/*traversal*"))
    assert_denied(reg, since, 400, "invalid_digest", actor="pub_a")


def test_blob_with_wrong_bytes_is_not_stored(reg: Reg) -> None:
    pub = reg.actors["pub_a"].client
    claimed = sha(b"the bytes the digest names " + uuid.uuid4().bytes)
    since = reg.last_seq()
    put = pub.put(f"/v1/blobs/{claimed}", params=A, content=b"other bytes")
    error(put, 400, "digest_mismatch")
    up = pub.post("/v1/uploads", json={"digest": claimed, "size": 11, **A}).json()
    r = pub.patch(f"/v1/uploads/{up['id']}", content=b"other bytes", headers={"Upload-Offset": "0"})
    assert r.status_code == 200, r.text
    error(pub.post(f"/v1/uploads/{up['id']}/commit"), 400, "digest_mismatch")
    error(pub.get(f"/v1/uploads/{up['id']}"), 404, "not_found")  # the session ended
    assert reg.admin.head(f"/v1/blobs/{claimed}").status_code == 404
    error(reg.admin.get(f"/v1/blobs/{claimed}"), 404, "not_found")
    assert not list((reg.data_dir / "blobs" / "_uploads").glob(f"{up['id']}*"))
    assert_denied(reg, since, 400, "digest_mismatch", actor="pub_a")


def test_upload_session_hijack_by_another_principal_is_refused(reg: Reg) -> None:
    owner, thief = reg.actors["pub_a"].client, reg.actors["pub_b"].client
    data = b"owner's bytes " + uuid.uuid4().bytes
    up = owner.post("/v1/uploads", json={"digest": sha(data), "size": len(data), **A}).json()
    url = f"/v1/uploads/{up['id']}"
    r = owner.patch(url, content=data[:5], headers={"Upload-Offset": "0"})
    assert r.json()["offset"] == 5
    error(thief.get(url), 404, "not_found")
    error(thief.patch(url, content=b"EVIL!", headers={"Upload-Offset": "5"}), 404, "not_found")
    error(thief.post(f"{url}/commit"), 404, "not_found")
    for who in ("rev1", "worker"):
        error(
            reg.actors[who].client.patch(url, content=b"x", headers={"Upload-Offset": "5"}),
            403,
            "forbidden",
        )
    assert owner.get(url).json()["offset"] == 5
    r = owner.patch(url, content=data[5:], headers={"Upload-Offset": "5"})
    assert r.json()["offset"] == len(data)
    assert owner.post(f"{url}/commit").status_code == 201
    assert reg.admin.get(f"/v1/blobs/{sha(data)}").content == data


def test_upload_chunk_past_declared_size_is_refused(reg: Reg) -> None:
    pub = reg.actors["pub_a"].client
    data = b"0123456789"
    up = pub.post("/v1/uploads", json={"digest": sha(data), "size": len(data), **A}).json()
    since = reg.last_seq()
    r = pub.patch(f"/v1/uploads/{up['id']}", content=data + b"!", headers={"Upload-Offset": "0"})
    error(r, 400, "bad_request")
    assert pub.get(f"/v1/uploads/{up['id']}").json()["offset"] == 0
    assert_denied(reg, since, 400, "bad_request")


# -- manifests -------------------------------------------------------------------------------
def test_manifest_under_a_digest_it_does_not_hash_to_is_refused(reg: Reg) -> None:
    bundle, other = make_bundle(reg), make_bundle(reg)
    pub = reg.actors["pub_a"]
    since = reg.last_seq()
    r = pub.client.put(
        f"/v1/repos/acme/a/bundles/{other.digest}",
        json=bundle.body(provenance(pub.key, other.digest)),
    )
    error(r, 400, "digest_mismatch")
    for d in (bundle.digest, other.digest):
        assert reg.admin.get(f"/v1/repos/acme/a/bundles/{d}").status_code == 404
    assert_denied(reg, since, 400, "digest_mismatch", actor="pub_a")


def test_repush_with_other_attestations_changes_nothing(reg: Reg) -> None:
    from modelward.attest.keys import generate_private_key

    bundle = push(reg, "pub_a")
    pub = reg.actors["pub_a"].client
    url = f"/v1/repos/acme/a/bundles/{bundle.digest}"
    before = reg.admin.get(f"{url}/attestations").json()
    stranger = provenance(generate_private_key("ed25519"), bundle.digest)
    r = pub.put(url, json=bundle.body(stranger))
    assert r.status_code == 200, r.text
    assert r.json()["created"] is False
    # the client is told, with the reason
    assert [i["sha256"] for i in r.json()["ignored_attestations"]] == [sha(stranger)]
    assert "attestation add" in r.json()["ignored_attestations"][0]["reason"]
    assert reg.admin.get(f"{url}/attestations").json() == before
    # the same digest pushed to another repository is a separate record; a's is unchanged
    key_b = reg.actors["pub_b"].key
    r = reg.actors["pub_b"].client.put(
        f"/v1/repos/acme/b/bundles/{bundle.digest}",
        json=bundle.body(provenance(key_b, bundle.digest)),
    )
    assert r.status_code == 201, r.text
    assert reg.admin.get(url).json()["created_by"] == "pub_a"
    assert reg.admin.get(f"{url}/manifest").content == bundle.raw


# -- policies supplied by publishers ---------------------------------------------------------
def test_publisher_policy_cannot_make_the_server_read_local_files(reg: Reg) -> None:
    """A publisher-written policy naming server paths must be refused when it is stored."""
    target = reg.data_dir / "registry.db"
    policy = (
        "version: 1\ntrust_registered_signers: true\n"
        f"signers:\n  keys:\n    - {{name: local, path: {target}}}\n"
        "aliases:\n  - {pattern: '*', roles: [publisher]}\n"
    )
    since = reg.last_seq()
    pub = reg.actors["pub_a"]
    r = pub.client.post("/v1/repos", json={"name": "acme/lfi", "policy_yaml": policy})
    if r.status_code == 201:  # accepted: show what a push against it does
        bundle = make_bundle(reg, "acme/lfi")
        push_resp = pub.client.put(
            f"/v1/repos/acme/lfi/bundles/{bundle.digest}",
            json=bundle.body(provenance(pub.key, bundle.digest)),
        )
        no_leak(push_resp)
        pytest.fail(
            f"policy naming {target} was stored (201); a push against it answered "
            f"{push_resp.status_code}: {push_resp.text[:200]}"
        )
    error(r, 400, "invalid_policy")
    assert reg.admin.get("/v1/repos/acme/lfi").status_code == 404
    assert_denied(reg, since, 400, "invalid_policy", actor="pub_a")
    # the same holds for CA files and Sigstore trust roots, and for an admin's replacement
    before = reg.admin.get("/v1/repos/acme/a").json()["policy_yaml"]
    for signers in (
        f"  cas:\n    - {{name: ca, roots: [{target}]}}\n",
        f"  identities:\n    - {{name: s, identity: a, issuer: b, trust_root: {target}}}\n",
    ):
        doc = f"version: 1\nsigners:\n{signers}"
        err = error(
            reg.admin.put("/v1/repos/acme/a/policy", json={"policy_yaml": doc}),
            400,
            "invalid_policy",
        )
        assert "self-contained" in err["message"]
    assert reg.admin.get("/v1/repos/acme/a").json()["policy_yaml"] == before


# -- request size limits ---------------------------------------------------------------------
BIG = "x" * (LIMIT_JSON + 1024)


@pytest.mark.parametrize(
    ("who", "method", "path", "body"),
    [  # bodies the server would otherwise accept and store (or ignore the excess of)
        (
            "admin",
            "POST",
            "/v1/identities",
            {"identity": BIG, "issuer": "i", "principal": "worker"},
        ),
        (
            "pub_a",
            "POST",
            "/v1/uploads",
            {"digest": "sha256:" + "0" * 64, "size": 1, **A, "x": BIG},
        ),
        ("rev1", "POST", "{bundle}/quarantine", {"reason": BIG}),
        ("admin", "DELETE", "{bundle}", {"reason": BIG}),
        ("rev1", "POST", "{bundle}/approvals", {"alias": "prod", "x": BIG}),
        (
            "worker",
            "POST",
            "{bundle}/boots",
            {"fingerprint_id": "f", "outcome": "ok", "detail": BIG},
        ),
    ],
    ids=["identities", "uploads", "quarantine", "tombstone", "approvals", "boots"],
)
def test_oversized_json_body_is_refused(
    reg: Reg, who: str, method: str, path: str, body: dict[str, object]
) -> None:
    bundle = push(reg, "pub_a")
    bundle_url = f"/v1/repos/acme/a/bundles/{bundle.digest}"
    path = path.replace("{bundle}", bundle_url)
    body = {k: (bundle.digest if v == "{digest}" else v) for k, v in body.items()}
    client = reg.admin if who == "admin" else reg.actors[who].client
    since = reg.last_seq()
    error(client.request(method, path, json=body), 413, "too_large")
    record = reg.admin.get(bundle_url).json()
    assert not record["quarantined"]
    assert not record["tombstoned"]
    assert reg.admin.get(f"{bundle_url}/boots").json() == []
    assert_denied(reg, since, 413, "too_large")


# -- error hygiene ---------------------------------------------------------------------------
def test_deeply_nested_bundle_body_is_a_clean_400(reg: Reg) -> None:
    pub = reg.actors["pub_a"].client
    nested = "[" * 100_000 + "]" * 100_000
    r = pub.put(
        f"/v1/repos/acme/a/bundles/{sha(b'x')}",
        content=nested,
        headers={"content-type": "application/json"},
    )
    no_leak(r)
    error(r, 400, "bad_request")


def test_deeply_nested_manifest_is_a_clean_invalid_manifest(reg: Reg) -> None:
    pub = reg.actors["pub_a"].client
    raw = ("[" * 100_000 + "]" * 100_000).encode()
    body = {"manifest": base64.b64encode(raw).decode(), "attestations": []}
    r = pub.put(f"/v1/repos/acme/a/bundles/{sha(raw)}", json=body)
    no_leak(r)
    error(r, 400, "invalid_manifest")


def test_garbage_attestations_are_refused_cleanly(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    url = f"/v1/repos/acme/a/bundles/{bundle.digest}/attestations"
    before = reg.admin.get(url).json()
    bodies = [
        b"",
        b"\xff\xfe\x00",
        b"{}",
        b"[]",
        b"null",
        b'{"payloadType": 1, "payload": [], "signatures": {}}',
        b'{"payloadType": "application/vnd.in-toto+json", "payload": "!!", "signatures": []}',
        b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}',
        ("[" * 50_000 + "]" * 50_000).encode(),
    ]
    for data in bodies:
        r = reg.actors["pub_a"].client.post(url, content=data)
        no_leak(r)
        assert r.status_code in (400, 422), (data[:40], r.status_code, r.text[:300])
        assert set(r.json()) == {"error"}
    assert reg.admin.get(url).json() == before


@pytest.mark.parametrize("case", ["alias_expected_version", "audit_after", "token_expiry"])
def test_out_of_range_integers_are_not_server_errors(reg: Reg, case: str) -> None:
    bundle = push(reg, "pub_a")
    pub = reg.actors["pub_a"].client
    alias = f"ints-{uuid.uuid4().hex[:8]}"
    assert pub.put(
        f"/v1/repos/acme/a/aliases/{alias}", json={"digest": bundle.digest, "expected_version": 0}
    ).is_success
    if case == "alias_expected_version":
        r = pub.put(
            f"/v1/repos/acme/a/aliases/{alias}",
            json={"digest": bundle.digest, "expected_version": 2**70},
        )
    elif case == "audit_after":
        r = reg.admin.get("/v1/audit", params={"after": 2**70})
    else:
        r = reg.admin.post("/v1/admin/principals/pub_b/tokens", json={"expires_in_seconds": 10**12})
    no_leak(r)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
    assert set(r.json()) == {"error"}
    assert reg.admin.get(f"/v1/repos/acme/a/aliases/{alias}").json()["version"] == 1


def test_non_finite_numbers_cannot_poison_boot_reports(reg: Reg) -> None:
    bundle = push(reg, "pub_a")
    url = f"/v1/repos/acme/a/bundles/{bundle.digest}/boots"
    r = reg.actors["worker"].client.post(
        url,
        content=b'{"fingerprint_id": "f", "outcome": "ok", "detail": NaN}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code in (201, 422), r.text
    listing = reg.admin.get(url)
    assert listing.status_code == 200, listing.text[:200]


# -- secrets and payloads in logs and the audit log (keep last: it reads everything) ----------
def test_secrets_and_payloads_never_in_logs_or_audit(reg: Reg) -> None:
    marker = f"PAYLOAD-{uuid.uuid4().hex}"
    pub = reg.actors["pub_a"]
    blob = marker.encode() * 4
    assert pub.client.put(f"/v1/blobs/{sha(blob)}", params=A, content=blob).status_code == 201
    bundle = push(reg, "pub_a")
    url = f"/v1/repos/acme/a/bundles/{bundle.digest}/attestations"
    pub.client.post(url, content=marker.encode())  # refused, and the body is not echoed
    bogus = f"mwt_deadbeef_{marker}"
    httpx.get(f"{reg.url}/v1/whoami", headers={"Authorization": f"Bearer {bogus}"})
    httpx.get(f"{reg.url}/v1/whoami", headers={"Authorization": bogus, "X-Request-ID": "r1"})
    r = pub.client.post("/v1/keys", json={"public_key_pem": marker})
    assert marker not in r.text
    secrets_ = [reg.boot_token, bogus, *(a.token for a in reg.actors.values())]
    audit = json.dumps(reg.audit())
    log = reg.log.read_text(errors="replace")
    assert "request_id" in log  # the structured request log is there
    for text, where in ((audit, "audit"), (log, "server log")):
        for secret in secrets_:
            assert secret not in text, f"a token is in the {where}"
            # mwt_<id>_<secret>: the secret (token_urlsafe) may itself contain "_"
            assert secret.split("_", 2)[2] not in text, f"a token secret is in the {where}"
        assert marker not in text, f"a request payload is in the {where}"
    denied = [e for e in reg.audit() if e["action"] == "denied"]
    assert any(e["details"]["code"] == "unauthenticated" for e in denied)
