"""Upload sessions are bounded: idle ones expire (and their parts go), a principal holds a
limited number at once, and an owner can cancel one. Real ``modelward serve`` processes."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.registry.test_registry_attacks import Reg, assert_denied, error, open_registry, sha


@pytest.fixture(scope="module")
def short_ttl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    with open_registry(
        tmp_path_factory.mktemp("upload-ttl"), {"MODELWARD_UPLOAD_TTL_SECONDS": "3"}
    ) as registry:
        yield registry


@pytest.fixture(scope="module")
def two_uploads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reg]:
    with open_registry(
        tmp_path_factory.mktemp("upload-quota"), {"MODELWARD_MAX_OPEN_UPLOADS": "2"}
    ) as registry:
        yield registry


REPO_OF = {"pub_a": "acme/a", "pub_b": "acme/b"}  # each publisher's repository (open_registry)


def _start(reg: Reg, who: str, data: bytes) -> str:
    body = {"digest": sha(data), "size": len(data), "repository": REPO_OF[who]}
    r = reg.actors[who].client.post("/v1/uploads", json=body)
    assert r.status_code == 201, r.text
    upload_id: str = r.json()["id"]
    return upload_id


def _parts_dir(reg: Reg, upload_id: str) -> bool:
    return (reg.data_dir / "blobs" / "_uploads" / upload_id).exists()


def test_idle_session_expires_and_the_next_start_removes_its_parts(short_ttl: Reg) -> None:
    pub = short_ttl.actors["pub_a"].client
    data = b"half an upload " + uuid.uuid4().bytes
    upload_id = _start(short_ttl, "pub_a", data)
    url = f"/v1/uploads/{upload_id}"
    assert pub.patch(url, content=data[:7], headers={"Upload-Offset": "0"}).status_code == 200
    assert _parts_dir(short_ttl, upload_id)
    time.sleep(3.5)
    err = error(pub.get(url), 404, "upload_expired")
    assert upload_id in err["message"]
    assert "expired after 3 s" in err["message"]
    error(pub.patch(url, content=data[7:], headers={"Upload-Offset": "7"}), 404, "upload_expired")
    error(pub.post(f"{url}/commit"), 404, "upload_expired")
    # anyone's next start sweeps it: the row, its parts, and an audit event
    other = _start(short_ttl, "pub_b", b"another upload " + uuid.uuid4().bytes)
    assert not _parts_dir(short_ttl, upload_id)
    expired = [
        e
        for e in short_ttl.audit()
        if e["action"] == "upload.expire" and e["details"]["upload_id"] == upload_id
    ]
    assert len(expired) == 1
    assert expired[0]["actor"] == "registry"
    assert expired[0]["details"]["offset"] == 7
    error(pub.get(url), 404, "not_found")
    # the blob never became visible
    error(short_ttl.admin.get(f"/v1/blobs/{sha(data)}"), 404, "not_found")
    assert short_ttl.actors["pub_b"].client.get(f"/v1/uploads/{other}").status_code == 200


def test_session_kept_alive_by_chunks_does_not_expire(short_ttl: Reg) -> None:
    pub = short_ttl.actors["pub_a"].client
    data = bytes(range(256)) * 4 + uuid.uuid4().bytes
    upload_id = _start(short_ttl, "pub_a", data)
    url = f"/v1/uploads/{upload_id}"
    offset = 0
    for _ in range(4):  # about 4 s in all, each chunk well inside the 3 s TTL
        time.sleep(1.0)
        step = 200
        r = pub.patch(
            url, content=data[offset : offset + step], headers={"Upload-Offset": str(offset)}
        )
        assert r.status_code == 200, r.text
        offset += step
    r = pub.patch(url, content=data[offset:], headers={"Upload-Offset": str(offset)})
    assert r.status_code == 200, r.text
    assert pub.post(f"{url}/commit").status_code == 201
    assert short_ttl.admin.get(f"/v1/blobs/{sha(data)}").content == data


def test_open_sessions_are_limited_per_principal(two_uploads: Reg) -> None:
    first = _start(two_uploads, "pub_a", b"one " + uuid.uuid4().bytes)
    _start(two_uploads, "pub_a", b"two " + uuid.uuid4().bytes)
    since = two_uploads.last_seq()
    third = b"three " + uuid.uuid4().bytes
    r = two_uploads.actors["pub_a"].client.post(
        "/v1/uploads", json={"digest": sha(third), "size": len(third), "repository": "acme/a"}
    )
    err = error(r, 429, "quota_exceeded")
    assert err["detail"] == {"open": 2, "limit": 2}
    assert "pub_a already has 2 open upload sessions (limit 2)" in err["message"]
    assert_denied(two_uploads, since, 429, "quota_exceeded", actor="pub_a")
    # another principal has its own allowance
    _start(two_uploads, "pub_b", b"b's " + uuid.uuid4().bytes)
    # cancelling one frees a slot
    assert two_uploads.actors["pub_a"].client.delete(f"/v1/uploads/{first}").status_code == 204
    _start(two_uploads, "pub_a", third)


def test_cancel_removes_the_session_and_its_parts_and_only_the_owner_may(two_uploads: Reg) -> None:
    owner, thief = two_uploads.actors["pub_b"].client, two_uploads.actors["pub_a"].client
    data = b"cancel me " + uuid.uuid4().bytes
    upload_id = _start(two_uploads, "pub_b", data)
    url = f"/v1/uploads/{upload_id}"
    assert owner.patch(url, content=data[:4], headers={"Upload-Offset": "0"}).status_code == 200
    since = two_uploads.last_seq()
    error(thief.delete(url), 404, "not_found")
    error(two_uploads.actors["worker"].client.delete(url), 403, "forbidden")
    assert_denied(two_uploads, since, 403, "forbidden", actor="worker")
    assert owner.get(url).json()["offset"] == 4
    assert owner.delete(url).status_code == 204
    assert not _parts_dir(two_uploads, upload_id)
    error(owner.get(url), 404, "not_found")
    error(owner.delete(url), 404, "not_found")
    cancelled = [
        e
        for e in two_uploads.audit()
        if e["action"] == "upload.cancel" and e["details"]["upload_id"] == upload_id
    ]
    assert [e["actor"] for e in cancelled] == ["pub_b"]


def test_cut_off_chunk_leaves_nothing_the_next_chunk_does_not_overwrite(short_ttl: Reg) -> None:
    """Chunks are written in place: a chunk cut off mid-body leaves bytes past the session
    offset; the resumed chunk overwrites them and the blob is exactly what was meant."""
    from tests.registry.test_bad_input import _raw_http

    pub = short_ttl.actors["pub_a"]
    data = os.urandom(3 << 20)
    upload_id = _start(short_ttl, "pub_a", data)
    url = f"/v1/uploads/{upload_id}"
    assert (
        pub.client.patch(url, content=data[:1000], headers={"Upload-Offset": "0"}).status_code
        == 200
    )
    head = (
        f"PATCH {url} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {pub.token}\r\n"
        f"Upload-Offset: 1000\r\nContent-Length: {len(data) - 1000}\r\n\r\n"
    )
    # wrong bytes, cut short: the server writes the first MiB(s) of them past offset 1000
    status, _ = _raw_http(short_ttl.url, head, b"\xff" * (2 << 20))
    assert status in (0, 400)
    assert pub.client.get(url).json()["offset"] == 1000
    in_place = short_ttl.data_dir / "blobs" / "_uploads" / upload_id / "data"
    assert in_place.stat().st_size > 1000 + (1 << 20)  # the cut-off chunk's bytes are there
    r = pub.client.patch(url, content=data[1000:], headers={"Upload-Offset": "1000"})
    assert r.status_code == 200, r.text
    assert pub.client.post(f"{url}/commit").status_code == 201
    assert short_ttl.admin.get(f"/v1/blobs/{sha(data)}").content == data
    assert not _parts_dir(short_ttl, upload_id)
