"""Private repositories (issue 31): every door follows the one read rule (auth.authz READ).

One private repository with one bundle, an alias and its TUF role is set up per module (per
database: the session ``registry`` is parametrized sqlite/postgres), then many cheap
requests. For every door an outsider (a reader, or a publisher of another org) gets exactly
what he gets for a repository that does not exist: the same status and the same body once
the two names are swapped (and per-request ids dropped); a principal granted read, an org
member and the owner get the real answer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tuf.api.metadata import Metadata

from modelward.attest.tuf import tuf_signer
from tests.registry.conftest import (
    Actor,
    Publisher,
    Registry,
    make_bundle_dir,
    new_publisher,
    unique,
)

MISSING = "nothing-here"


@dataclass
class World:
    reg: Registry
    org: str
    repo: str  # private
    missing: str  # never created, same org
    digest: str
    layer: str
    role_file: str  # the private repository's open role, as served under /tuf/
    proposal: int  # the published proposal that signed staging
    owner: Publisher
    outsider: Actor  # a reader of nothing in particular
    stranger: Publisher  # a publisher of another org
    granted: Actor  # granted read with `repo grant`
    member: Actor  # a member of the org (`org member add`)


@pytest.fixture(scope="module")
def world(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> World:
    reg = registry
    tmp = tmp_path_factory.mktemp("private")
    owner = new_publisher(reg)
    org = unique("pv")
    reg.admin.put_org(org, owners=[owner.name])
    repo = f"{org}/secret"
    reg.cli("repo", "create", repo, "--private", "--json", token=owner.actor.token, check=True)
    root = make_bundle_dir(tmp / "shared" / "bundle")
    digest = owner.actor.client.push(root, repo, sign=owner.sign).digest
    moved = owner.actor.client.set_alias(repo, "staging", digest)
    proposal = owner.actor.client.tuf_proposal(int(moved["proposal"]))
    payload = Metadata.from_bytes(base64.b64decode(proposal["payload"]))
    signature = payload.sign(tuf_signer(owner.key))
    signed = owner.actor.client.tuf_sign(proposal["id"], signature.keyid, signature.signature)
    assert signed["state"] == "published", signed
    role, version = proposal["role"], proposal["version"]
    assert role == f"{org}:secret@*"
    manifest = httpx.get(
        f"{reg.url}/v1/repos/{repo}/bundles/{digest}/manifest",
        headers={"Authorization": f"Bearer {owner.actor.token}"},
    ).json()
    layer = next(
        x["digest"]
        for x in manifest["layers"]
        if x["annotations"]["org.cncf.model.filepath"] == "model.safetensors"
    )
    granted = reg.actor("reader")
    member = reg.actor("reader")
    reg.cli("repo", "grant", repo, granted.name, token=owner.actor.token, check=True)
    reg.cli("org", "member", "add", org, member.name, token=owner.actor.token, check=True)
    return World(
        reg=reg,
        org=org,
        repo=repo,
        missing=f"{org}/{MISSING}",
        digest=digest,
        layer=layer,
        role_file=f"{version}.{role}.json",
        proposal=int(proposal["id"]),
        owner=owner,
        outsider=reg.actor("reader"),
        stranger=new_publisher(reg),
        granted=granted,
        member=member,
    )


# (method, path, body, read): every door that names a repository. ``read``: a reader of the
# repository gets a success (below 400); the others are writes only compared with a missing
# repository's answer.
DOORS: list[tuple[str, str, dict[str, Any] | None, bool]] = [
    ("GET", "/v1/repos/{repo}", None, True),
    ("GET", "/v1/repos/{repo}/bundles", None, True),
    ("GET", "/v1/repos/{repo}/bundles/{digest}", None, True),
    ("GET", "/v1/repos/{repo}/bundles/{digest}/manifest", None, True),
    ("GET", "/v1/repos/{repo}/bundles/{digest}/attestations", None, True),
    ("GET", "/v1/repos/{repo}/bundles/{digest}/boots", None, True),
    ("GET", "/v1/repos/{repo}/bundles/{digest}/gates?alias=staging", None, True),
    ("GET", "/v1/repos/{repo}/aliases", None, True),
    ("GET", "/v1/repos/{repo}/aliases/staging", None, True),
    ("GET", "/v1/repos/{repo}/aliases/stagign", None, False),  # "did you mean"
    ("GET", "/v1/repos/{repo}/aliases/staging/history", None, True),
    ("POST", "/v1/repos/{repo}/aliases/staging/dry-run", {"digest": "{digest}"}, True),
    ("GET", "/v1/repos/{repo}/quota", None, False),  # its publishers and admins
    ("PUT", "/v1/repos/{repo}/aliases/beta", {"digest": "{digest}", "expected_version": 0}, False),
    ("POST", "/v1/repos/{repo}/bundles/{digest}/approvals", {"alias": "prod"}, False),
    ("POST", "/v1/repos/{repo}/bundles/{digest}/quarantine", {"reason": "r"}, False),
    (
        "POST",
        "/v1/repos/{repo}/bundles/{digest}/boots",
        {"fingerprint_id": "f", "outcome": "ok"},
        False,
    ),
    ("PUT", "/v1/repos/{repo}/visibility", {"private": False}, False),
    ("POST", "/v1/repos/{repo}/readers", {"principal": "nobody"}, False),
    ("GET", "/v2/{repo}/tags/list", None, True),
    ("GET", "/v2/{repo}/manifests/staging", None, True),
    ("GET", "/v2/{repo}/manifests/{digest}", None, True),
    ("HEAD", "/v2/{repo}/manifests/{digest}", None, True),
    ("GET", "/v2/{repo}/blobs/{layer}", None, True),
    ("HEAD", "/v2/{repo}/blobs/{layer}", None, True),
    ("GET", "/v2/{repo}/referrers/{digest}", None, True),
    ("POST", "/v2/{repo}/blobs/uploads/", None, False),
]

_IDS = {"request_id", "requestId", "trace_id"}


def _fill(text: str, w: World, repo: str) -> str:
    return text.replace("{repo}", repo).replace("{digest}", w.digest).replace("{layer}", w.layer)


def _body(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _body(v) for k, v in value.items() if k not in _IDS}
    if isinstance(value, list):
        return [_body(v) for v in value]
    return value


def _call(w: World, token: str, method: str, path: str, body: Any, repo: str) -> tuple[int, Any]:
    json_body = None if body is None else json.loads(_fill(json.dumps(body), w, repo))
    response = httpx.request(
        method,
        w.reg.url + _fill(path, w, repo),
        headers={"Authorization": f"Bearer {token}"},
        json=json_body,
        timeout=60,
    )
    text = response.text
    # the two names are the only difference a missing repository may make
    text = text.replace(repo, "ORG/NAME").replace(repo.split("/")[1], "NAME")
    try:
        parsed: Any = _body(json.loads(text)) if text else ""
    except ValueError:
        parsed = text
    return response.status_code, parsed


def _door_id(door: tuple[str, str, Any, bool]) -> str:
    return f"{door[0]} {door[1]}"


@pytest.mark.parametrize("door", DOORS, ids=_door_id)
def test_an_outsider_gets_what_a_missing_repository_answers(
    world: World, door: tuple[str, str, Any, bool]
) -> None:
    method, path, body, _read = door
    for who in (world.outsider.token, world.stranger.actor.token):
        private = _call(world, who, method, path, body, world.repo)
        missing = _call(world, who, method, path, body, world.missing)
        assert private == missing, (who == world.outsider.token, private, missing)
        assert private[0] in {401, 403, 404, 405}, private


@pytest.mark.parametrize("door", [d for d in DOORS if d[3]], ids=_door_id)
def test_a_reader_of_the_repository_gets_everything(
    world: World, door: tuple[str, str, Any, bool]
) -> None:
    method, path, body, _read = door
    for who in (world.granted, world.member, world.owner.actor):
        status, answer = _call(world, who.token, method, path, body, world.repo)
        assert status < 400, (who.name, status, answer)


def test_the_tuf_role_file_is_served_only_to_readers(world: World) -> None:
    missing_file = world.role_file.replace(":secret@", f":{MISSING}@")

    def get(token: str, name: str) -> tuple[int, str]:
        r = httpx.get(f"{world.reg.url}/tuf/{name}", headers={"Authorization": f"Bearer {token}"})
        return r.status_code, r.text.replace(name, "FILE")

    for who in (world.outsider.token, world.stranger.actor.token):
        assert get(who, world.role_file) == get(who, missing_file)
        assert get(who, world.role_file)[0] == 404
        assert get(who, "timestamp.json")[0] == 200  # the top-level roles stay readable
    for reader in (world.granted.token, world.member.token, world.owner.actor.token):
        status, text = get(reader, world.role_file)
        assert status == 200
        assert f"{world.repo}/aliases/staging" in text


def test_listings_catalog_orgs_and_metrics_leave_it_out(world: World) -> None:
    def names(token: str) -> tuple[list[str], list[str], int, str]:
        h = {"Authorization": f"Bearer {token}"}
        listed = httpx.get(f"{world.reg.url}/v1/repos?org={world.org}", headers=h).json()
        catalog = httpx.get(f"{world.reg.url}/v2/_catalog", headers=h).json()
        org = httpx.get(f"{world.reg.url}/v1/orgs/{world.org}", headers=h).json()
        metrics = httpx.get(f"{world.reg.url}/metrics", headers=h).text
        return (
            [r["name"] for r in listed["repositories"]],
            [n for n in catalog["repositories"] if n.startswith(f"{world.org}/")],
            org["repositories"],
            metrics,
        )

    for who in (world.outsider.token, world.stranger.actor.token):
        listed, catalog, count, metrics = names(who)
        assert (listed, catalog, count) == ([], [], 0)
        assert world.repo not in metrics
        assert f"{world.org}:secret@" not in metrics
    for who in (world.granted.token, world.member.token, world.owner.actor.token):
        listed, catalog, count, metrics = names(who)
        assert (listed, catalog, count) == ([world.repo], [world.repo], 1)
        assert f'repository="{world.repo}"' in metrics


def test_the_cli_answers_an_outsider_as_for_a_missing_repository(world: World) -> None:
    commands = [
        ("bundle", "list", "{repo}"),
        ("alias", "list", "{repo}"),
        ("alias", "show", "{repo}@staging"),
        ("alias", "history", "{repo}@staging"),
        ("repo", "grant", "{repo}", world.outsider.name),
    ]
    for args in commands:
        outs = []
        for repo in (world.repo, world.missing):
            result = world.reg.cli(
                *(a.replace("{repo}", repo) for a in args), token=world.outsider.token
            )
            text = (result.stdout + result.stderr).replace(repo, "ORG/NAME")
            outs.append((result.returncode, text))
        assert outs[0] == outs[1], (args, outs)
        assert outs[0][0] != 0
    listed = world.reg.cli(
        "bundle", "list", world.repo, "--json", token=world.granted.token, check=True
    )
    assert world.digest in listed.stdout


def test_a_blob_only_a_private_repository_holds_is_missing_to_outsiders(
    world: World, tmp_path: Path
) -> None:
    """Dedup does not leak: HEAD/GET /v1/blobs answer 404, a push naming the blob without
    sending it is refused ``missing_blobs``, and a push that uploads it succeeds."""
    never = "sha256:" + hashlib.sha256(secrets.token_bytes(16)).hexdigest()
    stranger = world.stranger
    h = {"Authorization": f"Bearer {stranger.actor.token}"}
    for method in ("HEAD", "GET"):
        held = httpx.request(method, f"{world.reg.url}/v1/blobs/{world.layer}", headers=h)
        absent = httpx.request(method, f"{world.reg.url}/v1/blobs/{never}", headers=h)
        assert held.status_code == absent.status_code == 404
        assert held.text.replace(world.layer, "D") == absent.text.replace(never, "D")
    granted = httpx.head(
        f"{world.reg.url}/v1/blobs/{world.layer}",
        headers={"Authorization": f"Bearer {world.granted.token}"},
    )
    assert granted.status_code == 200
    own = world.reg.repo(stranger.actor)
    # the private bundle's manifest, pushed as is: its blobs count as never uploaded
    manifest = httpx.get(
        f"{world.reg.url}/v2/{world.repo}/manifests/{world.digest}",
        headers={
            "Authorization": f"Bearer {world.owner.actor.token}",
            "Accept": "application/vnd.oci.image.manifest.v1+json",
        },
    ).content
    refused = httpx.put(
        f"{world.reg.url}/v1/repos/{own}/bundles/{world.digest}",
        headers=h,
        json={"manifest": base64.b64encode(manifest).decode(), "attestations": []},
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "missing_blobs"
    assert world.layer in refused.text
    # the same weights, uploaded by the client (HEAD said missing), are accepted
    root = make_bundle_dir(tmp_path / "shared" / "bundle")
    (root / "model.safetensors").write_bytes(_same_weights(world))
    pushed = stranger.actor.client.push(root, own, sign=stranger.sign)
    assert pushed.digest
    after = httpx.head(f"{world.reg.url}/v1/blobs/{world.layer}", headers=h)
    assert after.status_code == 200  # now reachable through his own repository


def _same_weights(world: World) -> bytes:
    response = httpx.get(
        f"{world.reg.url}/v1/blobs/{world.layer}",
        headers={"Authorization": f"Bearer {world.owner.actor.token}"},
    )
    assert response.status_code == 200
    return response.content


@pytest.mark.sqlite_only
def test_visibility_grants_and_members_are_audited(world: World) -> None:
    events = []
    after = 0
    while True:
        page = world.reg.admin.audit(after=after, limit=1000)
        events += page["events"]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    mine = [
        (e["action"], e["details"].get("principal"))
        for e in events
        if e["subject"] in {world.repo, world.org}
        and e["action"] in {"repo.create", "repo.grant", "org.member.add"}
    ]
    assert ("repo.grant", world.granted.name) in mine
    assert ("org.member.add", world.member.name) in mine
    create = next(e for e in events if e["action"] == "repo.create" and e["subject"] == world.repo)
    assert create["details"]["private"] is True


def test_revoke_and_public_change_what_is_read(registry: Registry) -> None:
    """A fresh private repository: revoke takes read away, public gives it to all."""
    reg = registry
    owner = new_publisher(reg)
    org = unique("pw")
    reg.admin.put_org(org, owners=[owner.name])
    reg.admin.set_org_private_by_default(org, private=True)
    repo = f"{org}/m"
    created = owner.actor.client.create_repo(repo)
    assert created["private"] is True  # the org's default
    reader = reg.actor("reader")

    def status() -> int:
        return httpx.get(
            f"{reg.url}/v1/repos/{repo}", headers={"Authorization": f"Bearer {reader.token}"}
        ).status_code

    assert status() == 404
    reg.cli("repo", "grant", repo, reader.name, token=owner.actor.token, check=True)
    assert status() == 200
    reg.cli("repo", "revoke", repo, reader.name, token=owner.actor.token, check=True)
    assert status() == 404
    out = reg.cli("repo", "public", repo, "--json", token=owner.actor.token, check=True)
    assert json.loads(out.stdout)["private"] is False
    assert status() == 200
    # a reader may not change who reads: 403 (it reads the repository, so no 404 to keep)
    refused = reg.cli("repo", "private", repo, token=reader.token)
    assert refused.returncode == 1
    assert "only its owners and admins" in refused.stderr


def test_a_worker_needs_read_to_resolve_a_private_alias_through_tuf(
    world: World, tmp_path: Path
) -> None:
    """``pull REPO@ALIAS`` resolves through the signed metadata: the private repository's
    role file is served only to its readers, so an outsider's pull refuses (and learns no
    digest, and no "did you mean"), a granted reader's pull verifies."""
    from modelward.attest.keys import public_key_pem

    pem = tmp_path / "owner.pub"
    pem.write_bytes(public_key_pem(world.owner.key.public_key()))
    root = tmp_path / "root.json"
    world.reg.cli("trust", "root", "--out", str(root), check=True)

    def pull(who: Actor, ref: str) -> Any:
        return world.reg.cli(
            "pull", ref, "--public-key", str(pem), "--trust-root", str(root),
            "--cache-dir", str(tmp_path / f"cache-{who.name}"),
            token=who.token,
        )  # fmt: skip

    refused = pull(world.outsider, f"{world.repo}@staging")
    assert refused.returncode != 0, refused.stdout
    assert world.digest not in refused.stdout + refused.stderr
    assert "did you mean" not in refused.stderr
    assert "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert "served only to principals who may read it" in refused.stderr
    typo = pull(world.outsider, f"{world.repo}@stagign")
    assert "did you mean" not in typo.stderr
    pulled = pull(world.granted, f"{world.repo}@staging")
    assert pulled.returncode == 0, pulled.stderr


