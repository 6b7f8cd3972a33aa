"""Quarantine through every ``/v2`` door (docs/oci.md#quarantine-and-quotas).

Before, a digest quarantined through repository X was still served through ``/v2`` from a
``pending`` copy in repository Y: the manifest GET looked for a quarantine only on bundle rows.
Every ``/v2`` read door now asks ``quarantine.service.require_readable`` about what it hands
out, whatever the manifest is stored as there. One test per attack, against a real
``modelward serve`` (SQLite and PostgreSQL); one of them enumerates the doors from the router,
so a door added later without a quarantine check fails it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import httpx

from modelward.registry.domains.oci.endpoints import router
from tests.registry.conftest import (
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    unique,
)

REASON = "weights exfiltrate prompts"


@dataclass
class World:
    """Digest D: a bundle in X (tag ``dev``, a signature as a referrer), a ``pending`` copy
    in Y, and its manifest bytes uploaded as a blob to Y; then quarantined through X."""

    pub_a: Publisher
    pub_b: Publisher
    repo_x: str
    repo_y: str
    digest: str
    layer: str  # a layer of D
    referrer: str  # the referrer manifest of D's signature in X
    attestation: str  # its layer: the signature's bytes


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _mark(reg: Registry) -> int:
    return max([0, *(int(e["seq"]) for e in reg.admin.iter_audit())])


def _world(reg: Registry, tmp: Path) -> World:
    pub_a, pub_b = new_publisher(reg), new_publisher(reg)
    repo_x, repo_y = reg.repo(pub_a.actor), reg.repo(pub_b.actor)
    root = make_bundle_dir(tmp / unique("b"))
    digest = pub_a.actor.client.push(root, repo_x, sign=pub_a.sign, alias="dev").digest
    raw = reg.admin.get_manifest(repo_x, digest)
    b = _auth(pub_b.actor.token)
    # B pushes the same manifest into Y through /v2, unsigned: stored as pending
    put = httpx.put(f"{reg.url}/v2/{repo_y}/manifests/{digest}", content=raw, headers=b)
    assert put.status_code == 201, put.text
    assert put.headers["Modelward-State"] == "pending"
    # and its bytes as a blob (any client can upload any bytes)
    blob = httpx.post(
        f"{reg.url}/v2/{repo_y}/blobs/uploads/", params={"digest": digest}, content=raw, headers=b
    )
    assert blob.status_code == 201, blob.text
    a = _auth(pub_a.actor.token)
    found = httpx.get(f"{reg.url}/v2/{repo_x}/referrers/{digest}", headers=a)
    assert found.status_code == 200, found.text
    referrer = str(found.json()["manifests"][0]["digest"])
    manifest = httpx.get(f"{reg.url}/v2/{repo_x}/manifests/{referrer}", headers=a)
    assert manifest.status_code == 200, manifest.text
    attestation = str(json.loads(manifest.content)["layers"][0]["digest"])
    layer = str(json.loads(raw)["layers"][0]["digest"])
    reviewer = reg.actor("reviewer")
    reviewer.client.quarantine(repo_x, digest, REASON)
    return World(pub_a, pub_b, repo_x, repo_y, digest, layer, referrer, attestation)


def _denied(answer: httpx.Response, what: str) -> None:
    assert answer.status_code == 403, (what, answer.status_code, answer.text)
    if answer.request.method != "HEAD":
        error = answer.json()["errors"][0]
        assert error["code"] == "DENIED", (what, error)
        assert error["detail"]["code"] == "bundle_quarantined", (what, error)


def test_quarantined_digest_served_from_a_pending_copy_in_another_repo_is_denied(
    registry: Registry, tmp_path: Path
) -> None:
    """The issue's attack: quarantined through X, fetched by digest through Y, where a
    pending copy of the same manifest is stored."""
    w = _world(registry, tmp_path)
    mark = _mark(registry)
    url = f"{registry.url}/v2/{w.repo_y}/manifests/{w.digest}"
    for actor in (w.pub_b.actor, w.pub_a.actor, registry.actor("reader")):
        for method in ("GET", "HEAD"):
            answer = httpx.request(method, url, headers=_auth(actor.token))
            _denied(answer, f"{method} pending copy as {actor.name}")
            if method == "GET":
                message = answer.json()["errors"][0]["message"]
                assert REASON in message, message
                assert answer.json()["errors"][0]["detail"]["detail"]["quarantined_in"] == (
                    w.repo_x
                )
    denied = [
        e
        for e in registry.admin.iter_audit(after=mark)
        if e["action"] == "denied"
        and e["actor"] == w.pub_b.name
        and e["subject"] == f"GET /v2/{w.repo_y}/manifests/{w.digest}"
    ]
    assert denied
    assert denied[0]["details"]["code"] == "bundle_quarantined"
    # forensics: a reviewer still reads the pending copy's exact bytes
    reviewer = registry.actor("reviewer")
    forensic = httpx.get(url, headers=_auth(reviewer.token))
    assert forensic.status_code == 200, forensic.text
    assert "sha256:" + hashlib.sha256(forensic.content).hexdigest() == w.digest


def test_every_v2_read_door_refuses_a_quarantined_digest(
    registry: Registry, tmp_path: Path
) -> None:
    """Each ``/v2`` GET/HEAD route of a repository, and the cross-repository mount, asked
    about the quarantined digest (or what hands it out: its layer, its referrer, its
    attestation), refuses everyone but admins and reviewers."""
    w = _world(registry, tmp_path)
    x, y = w.repo_x, w.repo_y
    doors = {  # (route template, concrete path) -> what it would hand out
        ("/v2/{org}/{name}/manifests/{reference}", f"/v2/{x}/manifests/{w.digest}"): "bundle",
        ("/v2/{org}/{name}/manifests/{reference}", f"/v2/{x}/manifests/dev"): "bundle by tag",
        ("/v2/{org}/{name}/manifests/{reference}", f"/v2/{y}/manifests/{w.digest}"): "pending",
        ("/v2/{org}/{name}/manifests/{reference}", f"/v2/{x}/manifests/{w.referrer}"): (
            "a referrer of it"
        ),
        ("/v2/{org}/{name}/referrers/{digest}", f"/v2/{x}/referrers/{w.digest}"): "referrers",
        ("/v2/{org}/{name}/blobs/{digest}", f"/v2/{x}/blobs/{w.layer}"): "its layer",
        ("/v2/{org}/{name}/blobs/{digest}", f"/v2/{y}/blobs/{w.digest}"): (
            "the manifest bytes as a blob"
        ),
        ("/v2/{org}/{name}/blobs/{digest}", f"/v2/{x}/blobs/{w.attestation}"): ("its attestation"),
    }
    reader, reviewer = registry.actor("reader"), registry.actor("reviewer")
    mark = _mark(registry)
    for (_, path), what in doors.items():
        for method in ("GET", "HEAD"):
            if method == "HEAD" and "/referrers/" in path:
                continue
            for actor in (reader, w.pub_b.actor):
                answer = httpx.request(method, registry.url + path, headers=_auth(actor.token))
                _denied(answer, f"{method} {what} ({path}) as {actor.role}")
            forensic = httpx.request(method, registry.url + path, headers=_auth(reviewer.token))
            assert forensic.status_code == 200, (what, method, forensic.text)
    audited = {
        e["subject"]
        for e in registry.admin.iter_audit(after=mark)
        if e["action"] == "denied" and e["actor"] == reader.name
    }
    assert {f"GET {path}" for _, path in doors} <= audited
    # the tag list: a tag on the quarantined digest is left out (reviewers still see it)
    tags = "/v2/{org}/{name}/tags/list"
    for actor, expected in ((reader, []), (w.pub_a.actor, []), (reviewer, ["dev"])):
        listed = httpx.get(f"{registry.url}/v2/{x}/tags/list", headers=_auth(actor.token))
        assert listed.status_code == 200, listed.text
        assert listed.json()["tags"] == expected, actor.role
    # a mount of its layer is not granted: the client must upload the bytes itself
    mount = httpx.post(
        f"{registry.url}/v2/{y}/blobs/uploads/",
        params={"mount": w.layer, "from": x},
        headers=_auth(w.pub_b.actor.token),
    )
    assert mount.status_code == 202, mount.text
    httpx.delete(registry.url + mount.headers["Location"], headers=_auth(w.pub_b.actor.token))
    # every repository read route of /v2 is one of the doors above
    covered = {template for template, _ in doors} | {tags}
    reads = {
        str(route.path)  # type: ignore[attr-defined]
        for route in router.routes
        if {"GET", "HEAD"} & set(getattr(route, "methods", ()))
        and str(route.path).startswith("/v2/{org}/{name}/")  # type: ignore[attr-defined]
        and "/blobs/uploads/" not in str(route.path)  # type: ignore[attr-defined]
    }
    assert reads == covered, reads ^ covered
