"""Authorization matrix: every endpoint × every role (and no/bad token) × own/other repository.

``allow`` means the request got past authentication and authorization (any status but 401/403);
``deny`` means 401 (no or bad token) or 403. Requests are built so an allowed call is harmless
(bogus ids where the call would destroy shared state).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.registry.conftest import Publisher, Registry, new_publisher, push_new, unique

ROLES = ("admin", "publisher", "reviewer", "reader", "none", "bad")
ALL = frozenset({"admin", "publisher", "reviewer", "reader"})
ADMIN = frozenset({"admin"})
WRITERS = frozenset({"admin", "publisher"})
REVIEW = frozenset({"admin", "reviewer"})
SIGNERS = frozenset({"admin", "publisher", "reviewer"})  # register keys: they sign TUF roles
BOGUS = "sha256:" + "0" * 64


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    path: str  # {repo} {digest} {alias} {blob} filled per cell
    own: frozenset[str]  # roles allowed on a repository they publish to
    other: frozenset[str] | None = None  # roles allowed elsewhere (None: same as own)
    body: Callable[[dict[str, str]], dict[str, Any]] | None = None
    public: bool = False  # reachable without a token


def _data(tag: str) -> bytes:
    return f"authz {tag} {os.urandom(8).hex()}".encode()


ENDPOINTS: list[Endpoint] = [
    Endpoint("healthz", "GET", "/healthz", ALL, public=True),
    Endpoint("readyz", "GET", "/readyz", ALL, public=True),
    Endpoint("metrics", "GET", "/metrics", ALL),
    Endpoint("whoami", "GET", "/v1/whoami", ALL),
    Endpoint(
        "principal.create",
        "POST",
        "/v1/admin/principals",
        ADMIN,
        body=lambda c: {"json": {"name": unique("mx"), "role": "reader"}},
    ),
    Endpoint("principal.list", "GET", "/v1/admin/principals", ADMIN),
    Endpoint(
        "token.create",
        "POST",
        "/v1/admin/principals/{victim}/tokens",
        ADMIN,
        body=lambda c: {"json": {}},
    ),
    Endpoint("token.revoke", "DELETE", "/v1/admin/tokens/nosuchtoken", ADMIN),
    Endpoint(
        "key.register",
        "POST",
        "/v1/keys",
        SIGNERS,
        body=lambda c: {"json": {"public_key_pem": "not a pem"}},
    ),
    Endpoint("key.list", "GET", "/v1/keys", ALL),
    Endpoint("key.revoke", "DELETE", "/v1/keys/" + "0" * 64, SIGNERS),
    Endpoint("tuf.file", "GET", "/tuf/timestamp.json", ALL),
    Endpoint("tuf.status", "GET", "/v1/tuf/status", ALL),
    Endpoint("tuf.proposals", "GET", "/v1/tuf/proposals", ALL),
    Endpoint(
        "tuf.sign",
        "POST",
        "/v1/tuf/proposals/999999999/signatures",
        ALL,
        body=lambda c: {"json": {"keyid": "00", "signature": "00"}},
    ),
    Endpoint("tuf.root", "POST", "/v1/tuf/root", ADMIN, body=lambda c: {"json": {"root": "!"}}),
    Endpoint("tuf.sync", "POST", "/v1/tuf/sync", ADMIN),
    Endpoint(
        "identity.register",
        "POST",
        "/v1/identities",
        WRITERS,
        body=lambda c: {"json": {"identity": "", "issuer": ""}},
    ),
    Endpoint("identity.list", "GET", "/v1/identities", ALL),
    Endpoint(
        "repo.create",
        "POST",
        "/v1/repos",
        # in an org the caller owns (the own repository's org); elsewhere admins only
        WRITERS,
        ADMIN,
        body=lambda c: {"json": {"name": f"{c['org']}/{unique('m')}"}},
    ),
    Endpoint(
        "org.put",
        "PUT",
        "/v1/orgs/{neworg}",
        ADMIN,
        body=lambda c: {"json": {"owners": []}},
    ),
    Endpoint("org.list", "GET", "/v1/orgs", ALL),
    Endpoint("org.get", "GET", "/v1/orgs/{org}", ALL),
    Endpoint(
        "org.owner.add",
        "POST",
        "/v1/orgs/{org}/owners",
        # harmless when allowed: the victim is a reader, refused as an owner (400)
        ADMIN,
        body=lambda c: {"json": {"principal": c["victim"]}},
    ),
    Endpoint("org.owner.remove", "DELETE", "/v1/orgs/{org}/owners/{victim}", ADMIN),
    Endpoint("repo.get", "GET", "/v1/repos/{repo}", ALL),
    Endpoint("repo.list", "GET", "/v1/repos", ALL),
    Endpoint("bundle.list", "GET", "/v1/repos/{repo}/bundles", ALL),
    Endpoint("alias.list", "GET", "/v1/repos/{repo}/aliases", ALL),
    Endpoint(
        "repo.policy",
        "PUT",
        "/v1/repos/{repo}/policy",
        ADMIN,
        body=lambda c: {
            "json": {
                "policy_yaml": "version: 1\ntrust_registered_signers: true\n"
                "aliases:\n  - pattern: '*'\n    roles: [publisher, admin]\n"
            }
        },
    ),
    Endpoint("blob.head", "HEAD", "/v1/blobs/{digest_blob}", ALL),
    Endpoint("blob.get", "GET", "/v1/blobs/{digest_blob}", ALL),
    Endpoint(
        "blob.put",
        "PUT",
        "/v1/blobs/{newblob}",
        WRITERS,
        ADMIN,  # the blob is for (charged to) the repository named
        body=lambda c: {
            "content": c["newblob_data"].encode(),
            "params": {"repository": c["repo"]},
        },
    ),
    Endpoint(
        "upload.start",
        "POST",
        "/v1/uploads",
        WRITERS,
        ADMIN,
        body=lambda c: {
            "json": {
                "digest": c["newblob"],
                "size": len(c["newblob_data"]),
                "repository": c["repo"],
            }
        },
    ),
    Endpoint("upload.get", "GET", "/v1/uploads/nosuchupload", WRITERS),
    Endpoint(
        "upload.patch",
        "PATCH",
        "/v1/uploads/nosuchupload",
        WRITERS,
        body=lambda c: {"content": b"x", "headers": {"Upload-Offset": "0"}},
    ),
    Endpoint("upload.commit", "POST", "/v1/uploads/nosuchupload/commit", WRITERS),
    Endpoint("upload.cancel", "DELETE", "/v1/uploads/nosuchupload", WRITERS),
    Endpoint(
        "bundle.put",
        "PUT",
        "/v1/repos/{repo}/bundles/{digest}",
        WRITERS,
        ADMIN,
        body=lambda c: {"json": {"manifest": c["manifest_b64"], "attestations": []}},
    ),
    Endpoint("bundle.get", "GET", "/v1/repos/{repo}/bundles/{digest}", ALL),
    Endpoint("bundle.manifest", "GET", "/v1/repos/{repo}/bundles/{digest}/manifest", ALL),
    Endpoint(
        "attestation.add",
        "POST",
        "/v1/repos/{repo}/bundles/{digest}/attestations",
        # the verified statement's predicate type decides (auth.authz: serving
        # workers baselines/replays, reviewers approvals/evaluations, publishers the rest, in
        # their own repositories); a publisher of another repository may attach nothing there
        ALL,
        frozenset({"admin", "reviewer", "reader"}),
        body=lambda c: {"content": b"{}"},
    ),
    Endpoint("attestation.list", "GET", "/v1/repos/{repo}/bundles/{digest}/attestations", ALL),
    Endpoint(
        "attestation.list_retracted",
        "GET",
        "/v1/repos/{repo}/bundles/{digest}/attestations?include_retracted=true",
        REVIEW,
    ),
    Endpoint(
        "attestation.retract",
        "DELETE",
        # the row decides (its attacher or an admin): a bogus id is 404 for every role
        "/v1/repos/{repo}/bundles/{digest}/attestations/" + str(2**31 - 1),
        ALL,
        body=lambda c: {"json": {"reason": "matrix"}},
    ),
    Endpoint(
        "bundle.quarantine",
        "POST",
        "/v1/repos/{repo}/bundles/" + BOGUS + "/quarantine",
        REVIEW,
        body=lambda c: {"json": {"reason": "matrix"}},
    ),
    Endpoint(
        "bundle.tombstone",
        "DELETE",
        "/v1/repos/{repo}/bundles/" + BOGUS,
        ADMIN,
        body=lambda c: {"json": {"reason": "matrix"}},
    ),
    Endpoint(
        "bundle.approve",
        "POST",
        "/v1/repos/{repo}/bundles/{digest}/approvals",
        REVIEW,
        body=lambda c: {"json": {"alias": "prod"}},
    ),
    Endpoint(
        "bundle.approval.withdraw",
        "DELETE",
        # the caller's own approval; nobody approved this alias, so allowed roles get 404
        "/v1/repos/{repo}/bundles/{digest}/approvals",
        REVIEW,
        body=lambda c: {"json": {"alias": "matrix-never-approved", "reason": "matrix"}},
    ),
    Endpoint(
        "bundle.boot",
        "POST",
        "/v1/repos/{repo}/bundles/{digest}/boots",
        frozenset({"admin", "reader"}),
        body=lambda c: {
            "json": {"fingerprint_id": "fp", "fingerprint": {}, "outcome": "ok", "detail": {}}
        },
    ),
    Endpoint("alias.get", "GET", "/v1/repos/{repo}/aliases/dev", ALL),
    Endpoint("alias.history", "GET", "/v1/repos/{repo}/aliases/dev/history", ALL),
    Endpoint(
        "alias.put",
        "PUT",
        "/v1/repos/{repo}/aliases/{alias}",
        WRITERS,
        ADMIN,
        body=lambda c: {"json": {"digest": c["digest"], "expected_version": 0, "rollback": False}},
    ),
    Endpoint("audit.page", "GET", "/v1/audit", REVIEW),
    # sizes and hashes only: any principal (serving workers record the checkpoint at boot)
    Endpoint("audit.checkpoint", "GET", "/v1/audit/checkpoint", ALL),
    Endpoint("audit.proof.consistency", "GET", "/v1/audit/proof/consistency?from=1&to=2", ALL),
    # the path of one event, whose contents only reviewers read
    Endpoint("audit.proof.inclusion", "GET", "/v1/audit/proof/inclusion?index=0&size=1", REVIEW),
    # storage hygiene: GC with the default 24 h window collects nothing of this world's
    Endpoint("storage.gc", "POST", "/v1/admin/gc", ADMIN, body=lambda c: {"json": {}}),
    Endpoint("repo.quota.get", "GET", "/v1/repos/{repo}/quota", WRITERS, ADMIN),
    Endpoint(
        "repo.quota.put",
        "PUT",
        "/v1/repos/{repo}/quota",
        ADMIN,
        body=lambda c: {"json": {"quota_bytes": None}},
    ),
]


@dataclass
class World:
    reg: Registry
    tokens: dict[str, str | None]
    own: dict[str, str]
    other: dict[str, str]
    victim: str


@pytest.fixture(scope="module")
def world(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> World:
    import base64

    tmp = tmp_path_factory.mktemp("authz")
    pub: Publisher = new_publisher(registry)
    stranger: Publisher = new_publisher(registry)
    tokens: dict[str, str | None] = {
        "admin": registry.server.admin_token,
        "publisher": pub.actor.token,
        "reviewer": registry.actor("reviewer").token,
        "reader": registry.actor("reader").token,
        "none": None,
        "bad": "mw_" + os.urandom(32).hex(),
    }
    repos = {"own": registry.repo(pub), "other": registry.repo(stranger)}
    ctx: dict[str, dict[str, str]] = {}
    for which, owner in (("own", pub), ("other", stranger)):
        repo = repos[which]
        digest = push_new(owner, repo, tmp, alias="dev")
        manifest = owner.actor.client.get_manifest(repo, digest)
        assert owner.actor.client.list_attestations(repo, digest)
        config_digest = json.loads(manifest)["config"]["digest"]
        org = repo.split("/")[0]
        registry.admin.add_org_owner(org, owner.name)  # created by the admin: owned by nobody
        ctx[which] = {
            "repo": repo,
            "org": org,
            "digest": digest,
            "digest_blob": config_digest,
            "manifest_b64": base64.b64encode(manifest).decode(),
        }
    victim = registry.actor("reader").name
    return World(registry, tokens, ctx["own"], ctx["other"], victim)


def _cell(
    world: World, client: httpx.Client, endpoint: Endpoint, role: str, where: str
) -> str | None:
    """Run one cell; return a description of the mismatch, or None when as expected."""
    base = world.own if where == "own" else world.other
    data = _data(f"{endpoint.name}{role}{where}").decode()
    ctx = {
        **base,
        "victim": world.victim,
        "alias": unique("a"),
        "neworg": unique("o"),
        "newblob_data": data,
        "newblob": "sha256:" + hashlib.sha256(data.encode()).hexdigest(),
    }
    path = endpoint.path.format(**ctx)
    kwargs = endpoint.body(ctx) if endpoint.body else {}
    headers = dict(kwargs.pop("headers", {}))
    token = world.tokens[role]
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    response = client.request(endpoint.method, path, headers=headers, **kwargs)
    allowed_roles = endpoint.own if where == "own" or endpoint.other is None else endpoint.other
    expect_allow = endpoint.public or role in allowed_roles
    status = response.status_code
    got = f"{role:9} {where:5} -> {status} {response.text[:160]}"
    if expect_allow and (status in (401, 403) or status >= 500):
        return f"expected allow: {got}"
    if not expect_allow:
        want = 401 if role in ("none", "bad") else 403
        if status != want:
            return f"expected {want}: {got}"
    if status >= 400 and endpoint.method != "HEAD":
        err = response.json().get("error") if response.content else None
        if not (isinstance(err, dict) and {"code", "message", "detail"} <= set(err)):
            return f"not the JSON error shape: {got}"
    return None


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[e.name for e in ENDPOINTS])
def test_authz_row(world: World, endpoint: Endpoint) -> None:
    """One endpoint: every role (and no/bad token) × own/other repository."""
    with httpx.Client(base_url=world.reg.url, timeout=30) as client:
        problems = [
            f"{endpoint.method} {endpoint.path}: {p}"
            for role in ROLES
            for where in ("own", "other")
            if (p := _cell(world, client, endpoint, role, where)) is not None
        ]
    assert not problems, "\n".join(problems)


def test_denials_are_audited(world: World) -> None:
    reader = world.tokens["reader"]
    mark = max([0, *(int(e["seq"]) for e in world.reg.admin.iter_audit())])
    response = httpx.put(
        f"{world.reg.url}/v1/repos/{world.own['repo']}/policy",
        headers={"Authorization": f"Bearer {reader}"},
        json={"policy_yaml": "version: 1\n"},
        timeout=30,
    )
    assert response.status_code == 403
    events = list(world.reg.admin.iter_audit(after=mark))
    assert any("den" in e["action"] or "forbid" in json.dumps(e).lower() for e in events), events


def test_matrix_covers_every_contract_endpoint() -> None:
    names = {e.name for e in ENDPOINTS}
    assert len(names) == len(ENDPOINTS) == 60
