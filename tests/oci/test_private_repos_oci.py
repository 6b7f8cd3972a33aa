"""Private repositories through ``/v2`` with the real clients (issue 31): skopeo and oras, an
outsider gets what a missing repository answers, a granted reader pulls; a cross-repository
mount from a repository the caller may not read falls back to an upload (202), as from a
missing one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.oci.conftest import host_of, new_bundle, new_publisher, oras_client, skopeo, skopeo_login
from tests.registry.conftest import Actor, Publisher, Registry, unique


@dataclass
class Private:
    mw: Registry
    repo: str
    missing: str
    digest: str
    layer: str
    owner: Publisher
    outsider: Actor
    granted: Actor
    stranger: Publisher


@pytest.fixture(scope="module")
def private(mw: Registry, tmp_path_factory: pytest.TempPathFactory) -> Private:
    tmp = tmp_path_factory.mktemp("private-oci")
    owner = new_publisher(mw)
    org = unique("po")
    mw.admin.put_org(org, owners=[owner.name])
    repo = f"{org}/secret"
    owner.actor.client.create_repo(repo, private=True)
    bundle = new_bundle(owner, tmp)
    digest = owner.actor.client.push(bundle.root, repo, sign=owner.sign).digest
    owner.actor.client.set_alias(repo, "v1", digest)
    manifest = httpx.get(
        f"{mw.url}/v2/{repo}/manifests/{digest}",
        headers={
            "Authorization": f"Bearer {owner.actor.token}",
            "Accept": "application/vnd.oci.image.manifest.v1+json",
        },
    ).json()
    granted = mw.actor("reader")
    owner.actor.client.grant_read(repo, granted.name)
    return Private(
        mw=mw,
        repo=repo,
        missing=f"{org}/nothing-here",
        digest=digest,
        layer=manifest["layers"][0]["digest"],
        owner=owner,
        outsider=mw.actor("reader"),
        granted=granted,
        stranger=new_publisher(mw),
    )


def _clean(text: str, repo: str) -> str:
    text = re.sub(r'time="[^"]*"', "", text)
    return text.replace(repo, "ORG/NAME")


def _skopeo(p: Private, who: Actor, repo: str, tmp: Path, *args: str) -> tuple[int, str]:
    auth = tmp / f"auth-{who.name}.json"
    if not auth.exists():
        skopeo_login(p.mw, who.name, who.token, auth)
    filled = [a.replace("{repo}", repo).replace("{host}", host_of(p.mw)) for a in args]
    result = skopeo(*filled, authfile=auth, check=False)
    return result.returncode, _clean(result.stdout + result.stderr, repo)


SKOPEO_DOORS = {
    "list-tags": ("list-tags", "--tls-verify=false", "docker://{host}/{repo}"),
    "inspect": ("inspect", "--tls-verify=false", "--raw", "docker://{host}/{repo}:v1"),
    "copy": ("copy", "--src-tls-verify=false", "docker://{host}/{repo}:v1", "oci:{out}:v1"),
}


@pytest.mark.parametrize("door", sorted(SKOPEO_DOORS))
def test_skopeo_outsider_sees_a_missing_repository_and_a_reader_pulls(
    private: Private, tmp_path: Path, door: str
) -> None:
    args = tuple(a.replace("{out}", str(tmp_path / "out")) for a in SKOPEO_DOORS[door])
    hidden = _skopeo(private, private.outsider, private.repo, tmp_path, *args)
    absent = _skopeo(private, private.outsider, private.missing, tmp_path, *args)
    assert hidden == absent
    assert hidden[0] != 0
    status, out = _skopeo(private, private.granted, private.repo, tmp_path, *args)
    assert status == 0, out
    if door == "list-tags":
        assert '"v1"' in out


def _oras_pull(p: Private, who: Actor, repo: str, out: Path) -> tuple[str, Any]:
    client = oras_client(p.mw, who.name, who.token)
    try:
        files = client.pull(target=f"{host_of(p.mw)}/{repo}@{p.digest}", outdir=str(out))
    except Exception as exc:  # oras raises what it raises; compared as text
        return "refused", _clean(f"{type(exc).__name__}: {exc}", repo)
    return "pulled", sorted(Path(f).name for f in files)


def test_oras_outsider_sees_a_missing_repository_and_a_reader_pulls(
    private: Private, tmp_path: Path
) -> None:
    hidden = _oras_pull(private, private.outsider, private.repo, tmp_path / "a")
    absent = _oras_pull(private, private.outsider, private.missing, tmp_path / "b")
    assert hidden == absent
    assert hidden[0] == "refused"
    pulled = _oras_pull(private, private.granted, private.repo, tmp_path / "c")
    assert pulled[0] == "pulled", pulled
    assert "model.safetensors" in pulled[1]


def test_a_mount_from_an_unreadable_repository_falls_back_to_an_upload(private: Private) -> None:
    mw, stranger = private.mw, private.stranger
    own = mw.repo(stranger.actor)

    def mount(who: Actor, target: str, source: str) -> int:
        response = httpx.post(
            f"{mw.url}/v2/{target}/blobs/uploads/",
            params={"mount": private.layer, "from": source},
            headers={"Authorization": f"Bearer {who.token}"},
        )
        if response.status_code == 202:  # an upload session: close it again
            httpx.delete(
                mw.url + response.headers["location"],
                headers={"Authorization": f"Bearer {who.token}"},
            )
        return response.status_code

    assert mount(stranger.actor, own, private.repo) == 202
    assert mount(stranger.actor, own, private.missing) == 202
    mine = mw.repo(private.owner.actor)
    assert mount(private.owner.actor, mine, private.repo) == 201  # a reader mounts