def _console(w: World, token: str) -> httpx.Client:
    """An httpx client logged in to the reviewer console (/ui/) with ``token``."""
    client = httpx.Client(base_url=w.reg.url, timeout=60)
    form = client.get("/ui/login").text
    csrf = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    answer = client.post("/ui/login", data={"csrf": csrf, "token": token})
    assert answer.status_code == 303, answer.text
    return client


CONSOLE = [
    "/ui/repos/{repo}",
    "/ui/repos/{repo}/aliases/staging",
    "/ui/repos/{repo}/aliases/staging/release",
    "/ui/repos/{repo}/bundles/{digest}",
    "/ui/repos/{repo}/bundles/{digest}/attestations",
]


def test_the_console_follows_the_read_rule(world: World) -> None:
    outsider = _console(world, world.outsider.token)
    granted = _console(world, world.granted.token)
    try:
        for page in CONSOLE:
            seen = []
            for repo in (world.repo, world.missing):
                r = outsider.get(_fill(page, world, repo))
                seen.append((r.status_code, r.text.replace(repo, "ORG/NAME")))
            assert seen[0] == seen[1], page
            assert seen[0][0] in {403, 404}, page  # the release page: reviewers only
        assert world.repo not in outsider.get("/ui/").text
        assert world.repo in granted.get("/ui/").text
        for page in CONSOLE:
            if page.endswith("/release"):
                continue  # reviewers and admins only, whatever they read
            r = granted.get(_fill(page, world, world.repo))
            assert r.status_code == 200, (page, r.text[:500])
    finally:
        outsider.close()
        granted.close()


def test_tuf_proposals_leave_it_out(world: World) -> None:
    def get(token: str, path: str) -> httpx.Response:
        return httpx.get(f"{world.reg.url}{path}", headers={"Authorization": f"Bearer {token}"})

    never = 2**31 - 7
    for who in (world.outsider.token, world.stranger.actor.token):
        for repo in (world.repo, world.missing):
            listed = get(who, f"/v1/tuf/proposals?pending=false&repository={repo}").json()
            assert listed == {"proposals": []}
        hidden = get(who, f"/v1/tuf/proposals/{world.proposal}")
        absent = get(who, f"/v1/tuf/proposals/{never}")
        assert hidden.status_code == absent.status_code == 404
        assert hidden.text.replace(str(world.proposal), "N") == absent.text.replace(str(never), "N")
    path = f"/v1/tuf/proposals?pending=false&repository={world.repo}"
    listed = get(world.granted.token, path).json()["proposals"]
    assert [p["id"] for p in listed] == [world.proposal]
    assert get(world.granted.token, f"/v1/tuf/proposals/{world.proposal}").status_code == 200
