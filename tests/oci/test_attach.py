"""``modelward attach`` (referrers through /v2, verified like ``attestation add``) and oras's
own ``push`` of a referrer by the digest of the bytes it sends."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from tests.oci.conftest import (
    host_of,
    new_bundle,
    new_publisher,
    oras_client,
    skopeo,
    skopeo_login,
    write_layout,
)
from tests.registry.conftest import Publisher, Registry

pytestmark = pytest.mark.sqlite_only  # tests/conftest.py: one database is enough here

INTOTO = "application/vnd.in-toto+json"


def _referrers(mw: Registry, token: str, repo: str, digest: str) -> list[dict]:  # type: ignore[type-arg]
    answer = httpx.get(
        f"{mw.url}/v2/{repo}/referrers/{digest}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["manifests"]  # type: ignore[no-any-return]


def _pushed(mw: Registry, tmp: Path) -> tuple[Publisher, Publisher, str, str]:
    """A bundle pushed (signed) through /v1 by one publisher; a second publisher of the
    repository: (publisher, other, repo, digest)."""
    pub = new_publisher(mw)
    other = new_publisher(mw)
    repo = mw.repo(pub.actor, other.actor)
    bundle = new_bundle(pub, tmp)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign).digest
    return pub, other, repo, digest


def test_attach_pushes_a_verified_referrer_that_the_referrers_api_lists(
    mw: Registry, tmp_path: Path
) -> None:
    pub, other, repo, digest = _pushed(mw, tmp_path)
    signature = tmp_path / "provenance.dsse.json"
    signature.write_bytes(other.sign_digest(digest))
    result = mw.cli("attach", f"{repo}@{digest}", str(signature), "--json", token=other.actor.token)
    assert result.returncode == 0, result.stderr
    [done] = json.loads(result.stdout)
    assert done["state"] == "referrer"
    assert done["artifact_type"] == INTOTO
    listed = _referrers(mw, pub.actor.token, repo, digest)
    assert done["referrer"] in {d["digest"] for d in listed}
    # the same code path as `attestation add`: an attestation like any other
    attestations = mw.cli("attestation", "list", f"{repo}@{digest}", token=pub.actor.token)
    assert other.name in attestations.stdout
    # oras reads it back: subject and the signature's bytes
    client = oras_client(mw, pub.name, pub.actor.token)
    manifest = client.get_manifest(f"{host_of(mw)}/{repo}@{done['referrer']}")
    assert manifest["subject"]["digest"] == digest
    blob = client.get_blob(f"{host_of(mw)}/{repo}", manifest["layers"][0]["digest"])
    assert blob.content == signature.read_bytes()


def test_attach_signs_a_manifest_pending_its_signature_into_a_bundle(
    mw: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    layout = write_layout(bundle, tmp_path / "layout", "v1")
    auth = tmp_path / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    dest = f"docker://{host_of(mw)}/{repo}"
    args = ["--dest-tls-verify=false", "--preserve-digests", f"oci:{layout}:v1"]
    skopeo("copy", *args, f"{dest}@{bundle.digest}", authfile=auth)
    refused = skopeo("copy", *args, f"{dest}:staging", authfile=auth, check=False)
    assert refused.returncode != 0
    assert "pending" in refused.stderr, refused.stderr
    signature = tmp_path / "provenance.dsse.json"
    signature.write_bytes(bundle.signature)
    result = mw.cli(
        "attach", f"{repo}@{bundle.digest}", str(signature), "--json", token=pub.actor.token
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["state"] == "referrer"  # the pending one is a bundle
    skopeo("copy", *args, f"{dest}:staging", authfile=auth)
    answer = pub.actor.client.get_alias(repo, "staging")
    assert answer["digest"] == bundle.digest


def test_attach_of_a_signature_by_an_unregistered_key_is_refused(
    mw: Registry, tmp_path: Path
) -> None:
    from modelward.attest.keys import generate_private_key

    pub, _other, repo, digest = _pushed(mw, tmp_path)
    stranger = Publisher(pub.actor, generate_private_key(), "unregistered")
    signature = tmp_path / "stranger.dsse.json"
    signature.write_bytes(stranger.sign_digest(digest))
    result = mw.cli("attach", f"{repo}@{digest}", str(signature), token=pub.actor.token)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{signature}: PUT /v2/{repo}/manifests/sha256:" in result.stderr
    assert "DENIED" in result.stderr
    assert len(_referrers(mw, pub.actor.token, repo, digest)) == 1  # the push's own


def test_attach_of_another_bundles_statement_is_refused(mw: Registry, tmp_path: Path) -> None:
    pub, other, repo, digest = _pushed(mw, tmp_path)
    _pub2, _other2, _repo2, elsewhere = _pushed(mw, tmp_path)
    signature = tmp_path / "elsewhere.dsse.json"
    signature.write_bytes(other.sign_digest(elsewhere))
    result = mw.cli("attach", f"{repo}@{digest}", str(signature), token=other.actor.token)
    assert result.returncode == 1, result.stdout + result.stderr
    assert elsewhere in result.stderr
    assert len(_referrers(mw, pub.actor.token, repo, digest)) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"not json", "not a signature"), (b'{"a": 1}', "not a DSSE envelope")],
)
def test_attach_of_a_file_that_is_no_attestation_is_a_usage_error(
    mw: Registry, tmp_path: Path, content: bytes, message: str
) -> None:
    pub, _other, repo, digest = _pushed(mw, tmp_path)
    path = tmp_path / "junk.json"
    path.write_bytes(content)
    result = mw.cli("attach", f"{repo}@{digest}", str(path), token=pub.actor.token)
    assert result.returncode == 2, result.stdout + result.stderr
    assert str(path) in result.stderr
    assert message in result.stderr


def test_oras_push_of_a_referrer_by_the_digest_of_its_own_serialization(
    mw: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """oras's ``push`` sends its manifest as ``requests``' JSON (spaces, key order as built):
    the registry names it by the sha256 of those bytes, stores and serves them verbatim."""
    import oras.oci

    pub, other, repo, digest = _pushed(mw, tmp_path)
    raw = pub.actor.client.get_manifest(repo, digest)
    monkeypatch.chdir(tmp_path)
    Path("provenance.json").write_bytes(other.sign_digest(digest))
    Path("config.json").write_bytes(b"{}")
    client = oras_client(mw, other.name, other.actor.token)
    sent: dict[str, bytes] = {}
    upload = client.upload_manifest

    def by_digest(manifest: dict, container: object) -> object:  # type: ignore[type-arg]
        # `oras attach`: the manifest goes up by the digest of the bytes oras sends
        body = json.dumps(manifest).encode()
        sent["body"] = body
        container.digest = "sha256:" + hashlib.sha256(body).hexdigest()  # type: ignore[attr-defined]
        return upload(manifest, container)  # type: ignore[arg-type]

    client.upload_manifest = by_digest
    response = client.push(
        target=f"{host_of(mw)}/{repo}",
        files=[f"provenance.json:{INTOTO}"],
        manifest_config=f"config.json:{INTOTO}",
        subject=oras.oci.Subject("application/vnd.oci.image.manifest.v1+json", digest, len(raw)),
    )
    assert response.status_code == 201, response.text
    pushed = "sha256:" + hashlib.sha256(sent["body"]).hexdigest()
    assert response.headers["Docker-Content-Digest"] == pushed
    assert response.headers["OCI-Subject"] == digest
    served = httpx.get(
        f"{mw.url}/v2/{repo}/manifests/{pushed}",
        headers={"Authorization": f"Bearer {pub.actor.token}"},
        timeout=60,
    )
    assert served.content == sent["body"]  # the bytes received, never a re-serialization
    assert pushed in {d["digest"] for d in _referrers(mw, pub.actor.token, repo, digest)}
