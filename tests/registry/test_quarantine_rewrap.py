"""Quarantine cannot be undone by re-wrapping the quarantined bundle's layers
(docs/registry.md#quarantine).

Before, a blob was readable as soon as any live bundle held it, a push only asked whether its
blobs existed, and a blob that existed already was leased to whoever PUT its digest, whatever
bytes came with it. So after bundle X was quarantined, a publisher pushed a manifest Y of their
own naming X's layer digests (without even having the bytes: zeros of the right length were
"uploaded") and from then on everyone read X's weights again. Now a push naming a blob the
quarantine covers is refused, the blob stays unreadable to publishers and readers, and a PUT
of a stored digest must bring that digest's bytes. Real ``modelward serve`` (SQLite and
PostgreSQL).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from modelward.attest.manifest import build_bundle
from modelward.client.api import APIError, NotFoundError
from tests.registry.conftest import Registry, make_bundle_dir, new_publisher

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: one database is enough here

REASON = "weights carry a pickle payload"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _mark(registry: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in registry.admin.iter_audit())])


def _weights(registry: Registry, repo: str, digest: str) -> tuple[str, int]:
    """The digest and size of the bundle's model.safetensors layer."""
    manifest = json.loads(registry.admin.get_manifest(repo, digest))
    for layer in manifest["layers"]:
        if layer["annotations"]["org.cncf.model.filepath"] == "model.safetensors":
            return str(layer["digest"]), int(layer["size"])
    raise AssertionError("no model.safetensors layer")


