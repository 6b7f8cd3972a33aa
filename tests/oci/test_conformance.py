"""The distribution-spec conformance categories (pull, push, content discovery, content
management) against ``modelward serve``, with plain HTTP: the conformance suite itself does
not build offline here (docs/oci.md#conformance)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from tests.oci.conftest import basic, bearer_for, new_bundle, new_publisher
from tests.registry.conftest import Publisher, Registry


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Oci:
    def __init__(self, mw: Registry, pub: Publisher, repo: str) -> None:
        self.mw, self.repo = mw, repo
        bearer = bearer_for(
            mw, pub.name, pub.actor.token, f"repository:{repo}:pull,push", "registry:catalog:*"
        )
        self.http = httpx.Client(
            base_url=f"{mw.url}/v2/{repo}",
            timeout=60,
            headers={"Authorization": f"Bearer {bearer}"},
        )

    def upload(self, data: bytes) -> httpx.Response:
        start = self.http.post("/blobs/uploads/")
        assert start.status_code == 202, start.text
        return self.http.put(
            start.headers["Location"].removeprefix(f"/v2/{self.repo}"),
            params={"digest": _sha(data)},
            content=data,
        )


@pytest.fixture
def oci(mw: Registry) -> Oci:
    pub = new_publisher(mw)
    return Oci(mw, pub, mw.repo(pub.actor))


def _error(response: httpx.Response) -> str:
    return str(response.json()["errors"][0]["code"])


# -- push ----------------------------------------------------------------------------------
def test_monolithic_upload_then_head_and_get(oci: Oci) -> None:
    data = b"monolithic " * 100
    done = oci.upload(data)
    assert done.status_code == 201, done.text
    assert done.headers["Docker-Content-Digest"] == _sha(data)
    head = oci.http.head(f"/blobs/{_sha(data)}")
    assert head.status_code == 200
    assert head.headers["content-length"] == str(len(data))
    assert oci.http.get(f"/blobs/{_sha(data)}").content == data


def test_single_post_with_digest_is_a_monolithic_upload(oci: Oci) -> None:
    data = b"one post"
    done = oci.http.post("/blobs/uploads/", params={"digest": _sha(data)}, content=data)
    assert done.status_code == 201, done.text
    assert oci.http.get(f"/blobs/{_sha(data)}").content == data


def test_chunked_upload_with_content_range(oci: Oci) -> None:
    data = bytes(range(256)) * 40
    start = oci.http.post("/blobs/uploads/")
    location = start.headers["Location"].removeprefix(f"/v2/{oci.repo}")
    first = oci.http.patch(
        location,
        content=data[:4000],
        headers={"Content-Range": "0-3999", "Content-Type": "application/octet-stream"},
    )
    assert first.status_code == 202
    assert first.headers["Range"] == "0-3999"
    status = oci.http.get(location)
    assert status.status_code == 204
    assert status.headers["Range"] == "0-3999"
    second = oci.http.patch(
        location, content=data[4000:], headers={"Content-Range": f"4000-{len(data) - 1}"}
    )
    assert second.status_code == 202
    done = oci.http.put(location, params={"digest": _sha(data)})
    assert done.status_code == 201, done.text
    assert oci.http.get(f"/blobs/{_sha(data)}").content == data


def test_chunk_out_of_order_is_range_invalid(oci: Oci) -> None:
    start = oci.http.post("/blobs/uploads/")
    location = start.headers["Location"].removeprefix(f"/v2/{oci.repo}")
    wrong = oci.http.patch(location, content=b"abc", headers={"Content-Range": "10-12"})
    assert wrong.status_code == 416
    assert _error(wrong) == "RANGE_INVALID"


def test_upload_with_a_wrong_digest_is_digest_invalid(oci: Oci) -> None:
    start = oci.http.post("/blobs/uploads/")
    location = start.headers["Location"].removeprefix(f"/v2/{oci.repo}")
    done = oci.http.put(location, params={"digest": _sha(b"other")}, content=b"these bytes")
    assert done.status_code == 400
    assert _error(done) == "DIGEST_INVALID"
    assert oci.http.head(f"/blobs/{_sha(b'these bytes')}").status_code == 404


def test_cross_repository_mount_needs_a_bundle_of_the_source(mw: Registry, tmp_path: Path) -> None:
    pub = new_publisher(mw)
    source, target = mw.repo(pub.actor), mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    pub.actor.client.push(bundle.root, source, sign=pub.sign)
    bearer = bearer_for(
        mw, pub.name, pub.actor.token, f"repository:{target}:pull,push", f"repository:{source}:pull"
    )
    http = httpx.Client(
        base_url=f"{mw.url}/v2/{target}", timeout=60, headers={"Authorization": f"Bearer {bearer}"}
    )
    layer = bundle.built.manifest.layers[0].digest
    mounted = http.post("/blobs/uploads/", params={"mount": layer, "from": source})
    assert mounted.status_code == 201
    assert mounted.headers["Docker-Content-Digest"] == layer
    unknown = http.post("/blobs/uploads/", params={"mount": _sha(b"nowhere"), "from": source})
    assert unknown.status_code == 202  # not in the source: a plain upload instead


def test_manifest_with_missing_blobs_is_refused(oci: Oci, mw: Registry, tmp_path: Path) -> None:
    pub = new_publisher(mw)
    bundle = new_bundle(pub, tmp_path)
    raw = bundle.built.manifest.raw
    put = oci.http.put(
        f"/manifests/{bundle.digest}",
        content=raw,
        headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
    )
    assert put.status_code == 400
    assert _error(put) == "MANIFEST_BLOB_UNKNOWN"


def test_image_index_is_unsupported(oci: Oci) -> None:
    body = (
        b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}'
    )
    put = oci.http.put(f"/manifests/{_sha(body)}", content=body)
    assert put.status_code == 415
    assert _error(put) == "UNSUPPORTED"


# -- pull ----------------------------------------------------------------------------------
def test_blob_range_request(oci: Oci) -> None:
    data = bytes(range(200))
    oci.upload(data)
    part = oci.http.get(f"/blobs/{_sha(data)}", headers={"Range": "bytes=10-19"})
    assert part.status_code == 206
    assert part.content == data[10:20]
    assert part.headers["Content-Range"] == f"bytes 10-19/{len(data)}"
    bad = oci.http.get(f"/blobs/{_sha(data)}", headers={"Range": "bytes=500-"})
    assert bad.status_code == 416
    assert _error(bad) == "RANGE_INVALID"


def test_unknown_things_have_their_codes(oci: Oci) -> None:
    assert _error(oci.http.get(f"/blobs/{_sha(b'none')}")) == "BLOB_UNKNOWN"
    assert _error(oci.http.get(f"/manifests/{_sha(b'none')}")) == "MANIFEST_UNKNOWN"
    assert _error(oci.http.get("/manifests/no-such-tag")) == "MANIFEST_UNKNOWN"
    other = httpx.get(
        f"{oci.mw.url}/v2/nobody/nothing/tags/list",
        headers={"Authorization": f"Bearer {oci.mw.server.admin_token}"},
    )
    assert other.status_code == 404
    assert _error(other) == "NAME_UNKNOWN"


# -- content discovery ---------------------------------------------------------------------
def test_tags_and_catalog_paginate_with_link_headers(mw: Registry, tmp_path: Path) -> None:
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign).digest
    for tag in ("a", "b", "c"):
        pub.actor.client.set_alias(repo, tag, digest, expected_version=0)
    bearer = bearer_for(
        mw, pub.name, pub.actor.token, f"repository:{repo}:pull", "registry:catalog:*"
    )
    auth = {"Authorization": f"Bearer {bearer}"}
    first = httpx.get(f"{mw.url}/v2/{repo}/tags/list", params={"n": 2}, headers=auth)
    assert first.json() == {"name": repo, "tags": ["a", "b"]}
    link = first.headers["Link"]
    assert link.startswith(f"</v2/{repo}/tags/list?n=2&last=b>")
    rest = httpx.get(mw.url + link[1 : link.index(">")], headers=auth)
    assert rest.json()["tags"] == ["c"]
    assert "Link" not in rest.headers
    page = httpx.get(f"{mw.url}/v2/_catalog", params={"n": 1}, headers=auth)
    assert len(page.json()["repositories"]) == 1
    assert 'rel="next"' in page.headers["Link"]


# -- content management --------------------------------------------------------------------
def test_delete_is_refused(oci: Oci) -> None:
    gone = oci.http.delete(f"/manifests/{_sha(b'x')}")
    assert gone.status_code == 405
    assert _error(gone) == "UNSUPPORTED"
    blob = oci.http.delete(f"/blobs/{_sha(b'x')}")
    assert blob.status_code == 405
    assert _error(blob) == "UNSUPPORTED"


# -- auth ----------------------------------------------------------------------------------
def test_base_answers_401_with_the_bearer_challenge(mw: Registry) -> None:
    answer = httpx.get(f"{mw.url}/v2/")
    assert answer.status_code == 401
    assert _error(answer) == "UNAUTHORIZED"
    challenge = answer.headers["WWW-Authenticate"]
    assert challenge == f'Bearer realm="{mw.url}/v2/token",service="modelward"'
    scoped = httpx.put(f"{mw.url}/v2/acme/x/manifests/latest", content=b"{}")
    assert 'scope="repository:acme/x:pull,push"' in scoped.headers["WWW-Authenticate"]
    assert (
        httpx.get(
            f"{mw.url}/v2/", headers={"Authorization": f"Bearer {mw.server.admin_token}"}
        ).status_code
        == 200
    )


def test_token_endpoint_refuses_anonymous_and_wrong_names(mw: Registry) -> None:
    pub = new_publisher(mw)
    assert httpx.get(f"{mw.url}/v2/token").status_code == 401
    wrong = httpx.get(
        f"{mw.url}/v2/token", headers={"Authorization": basic("somebody-else", pub.actor.token)}
    )
    assert wrong.status_code == 401
    assert "does not belong" in wrong.text


def test_publisher_of_another_repository_gets_a_pull_only_token(mw: Registry) -> None:
    pub, outsider = new_publisher(mw), new_publisher(mw)
    repo = mw.repo(pub.actor)
    reader = outsider.actor
    answer = httpx.get(
        f"{mw.url}/v2/token",
        params={"scope": f"repository:{repo}:pull,push"},
        headers={"Authorization": basic(reader.name, reader.token)},
    )
    assert answer.json()["access"] == [{"type": "repository", "name": repo, "actions": ["pull"]}]
    bearer = answer.json()["token"]
    post = httpx.post(
        f"{mw.url}/v2/{repo}/blobs/uploads/", headers={"Authorization": f"Bearer {bearer}"}
    )
    assert post.status_code == 403
    assert _error(post) == "DENIED"
    assert 'error="insufficient_scope"' in post.headers["WWW-Authenticate"]


def test_revoking_the_api_token_ends_its_bearers(mw: Registry) -> None:
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bearer = bearer_for(mw, pub.name, pub.actor.token, f"repository:{repo}:pull")
    auth = {"Authorization": f"Bearer {bearer}"}
    assert httpx.get(f"{mw.url}/v2/{repo}/tags/list", headers=auth).status_code == 200
    token_id = pub.actor.token.split("_")[1]
    mw.admin.revoke_token(token_id)
    after = httpx.get(f"{mw.url}/v2/{repo}/tags/list", headers=auth)
    assert after.status_code == 401
    assert "revoked" in after.text


def test_uploads_past_the_repository_quota_are_denied_by_both_door_rules(oci: Oci) -> None:
    """/v2 charges a blob to the repository's quota once its size is known (the closing PUT
    of a session, or a monolithic PUT): the same quota and message as /v1."""
    oci.mw.cli("repo", "quota", "set", oci.repo, "1000", check=True)
    fits = oci.upload(b"f" * 600)
    assert fits.status_code == 201, fits.text
    over = oci.upload(b"o" * 600)
    assert over.status_code == 413, over.text
    assert _error(over) == "DENIED"
    message = over.json()["errors"][0]["message"]
    assert oci.repo in message
    assert "quota" in message
    assert oci.http.head(f"/blobs/{_sha(b'o' * 600)}").status_code == 404
    monolithic = oci.http.post(
        "/blobs/uploads/", params={"digest": _sha(b"m" * 600)}, content=b"m" * 600
    )
    assert monolithic.status_code == 413, monolithic.text
