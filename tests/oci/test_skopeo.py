"""skopeo (Debian) against ``modelward serve``: login, copy to and from an OCI layout,
tags, the pending state, protected tags, and a pulled bundle that verifies."""

from __future__ import annotations

import json
from pathlib import Path

from tests.oci.conftest import (
    Bundle,
    host_of,
    materialize,
    new_bundle,
    new_publisher,
    oras_attach,
    skopeo,
    skopeo_login,
    write_layout,
)
from tests.registry.conftest import Publisher, Registry


def _attach(mw: Registry, pub: Publisher, repo: str, bundle: Bundle, tmp: Path) -> str:
    return oras_attach(
        mw,
        pub.name,
        pub.actor.token,
        repo,
        subject=bundle.digest,
        subject_size=len(bundle.built.manifest.raw),
        data=bundle.signature,
        artifact_type="application/vnd.in-toto+json",
        tmp=tmp,
    )


def test_skopeo_pushes_pending_then_tags_once_the_signature_arrives(
    mw: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp_path)
    layout = write_layout(bundle, tmp_path / "layout", "v1")
    auth = tmp_path / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    dest = f"docker://{host_of(mw)}/{repo}:staging"
    refused = skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        dest,
        authfile=auth,
        check=False,
    )
    assert refused.returncode != 0
    assert "pending" in refused.stderr, refused.stderr
    _attach(mw, pub, repo, bundle, tmp_path)
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        dest,
        authfile=auth,
    )
    tags = skopeo(
        "list-tags", "--tls-verify=false", f"docker://{host_of(mw)}/{repo}", authfile=auth
    )
    assert json.loads(tags.stdout)["Tags"] == ["staging"]
    out = tmp_path / "pulled"
    skopeo(
        "copy",
        "--src-tls-verify=false",
        "--preserve-digests",
        dest,
        f"oci:{out}:staging",
        authfile=auth,
    )
    digest, _tree = materialize(out, "staging", tmp_path / "tree")
    assert digest == bundle.digest


def _pushed_with_signature(mw: Registry, tmp: Path) -> tuple[Publisher, str, Bundle, Path]:
    """A publisher, its repository, and a bundle pushed through /v2 and tagged staging."""
    pub = new_publisher(mw)
    repo = mw.repo(pub.actor)
    bundle = new_bundle(pub, tmp)
    layout = write_layout(bundle, tmp / "layout", "v1")
    auth = tmp / "auth.json"
    skopeo_login(mw, pub.name, pub.actor.token, auth)
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{host_of(mw)}/{repo}@{bundle.digest}",
        authfile=auth,
        check=False,
    )
    _attach(mw, pub, repo, bundle, tmp)
    skopeo(
        "copy",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"oci:{layout}:v1",
        f"docker://{host_of(mw)}/{repo}:staging",
        authfile=auth,
    )
    return pub, repo, bundle, auth


def test_tag_push_to_prod_without_approvals_is_denied_naming_them(
    mw: Registry, tmp_path: Path
) -> None:
    _pub, repo, bundle, auth = _pushed_with_signature(mw, tmp_path)
    result = skopeo(
        "copy",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        "--preserve-digests",
        f"docker://{host_of(mw)}/{repo}:staging",
        f"docker://{host_of(mw)}/{repo}:prod",
        authfile=auth,
        check=False,
    )
    assert result.returncode != 0
    assert "approval" in result.stderr, result.stderr
    assert "DENIED" in result.stderr or "denied" in result.stderr
    tags = skopeo(
        "list-tags", "--tls-verify=false", f"docker://{host_of(mw)}/{repo}", authfile=auth
    )
    assert json.loads(tags.stdout)["Tags"] == ["staging"]
    history = mw.cli("alias", "history", f"{repo}@staging", check=True)
    assert bundle.digest in history.stdout


def test_pulled_bundle_verifies_with_bundle_verify_and_modelward_pull(
    mw: Registry, tmp_path: Path
) -> None:
    from tests.registry.conftest import MODELWARD

    pub, repo, bundle, auth = _pushed_with_signature(mw, tmp_path)
    out = tmp_path / "pulled"
    skopeo(
        "copy",
        "--src-tls-verify=false",
        "--preserve-digests",
        f"docker://{host_of(mw)}/{repo}:staging",
        f"oci:{out}:staging",
        authfile=auth,
    )
    digest, tree = materialize(out, "staging", tmp_path / "tree")
    assert digest == bundle.digest
    sig = tmp_path / "sig.json"
    sig.write_bytes(bundle.signature)
    pem = tmp_path / "pub.pem"
    from modelward.attest.keys import public_key_pem

    pem.write_bytes(public_key_pem(pub.key.public_key()))
    import subprocess

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
        f"{repo}@staging",
        "--unsigned-aliases",
        "--public-key",
        str(pem),
        "--cache-dir",
        str(tmp_path / "cache"),
        token=pub.actor.token,
    )
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert bundle.digest in pulled.stdout


def test_skopeo_login_with_a_wrong_token_fails(mw: Registry, tmp_path: Path) -> None:
    import subprocess

    from tests.oci.conftest import SKOPEO

    pub = new_publisher(mw)
    result = subprocess.run(
        [
            SKOPEO,
            "login",
            "--authfile",
            str(tmp_path / "a.json"),
            "--tls-verify=false",
            "-u",
            pub.name,
            "--password-stdin",
            host_of(mw),
        ],
        input="mwt_0000_not-a-token-at-all-xxxxxxxxxxxxxxxxxxx",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "invalid username/password" in result.stderr, result.stderr
