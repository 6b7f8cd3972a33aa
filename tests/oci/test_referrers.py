"""Attestations as referrers: pushed by oras (verified and stored like any attestation),
attached through /v1, both listed by the referrers API with subject and artifactType."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.oci.conftest import host_of, new_bundle, new_publisher, oras_attach, oras_client
from tests.registry.conftest import Registry

INTOTO = "application/vnd.in-toto+json"
SIGSTORE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def _referrers(
    mw: Registry, name: str, token: str, repo: str, digest: str, artifact_type: str | None = None
) -> dict:  # type: ignore[type-arg]
    client = oras_client(mw, name, token)
    url = f"http://{host_of(mw)}/v2/{repo}/referrers/{digest}"
    if artifact_type:
        url += f"?artifactType={quote(artifact_type, safe='')}"
    response = client.do_request(url, "GET")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_referrers_list_attestations_from_both_doors(mw: Registry, tmp_path: Path) -> None:
    pub = new_publisher(mw)
    other = new_publisher(mw)
    repo = mw.repo(pub.actor, other.actor)
    bundle = new_bundle(pub, tmp_path)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign).digest  # the /v1 door
    second = other.sign_digest(digest)
    pushed = oras_attach(
        mw,
        other.name,
        other.actor.token,
        repo,
        subject=digest,
        subject_size=len(bundle.built.manifest.raw),
        data=second,
        artifact_type=INTOTO,
        tmp=tmp_path,
    )
    index = _referrers(mw, pub.name, pub.actor.token, repo, digest)
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    found = index["manifests"]
    assert len(found) == 2
    assert {d["artifactType"] for d in found} == {INTOTO}
    assert pushed in {d["digest"] for d in found}
    # each descriptor resolves to a manifest whose subject is the bundle
    client = oras_client(mw, pub.name, pub.actor.token)
    for d in found:
        manifest = client.get_manifest(f"{host_of(mw)}/{repo}@{d['digest']}")
        assert manifest["subject"]["digest"] == digest
        blob = client.get_blob(f"{host_of(mw)}/{repo}", manifest["layers"][0]["digest"])
        assert hashlib.sha256(blob.content).hexdigest() == (
            manifest["layers"][0]["digest"].removeprefix("sha256:")
        )
        assert json.loads(blob.content)["payloadType"] == INTOTO
    # the one pushed as a referrer is an attestation like any other
    listed = mw.cli("attestation", "list", f"{repo}@{digest}", token=pub.actor.token, check=True)
    assert other.name in listed.stdout
    assert _referrers(mw, pub.name, pub.actor.token, repo, digest, SIGSTORE)["manifests"] == []


def test_referrer_signed_by_an_unknown_key_is_refused(mw: Registry, tmp_path: Path) -> None:
    from modelward.attest.keys import generate_private_key
    from tests.registry.conftest import Publisher

    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign).digest
    stranger = Publisher(pub.actor, generate_private_key(), "unregistered")
    with pytest.raises(AssertionError, match=r"DENIED|not attached|untrusted"):
        oras_attach(
            mw,
            pub.name,
            pub.actor.token,
            repo,
            subject=digest,
            subject_size=len(bundle.built.manifest.raw),
            data=stranger.sign_digest(digest),
            artifact_type=INTOTO,
            tmp=tmp_path,
            expect=403,
        )
    assert len(_referrers(mw, pub.name, pub.actor.token, repo, digest)["manifests"]) == 1


def test_referrer_whose_artifact_type_does_not_match_its_layer_is_refused(
    mw: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign).digest
    with pytest.raises(AssertionError, match="MANIFEST_INVALID"):
        oras_attach(
            mw,
            pub.name,
            pub.actor.token,
            repo,
            subject=digest,
            subject_size=len(bundle.built.manifest.raw),
            data=pub.sign_digest(digest),
            artifact_type=SIGSTORE,
            tmp=tmp_path,
            expect=400,
        )


def test_oms_model_sig_pushed_as_referrer_is_listed_under_its_artifact_type(
    mw: Registry, tmp_path: Path, shared_fixtures: Path
) -> None:
    import shutil

    from modelward.attest.oci_media import ANNOTATION_KIND, OMS_MODEL_SIG

    src = shared_fixtures / "oms" / "v1.1.0-certificate"
    root = tmp_path / "oms-bundle"
    root.mkdir()
    for name in ("signme-1", "signme-2"):
        shutil.copyfile(src / name, root / name)

    def pem(name: str) -> str:  # the fixture files start with certtool's text dump
        text = (shared_fixtures / "oms" / "keys" / name).read_text()
        return json.dumps(text[text.index("-----BEGIN") :])

    policy = (
        "version: 1\ntrust_registered_signers: true\n"
        f"signers:\n  cas:\n    - name: oms-ca\n      roots: [{pem('ca-cert.pem')}]\n"
        f"      intermediates: [{pem('int-ca-cert.pem')}]\n"
        "files:\n  allow_globs: ['signme-*']\n"
        "aliases:\n  - pattern: '*'\n    roles: [publisher]\n"
    )
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor, policy_yaml=policy)
    pushed = pub.actor.client.push(root, repo, sign=pub.sign)
    from modelward.attest.manifest import build_bundle

    raw = build_bundle(root).manifest.raw
    oras_attach(
        mw,
        pub.name,
        pub.actor.token,
        repo,
        subject=pushed.digest,
        subject_size=len(raw),
        data=(src / "model.sig").read_bytes(),
        artifact_type=OMS_MODEL_SIG,
        tmp=tmp_path,
    )
    oms = _referrers(mw, pub.name, pub.actor.token, repo, pushed.digest, OMS_MODEL_SIG)
    assert [d["annotations"][ANNOTATION_KIND] for d in oms["manifests"]] == ["oms"]
    everything = _referrers(mw, pub.name, pub.actor.token, repo, pushed.digest)
    assert {d["artifactType"] for d in everything["manifests"]} == {OMS_MODEL_SIG, INTOTO}
