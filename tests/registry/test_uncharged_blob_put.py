"""Issue 30 item 3: a blob stored through ``/v1`` without naming a repository was charged to
no repository's quota. Both ``/v1`` doors (``PUT /v1/blobs/{digest}`` and ``POST
/v1/uploads``) now refuse a request that names none, before a byte is stored, and audit the
refusal."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import httpx
import pytest

from tests.registry.conftest import Registry, new_publisher


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _refused(response: httpx.Response, parameter_form: str) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "repository_required", error
    assert "repository" in error["message"], error
    assert parameter_form in error["message"], error
    return dict(error)


def _denials(reg: Registry, actor: str, after: int) -> list[dict[str, Any]]:
    return [
        e
        for e in reg.admin.iter_audit(after=after)
        if e["actor"] == actor
        and e["action"] == "denied"
        and e["details"].get("code") == "repository_required"
    ]


def test_a_blob_put_without_a_repository_is_refused_and_charged_to_nobody(
    registry: Registry,
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    events = list(registry.admin.iter_audit())
    mark = int(events[-1]["seq"]) if events else 0
    headers = {"Authorization": f"Bearer {pub.actor.token}"}
    whole, chunked = os.urandom(4096), os.urandom(4096)
    with httpx.Client(base_url=registry.url, headers=headers, timeout=60) as http:
        # PUT /v1/blobs/{digest}: no ?repository=, or an empty one.
        for params in (None, {"repository": ""}):
            put = http.put(f"/v1/blobs/{_sha(whole)}", params=params, content=whole)
            _refused(put, "?repository=ORG/NAME")
        assert http.head(f"/v1/blobs/{_sha(whole)}").status_code == 404
        # POST /v1/uploads: no repository in the body, or a null one.
        for body in (
            {"digest": _sha(chunked), "size": len(chunked)},
            {"digest": _sha(chunked), "size": len(chunked), "repository": None},
        ):
            _refused(http.post("/v1/uploads", json=body), '"repository": "ORG/NAME"')
        assert http.head(f"/v1/blobs/{_sha(chunked)}").status_code == 404

        # Each refusal is audited, naming the door.
        denied = _denials(registry, pub.actor.name, mark)
        subjects = [e["subject"] for e in denied]
        assert subjects.count(f"PUT /v1/blobs/{_sha(whole)}") == 2, subjects
        assert subjects.count("POST /v1/uploads") == 2, subjects
        # ...and no session was opened for the caller.
        opened = [
            e
            for e in registry.admin.iter_audit(after=mark)
            if e["actor"] == pub.actor.name and e["action"] in ("upload.start", "blob.put")
        ]
        assert not opened, opened

        # Naming the repository, both doors store the blob (charged to it).
        put = http.put(f"/v1/blobs/{_sha(whole)}", params={"repository": repo}, content=whole)
        assert put.status_code == 201, put.text
        started = http.post(
            "/v1/uploads",
            json={"digest": _sha(chunked), "size": len(chunked), "repository": repo},
        )
        assert started.status_code == 201, started.text
        upload = started.json()["id"]
        patched = http.patch(
            f"/v1/uploads/{upload}", content=chunked, headers={"Upload-Offset": "0"}
        )
        assert patched.status_code == 200, patched.text
        assert http.post(f"/v1/uploads/{upload}/commit").status_code == 201
        assert http.head(f"/v1/blobs/{_sha(chunked)}").status_code == 200


@pytest.mark.sqlite_only
def test_the_client_names_the_repository_it_uploads_for(registry: Registry) -> None:
    """``put_blob`` and ``upload_file`` take the repository the blob is charged to."""
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    data = os.urandom(512)
    with pytest.raises(TypeError):
        pub.actor.client.put_blob(_sha(data), data)  # type: ignore[call-arg]
    pub.actor.client.put_blob(_sha(data), data, repository=repo)
    assert pub.actor.client.blob_size(_sha(data)) == len(data)