def test_quarantined_weights_rewrapped_in_a_new_manifest_stay_unreadable(
    registry: Registry, tmp_path: Path
) -> None:
    pub_a, pub_b = new_publisher(registry), new_publisher(registry)
    repo_x, repo_y = registry.repo(pub_a), registry.repo(pub_b)
    reader, reviewer = registry.actor("reader"), registry.actor("reviewer")
    x = pub_a.actor.client.push(make_bundle_dir(tmp_path / "x"), repo_x, sign=pub_a.sign).digest
    weights, _ = _weights(registry, repo_x, x)

    def get(token: str, path: str) -> httpx.Response:
        return httpx.get(f"{registry.url}{path}", headers=_auth(token), timeout=60)

    assert get(reader.token, f"/v1/blobs/{weights}").status_code == 200
    reviewer.client.quarantine(repo_x, x, REASON)
    assert get(reader.token, f"/v1/blobs/{weights}").status_code == 409
    mark = _mark(registry)
    # (1) a bundle of B's own holding the same weights, through /v1: the client finds the
    # layer stored and sends only the manifest, which is refused
    root_y = make_bundle_dir(tmp_path / "y")  # same model.safetensors, another config.json
    with pytest.raises(APIError) as info:
        pub_b.actor.client.push(root_y, repo_y, sign=pub_b.sign)
    assert (info.value.status, info.value.code) == (409, "bundle_quarantined"), info.value
    assert info.value.detail["blob"] == weights
    assert info.value.detail["quarantined_digest"] == x
    assert REASON in info.value.message
    # (2) the same manifest through /v2, its config uploaded first
    built = build_bundle(root_y)
    b = _auth(pub_b.actor.token)
    config = httpx.post(
        f"{registry.url}/v2/{repo_y}/blobs/uploads/",
        params={"digest": built.manifest.config.digest},
        content=built.config_bytes,
        headers=b,
        timeout=60,
    )
    assert config.status_code == 201, config.text
    put = httpx.put(
        f"{registry.url}/v2/{repo_y}/manifests/{built.manifest.digest}",
        content=built.manifest.raw,
        headers={**b, "Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        timeout=60,
    )
    assert put.status_code == 403, put.text
    error = put.json()["errors"][0]
    assert (error["code"], error["detail"]["code"]) == ("DENIED", "bundle_quarantined")
    # nothing of Y was recorded, and X's weights stay unreadable through every door
    with pytest.raises(NotFoundError):
        registry.admin.get_bundle(repo_y, built.manifest.digest)
    for token in (reader.token, pub_b.actor.token, pub_a.actor.token):
        assert get(token, f"/v1/blobs/{weights}").status_code == 409
        for repo in (repo_x, repo_y):
            assert get(token, f"/v2/{repo}/blobs/{weights}").status_code == 403
    # reviewers keep their forensic view
    assert get(reviewer.token, f"/v1/blobs/{weights}").status_code == 200
    denied = [
        e
        for e in registry.admin.iter_audit(after=mark)
        if e["action"] == "denied"
        and e["actor"] == pub_b.name
        and e["details"].get("code") == "bundle_quarantined"
    ]
    assert len(denied) >= 2, denied  # both pushes


def test_existing_blob_put_with_other_bytes_is_refused(registry: Registry, tmp_path: Path) -> None:
    pub_a, pub_b = new_publisher(registry), new_publisher(registry)
    repo_x, repo_y = registry.repo(pub_a), registry.repo(pub_b)
    x = pub_a.actor.client.push(make_bundle_dir(tmp_path / "x"), repo_x, sign=pub_a.sign).digest
    weights, size = _weights(registry, repo_x, x)
    zeros = bytes(size)
    b = _auth(pub_b.actor.token)
    with httpx.Client(base_url=registry.url, headers=b, timeout=60) as http:
        # /v1 PUT of a stored digest, charged to B's repository
        v1 = http.put(f"/v1/blobs/{weights}", params={"repository": repo_y}, content=zeros)
        assert v1.status_code == 400, v1.text
        assert v1.json()["error"]["code"] == "digest_mismatch"
        # /v2 monolithic POST ?digest=
        mono = http.post(f"/v2/{repo_y}/blobs/uploads/", params={"digest": weights}, content=zeros)
        assert mono.status_code == 400, mono.text
        assert mono.json()["errors"][0]["code"] == "DIGEST_INVALID"
        # /v2 upload session: PATCH the zeros, close with PUT ?digest=
        started = http.post(f"/v2/{repo_y}/blobs/uploads/")
        assert started.status_code == 202, started.text
        location = started.headers["Location"]
        patched = http.patch(
            location,
            content=zeros,
            headers={"Content-Range": f"0-{size - 1}", "Content-Type": "application/octet-stream"},
        )
        assert patched.status_code == 202, patched.text
        closed = http.put(patched.headers["Location"], params={"digest": weights})
        assert closed.status_code == 400, closed.text
        assert closed.json()["errors"][0]["code"] == "DIGEST_INVALID"
        # the real bytes are still accepted, as before
        real = (tmp_path / "x" / "model.safetensors").read_bytes()
        again = http.put(f"/v1/blobs/{weights}", params={"repository": repo_y}, content=real)
        assert again.status_code == 200, again.text
    # nothing of the refused bytes is served: the blob is X's weights
    assert registry.admin.get_blob(weights) == real


def test_a_bundle_sharing_layers_before_the_quarantine_keeps_them_and_is_named_in_the_audit(
    registry: Registry, tmp_path: Path
) -> None:
    """The other side of the rule: a bundle recorded before the quarantine keeps the layers it
    shares (its puller is not cut off), and the quarantine's audit event names it, so a
    reviewer can look at it (it may be a re-wrap pushed ahead of the quarantine)."""
    pub_a, pub_b = new_publisher(registry), new_publisher(registry)
    repo_x, repo_s = registry.repo(pub_a), registry.repo(pub_b)
    reader, reviewer = registry.actor("reader"), registry.actor("reviewer")
    x = pub_a.actor.client.push(make_bundle_dir(tmp_path / "x"), repo_x, sign=pub_a.sign).digest
    s = pub_b.actor.client.push(make_bundle_dir(tmp_path / "s"), repo_s, sign=pub_b.sign).digest
    weights, _ = _weights(registry, repo_x, x)
    assert _weights(registry, repo_s, s)[0] == weights
    mark = _mark(registry)
    reviewer.client.quarantine(repo_x, x, REASON)
    shared = httpx.get(f"{registry.url}/v1/blobs/{weights}", headers=_auth(reader.token))
    assert shared.status_code == 200, shared.text
    events = [
        e for e in registry.admin.iter_audit(after=mark) if e["action"] == "bundle.quarantine"
    ]
    assert [e["subject"] for e in events] == [f"{repo_x}@{x}"]
    assert events[0]["details"]["shares_blobs_with"] == [f"{repo_s}@{s}"]


def test_a_digest_known_only_as_a_pending_v2_copy_can_be_quarantined(
    registry: Registry, tmp_path: Path
) -> None:
    """Before, quarantine needed a bundle row: a manifest stored only as a ``/v2`` pending
    copy (its attestations not there yet) could not be quarantined and stayed served."""
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    reader, reviewer = registry.actor("reader"), registry.actor("reviewer")
    built = build_bundle(make_bundle_dir(tmp_path / "p"))
    blobs = [(built.manifest.config.digest, built.config_bytes)]
    blobs += [(built.manifest.layer(f.path).digest, f.abspath.read_bytes()) for f in built.files]
    with httpx.Client(base_url=registry.url, headers=_auth(pub.actor.token), timeout=60) as http:
        for digest, data in blobs:
            sent = http.post(f"/v2/{repo}/blobs/uploads/", params={"digest": digest}, content=data)
            assert sent.status_code == 201, sent.text
        put = http.put(
            f"/v2/{repo}/manifests/{built.manifest.digest}",
            content=built.manifest.raw,
            headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        )
        assert put.status_code == 201, put.text
        assert put.headers["Modelward-State"] == "pending"
    digest = built.manifest.digest
    path = f"{registry.url}/v2/{repo}/manifests/{digest}"
    assert httpx.get(path, headers=_auth(reader.token), timeout=60).status_code == 200
    mark = _mark(registry)
    record = reviewer.client.quarantine(repo, digest, REASON)
    assert (record["quarantined"], record["quarantine_reason"]) == (True, REASON)
    assert (record["state"], record["manifest"]) == ("pending", None)
    refused = httpx.get(path, headers=_auth(reader.token), timeout=60)
    assert refused.status_code == 403, refused.text
    assert refused.json()["errors"][0]["detail"]["code"] == "bundle_quarantined"
    events = [
        e for e in registry.admin.iter_audit(after=mark) if e["action"] == "bundle.quarantine"
    ]
    assert [e["subject"] for e in events] == [f"{repo}@{digest}"]
