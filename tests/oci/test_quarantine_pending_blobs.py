"""Quarantining a digest known only as a ``/v2`` pending manifest covers its blobs
(docs/registry.md#quarantine).

Before, the quarantine covered the blobs of quarantined *bundles* only (``bundle_blobs``): a
digest quarantined while it was a pending ``/v2`` manifest had no bundle, so its weights stayed
readable on ``/v1`` and ``/v2``, and a new bundle naming them was accepted and served. Now the
blobs a quarantined pending manifest names are covered like a bundle's, through every door.
Real ``modelward serve`` (SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from modelward.attest.manifest import build_bundle
from modelward.client.api import APIError
from tests.registry.conftest import Registry, make_bundle_dir, new_publisher, unique

REASON = "weights phone home"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _upload(reg: Registry, repo: str, token: str, digest: str, data: bytes) -> None:
    answer = httpx.post(
        f"{reg.url}/v2/{repo}/blobs/uploads/",
        params={"digest": digest},
        content=data,
        headers=_auth(token),
        timeout=60,
    )
    assert answer.status_code == 201, answer.text


def test_quarantined_pending_manifest_weights_are_not_served_or_rewrapped(
    registry: Registry, tmp_path: Path
) -> None:
    pub_a, pub_b = new_publisher(registry), new_publisher(registry)
    repo_x, repo_y = registry.repo(pub_a), registry.repo(pub_b)  # two organizations
    reader, reviewer = registry.actor("reader"), registry.actor("reviewer")
    # B pushes an unsigned bundle through /v2: its blobs, then its manifest, stored as pending
    root = make_bundle_dir(tmp_path / unique("p"))
    built = build_bundle(root)
    _upload(registry, repo_y, pub_b.actor.token, built.manifest.config.digest, built.config_bytes)
    for layer in built.manifest.layers:
        _upload(registry, repo_y, pub_b.actor.token, layer.digest, (root / layer.path).read_bytes())
    digest = built.manifest.digest
    put = httpx.put(
        f"{registry.url}/v2/{repo_y}/manifests/{digest}",
        content=built.manifest.raw,
        headers=_auth(pub_b.actor.token),
    )
    assert put.status_code == 201, put.text
    assert put.headers["Modelward-State"] == "pending"
    weights = next(
        str(layer["digest"])
        for layer in json.loads(built.manifest.raw)["layers"]
        if layer["annotations"]["org.cncf.model.filepath"] == "model.safetensors"
    )
    v1 = f"{registry.url}/v1/blobs/{weights}"
    assert httpx.get(v1, headers=_auth(reader.token)).status_code == 200
    # quarantined through Y, where it is only a pending manifest
    reviewer.client.quarantine(repo_y, digest, REASON)
    quarantined = [
        e
        for e in registry.admin.iter_audit()
        if e["action"] == "bundle.quarantine" and e["subject"] == f"{repo_y}@{digest}"
    ]
    assert weights in quarantined[-1]["details"]["covers_blobs"]
    # (1) /v1 and /v2 reads, for readers and publishers of either organization
    for actor in (reader, pub_a.actor, pub_b.actor):
        got = httpx.get(v1, headers=_auth(actor.token))
        assert got.status_code == 409, (actor.name, got.text)
        assert got.json()["error"]["code"] == "bundle_quarantined"
        for repo in (repo_y, repo_x):
            for method in ("GET", "HEAD"):
                answer = httpx.request(
                    method, f"{registry.url}/v2/{repo}/blobs/{weights}", headers=_auth(actor.token)
                )
                assert answer.status_code == 403, (actor.name, method, repo, answer.text)
    # (2) a cross-repository mount into A's repository does not hand it out
    mount = httpx.post(
        f"{registry.url}/v2/{repo_x}/blobs/uploads/",
        params={"mount": weights, "from": repo_y},
        headers=_auth(pub_a.actor.token),
    )
    assert mount.status_code == 202, mount.text
    httpx.delete(f"{registry.url}{mount.headers['Location']}", headers=_auth(pub_a.actor.token))
    # (3) a new bundle naming the weights (another config.json) is refused, in any organization
    rewrap = make_bundle_dir(tmp_path / unique("r"))  # the same model.safetensors
    with pytest.raises(APIError) as info:
        pub_a.actor.client.push(rewrap, repo_x, sign=pub_a.sign)
    assert (info.value.status, info.value.code) == (409, "bundle_quarantined"), info.value
    assert info.value.detail["blob"] == weights
    assert info.value.detail["quarantined_digest"] == digest
    assert REASON in info.value.message
    # forensics: a reviewer still reads the weights
    assert httpx.get(v1, headers=_auth(reviewer.token)).status_code == 200
