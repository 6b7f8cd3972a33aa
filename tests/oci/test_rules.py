"""Same rules on both doors: what /v2 refuses, and what it records."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from tests.attest.corpus import canary_pickle
from tests.oci.conftest import (
    Bundle,
    bearer_for,
    host_of,
    new_bundle,
    new_publisher,
    skopeo,
    skopeo_login,
    write_layout,
)
from tests.registry.conftest import Registry, make_bundle_dir, unique


def _code(response: httpx.Response) -> str:
    return str(response.json()["errors"][0]["code"])


def test_bundle_with_a_malicious_pickle_is_refused_and_not_pending(
    mw: Registry, tmp_path: Path
) -> None:
    from modelward.attest.manifest import build_bundle

    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    root = make_bundle_dir(tmp_path / unique("evil"))
    (root / "evil.pkl").write_bytes(canary_pickle(tmp_path / "canary", 2))
    built = build_bundle(root)
    bundle = Bundle(root, built, pub.sign(built)[0])
    layout = write_layout(bundle, tmp_path / "layout", "v1")
    auth = tmp_path / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    result = skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{host_of(mw)}/{repo}@{bundle.digest}",
        authfile=auth,
        check=False,
    )
    assert result.returncode != 0
    assert "scan" in result.stderr, result.stderr
    bearer = bearer_for(mw, pub.name, pub.actor.token, f"repository:{repo}:pull")
    got = httpx.get(
        f"{mw.url}/v2/{repo}/manifests/{bundle.digest}",
        headers={"Authorization": f"Bearer {bearer}"},
    )
    assert got.status_code == 404
    assert _code(got) == "MANIFEST_UNKNOWN"


def test_publisher_of_another_repository_cannot_push_there(mw: Registry, tmp_path: Path) -> None:
    owner, outsider = new_publisher(mw), new_publisher(mw)
    repo = mw.repo(owner.actor)
    bundle = new_bundle(owner, tmp_path)
    owner.actor.client.push(bundle.root, mw.repo(owner.actor), sign=owner.sign)  # blobs exist
    direct = {"Authorization": f"Bearer {outsider.actor.token}"}
    upload = httpx.post(f"{mw.url}/v2/{repo}/blobs/uploads/", headers=direct)
    assert upload.status_code == 403
    assert _code(upload) == "DENIED"
    put = httpx.put(
        f"{mw.url}/v2/{repo}/manifests/{bundle.digest}",
        content=bundle.built.manifest.raw,
        headers=direct,
    )
    assert put.status_code == 403
    assert _code(put) == "DENIED"
    assert outsider.name in put.json()["errors"][0]["message"]


def test_pending_tag_refusal_is_audited(mw: Registry, tmp_path: Path) -> None:
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    layout = write_layout(bundle, tmp_path / "layout", "v1")
    auth = tmp_path / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    result = skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{host_of(mw)}/{repo}:staging",
        authfile=auth,
        check=False,
    )
    assert result.returncode != 0
    events = list(mw.admin.iter_audit())
    pending = [
        e
        for e in events
        if e["action"] == "oci.manifest.pending" and e["subject"] == f"{repo}@{bundle.digest}"
    ]
    assert len(pending) == 1
    assert any("predicate" in r or "threshold" in r for r in pending[0]["details"]["reasons"])
    denied = [
        e
        for e in events
        if e["action"] == "denied" and e["subject"] == f"PUT /v2/{repo}/manifests/staging"
    ]
    assert denied
    assert denied[-1]["details"]["status"] == 403


def test_quarantined_bundle_manifest_is_denied_to_publishers(mw: Registry, tmp_path: Path) -> None:
    pub = new_publisher(mw)
    reviewer = mw.actor("reviewer")
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign).digest
    reviewer.client.quarantine(repo, digest, "suspected backdoor")
    auth = {"Authorization": f"Bearer {pub.actor.token}"}
    got = httpx.get(f"{mw.url}/v2/{repo}/manifests/{digest}", headers=auth)
    assert got.status_code == 403
    assert _code(got) == "DENIED"
    layer = bundle.built.manifest.layers[0].digest
    blob = httpx.get(f"{mw.url}/v2/{repo}/blobs/{layer}", headers=auth)
    assert blob.status_code == 403
    as_reviewer = httpx.get(
        f"{mw.url}/v2/{repo}/manifests/{digest}",
        headers={"Authorization": f"Bearer {reviewer.token}"},
    )
    assert as_reviewer.status_code == 200
    assert hashlib.sha256(as_reviewer.content).hexdigest() == digest.removeprefix("sha256:")


def test_pending_bundle_accepted_by_a_referrer_keeps_its_publisher(
    mw: Registry, tmp_path: Path
) -> None:
    """The bundle's publisher is who pushed the manifest, not who pushed the signature: the
    two-person rule for protected aliases keeps excluding the right principal."""
    from tests.oci.conftest import oras_attach

    pub, signer = new_publisher(mw), new_publisher(mw)
    repo = mw.repo(pub.actor, signer.actor)
    bundle = new_bundle(pub, tmp_path)
    layout = write_layout(bundle, tmp_path / "layout", "v1")
    auth = tmp_path / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{host_of(mw)}/{repo}@{bundle.digest}",
        authfile=auth,
    )
    oras_attach(
        mw,
        signer.name,
        signer.actor.token,
        repo,
        subject=bundle.digest,
        subject_size=len(bundle.built.manifest.raw),
        data=signer.sign_digest(bundle.digest),
        artifact_type="application/vnd.in-toto+json",
        tmp=tmp_path,
    )
    record = mw.admin.get_bundle(repo, bundle.digest)
    assert record["created_by"] == pub.name
    assert [s["name"] for s in record["decision"]["signers"]] == [f"@{signer.name}"]
    events = [e for e in mw.admin.iter_audit() if e["subject"] == f"{repo}@{bundle.digest}"]
    assert [e["action"] for e in events] == [
        "oci.manifest.pending",
        "oci.referrer",
        "bundle.push",
        "oci.manifest.accepted",
    ]
