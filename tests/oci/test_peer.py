"""docker-registry (CNCF distribution 2.8, Debian) as the reference peer: the same client
scenario gives the same digests on both, and a bundle copied modelward -> docker-registry ->
modelward keeps its digest and still verifies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.oci.conftest import (
    Peer,
    host_of,
    materialize,
    new_bundle,
    new_publisher,
    oras_attach,
    skopeo,
    skopeo_login,
    write_layout,
)
from tests.registry.conftest import MODELWARD, Registry


def _inspect_digest(ref: str, auth: Path | None) -> str:
    out = skopeo("inspect", "--tls-verify=false", "--raw", ref, authfile=auth)
    import hashlib

    return "sha256:" + hashlib.sha256(out.stdout.encode()).hexdigest()


def test_same_client_scenario_gives_same_digests_on_both(
    mw: Registry, peer: Peer, tmp_path: Path
) -> None:
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    layout = write_layout(bundle, tmp_path / "layout", "v1")
    auth = tmp_path / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    # the bundle by digest, its signature as a referrer, then the tag: on modelward
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{host_of(mw)}/{repo}:v1",
        authfile=auth,
        check=False,
    )
    oras_attach(
        mw,
        pub.name,
        pub.actor.token,
        repo,
        subject=bundle.digest,
        subject_size=len(bundle.built.manifest.raw),
        data=bundle.signature,
        artifact_type="application/vnd.in-toto+json",
        tmp=tmp_path,
    )
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{host_of(mw)}/{repo}:v1",
        authfile=auth,
    )
    # the same on the peer
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{peer.host}/{repo}:v1",
    )
    on_mw = _inspect_digest(f"docker://{host_of(mw)}/{repo}:v1", auth)
    on_peer = _inspect_digest(f"docker://{peer.host}/{repo}:v1", None)
    assert on_mw == on_peer == bundle.digest
    for ref, a in (
        (f"docker://{host_of(mw)}/{repo}:v1", auth),
        (f"docker://{peer.host}/{repo}:v1", None),
    ):
        info = json.loads(skopeo("inspect", "--tls-verify=false", "--raw", ref, authfile=a).stdout)
        assert [layer["digest"] for layer in info["layers"]] == [
            layer.digest for layer in bundle.built.manifest.layers
        ]


def test_copy_to_peer_and_back_keeps_the_digest_and_verifies(
    mw: Registry, peer: Peer, tmp_path: Path
) -> None:
    pub = new_publisher(mw)
    repo, back = mw.repo(pub.actor), mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    digest = pub.actor.client.push(bundle.root, repo, sign=pub.sign, alias="staging").digest
    assert digest == bundle.digest
    auth = tmp_path / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    skopeo(
        "copy",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"docker://{host_of(mw)}/{repo}:staging",
        f"docker://{peer.host}/{repo}:staging",
        authfile=auth,
    )
    # back into another repository: pending until its signature arrives as a referrer
    result = skopeo(
        "copy",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"docker://{peer.host}/{repo}:staging",
        f"docker://{host_of(mw)}/{back}:staging",
        authfile=auth,
        check=False,
    )
    assert result.returncode != 0
    assert "pending" in result.stderr, result.stderr
    oras_attach(
        mw,
        pub.name,
        pub.actor.token,
        back,
        subject=digest,
        subject_size=len(bundle.built.manifest.raw),
        data=bundle.signature,
        artifact_type="application/vnd.in-toto+json",
        tmp=tmp_path,
    )
    skopeo(
        "copy",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"docker://{peer.host}/{repo}:staging",
        f"docker://{host_of(mw)}/{back}:staging",
        authfile=auth,
    )
    assert _inspect_digest(f"docker://{host_of(mw)}/{back}:staging", auth) == digest
    out = tmp_path / "out"
    skopeo(
        "copy",
        "--src-tls-verify=false",
        "--preserve-digests",
        f"docker://{host_of(mw)}/{back}:staging",
        f"oci:{out}:x",
        authfile=auth,
    )
    got, tree = materialize(out, "x", tmp_path / "tree")
    assert got == digest
    from modelward.attest.keys import public_key_pem

    pem = tmp_path / "pub.pem"
    pem.write_bytes(public_key_pem(pub.key.public_key()))
    sig = tmp_path / "sig.json"
    sig.write_bytes(bundle.signature)
    verified = subprocess.run(
        [
            MODELWARD,
            "bundle",
            "verify",
            str(tree),
            "--signature",
            str(sig),
            "--public-key",
            str(pem),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    pulled = mw.cli(
        "pull",
        f"{back}@staging",
        "--unsigned-aliases",
        "--public-key",
        str(pem),
        "--cache-dir",
        str(tmp_path / "cache"),
        token=pub.actor.token,
    )
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
