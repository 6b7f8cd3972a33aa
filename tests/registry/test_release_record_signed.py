"""Release records follow signed state only (docs/release.md), against a real ``serve`` on
SQLite and PostgreSQL.

A record's history is the moves of the alias's TUF role versions, never the registry's
alias-history rows: a row a database writer inserts is not a version of it, a record that
claims a move no signed role version made is refused offline, and a key outside the alias's
role is refused before a record is written. The record's content: who attached each
evaluation and when, and the runtime image the bundle's ``modelward.yaml`` pins.
"""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.keys import keyid, load_private_key, save_private_key
from tests.attest.test_evaluation import HEADER, cases, jsonl
from tests.registry.conftest import Publisher, Registry, make_bundle_dir, new_publisher, unique
from tests.registry.test_audit_cli import Db

OFFLINE = {"MODELWARD_URL": "http://127.0.0.1:9"}  # verify never reaches a registry
IMAGE = "registry.example/vllm@sha256:" + "ab" * 32


@dataclass
class World:
    reg: Registry
    tmp: Path
    repo: str
    pub: Publisher
    rev: Publisher
    keys: dict[str, Path]
    root: Path
    d1: str
    d2: str

    def cli(self, who: Publisher, *args: str) -> subprocess.CompletedProcess[str]:
        return self.reg.cli(*args, token=who.actor.token)

    def record(self, *args: str, key: Path | None = None) -> subprocess.CompletedProcess[str]:
        return self.cli(
            self.rev,
            "release",
            "record",
            f"{self.repo}@prod",
            "--key",
            str(key or self.keys[self.rev.name]),
            *args,
        )

    def verify(self, path: Path) -> subprocess.CompletedProcess[str]:
        return self.reg.cli(
            "release", "verify", str(path), "--trust-root", str(self.root), env=OFFLINE
        )


def _policy(evaluator: str) -> str:
    return (
        "version: 1\ntrust_registered_signers: true\n"
        f"evidence: {{principals: [{evaluator}]}}\n"
        "aliases:\n"
        "  - {pattern: prod, roles: [publisher], protected: true, approvals: 1}\n"
        "  - {pattern: '*', roles: [publisher]}\n"
    )


def _push(world_tmp: Path, pub: Publisher, repo: str, *, image: str | None) -> str:
    """A bundle whose modelward.yaml pins ``image`` as its runtime image (None: null)."""
    from modelward.attest.spec import render_spec_template

    root = make_bundle_dir(world_tmp / unique("b"))
    text = render_spec_template()
    if image is not None:
        text = text.replace("runtime_image: null", f'runtime_image: "{image}"')
    (root / "modelward.yaml").write_text(text)
    return pub.actor.client.push(root, repo, sign=pub.sign).digest


def _promote(world: World, digest: str) -> None:
    moved = world.cli(world.pub, "alias", "set", f"{world.repo}@prod", digest, "--json")
    assert moved.returncode == 0, moved.stderr
    signed = world.cli(
        world.rev,
        "approve",
        f"{world.repo}@{digest}",
        "--alias",
        "prod",
        "--key",
        str(world.keys[world.rev.name]),
        "--json",
    )
    assert signed.returncode == 0, signed.stderr
    assert json.loads(signed.stdout)["state"] == "published"


@pytest.fixture(scope="module")
def world(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> World:
    """prod: signed move 1 to d1 (its modelward.yaml pins a runtime image; evaluated by the
    reviewer), signed move 2 to d2 (its modelward.yaml leaves the runtime image null)."""
    tmp = tmp_path_factory.mktemp(f"signed-{registry.kind}")
    pub, rev = new_publisher(registry), new_publisher(registry, "reviewer")
    repo = registry.repo(pub, policy_yaml=_policy(rev.name))
    keys = {}
    for who in (pub, rev):
        keys[who.name] = tmp / f"{who.name}.key"
        save_private_key(who.key, keys[who.name])
    root = tmp / "root.json"
    assert registry.cli("trust", "root", "--out", str(root)).returncode == 0
    d1, d2 = _push(tmp, pub, repo, image=IMAGE), _push(tmp, pub, repo, image=None)
    world = World(registry, tmp, repo, pub, rev, keys, root, d1, d2)
    results = tmp / "results.jsonl"
    results.write_bytes(jsonl(HEADER, cases("billing", "human", (10, 0, 0, 0))))
    attached = world.cli(
        rev,
        "eval",
        "attach",
        f"{repo}@{d1}",
        "--results",
        str(results),
        "--key",
        str(keys[rev.name]),
    )
    assert attached.returncode == 0, attached.stderr
    _promote(world, d1)
    _promote(world, d2)
    return world


def _payload(path: Path) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(
        base64.b64decode(json.loads(path.read_bytes())["payload"])
    )
    return statement


def _recorded(world: World, *args: str) -> tuple[Path, dict[str, Any]]:
    out = world.tmp / f"{unique('rec')}.json"
    made = world.record("--out", str(out), *args)
    assert made.returncode == 0, made.stderr
    return out, _payload(out)["predicate"]


# -- issue 22 item 6: the record's content -------------------------------------------------
@pytest.mark.sqlite_only
def test_record_shows_who_attached_each_evaluation_and_when(world: World) -> None:
    md = world.tmp / "attached.md"
    _, predicate = _recorded(world, "--version", "1", "--markdown", str(md))
    [evaluation] = predicate["evaluations"]
    assert evaluation["attached_by"] == world.rev.name
    assert isinstance(evaluation["attached_at"], str)
    assert evaluation["attached_at"].startswith("20")
    assert f"by {world.rev.name} at {evaluation['attached_at']}" in md.read_text()


@pytest.mark.sqlite_only
def test_record_reads_the_runtime_image_from_the_bundles_modelward_yaml(world: World) -> None:
    """The runtime image is what the bundle's modelward.yaml pins, and a null there is
    rendered as such, not as a bundle without modelward.yaml."""
    pinned, unpinned = world.tmp / "pinned.md", world.tmp / "unpinned.md"
    _, predicate = _recorded(world, "--version", "1", "--markdown", str(pinned))
    assert predicate["bundle"]["spec"]["parsed"]["runtime_image"] == IMAGE
    assert predicate["bundle"]["inputs"]["runtime_image"] == IMAGE
    assert predicate["bundle"]["inputs"]["engine"]["name"] == "vllm"
    assert f'runtime_image: "{IMAGE}"' in pinned.read_text()
    _, predicate = _recorded(world, "--version", "2", "--markdown", str(unpinned))
    assert predicate["bundle"]["spec"] is not None
    assert predicate["bundle"]["inputs"]["runtime_image"] is None
    text = unpinned.read_text()
    assert "runtime_image: (not pinned: null in the bundle's modelward.yaml)" in text
    assert "no modelward.yaml" not in text


# -- issue 21 item 5: release records follow signed state only -----------------------------
def test_record_signed_with_a_key_outside_the_alias_role_is_refused_at_record_time(
    world: World,
) -> None:
    """The publisher's key signs the repository's open role, not prod's: a record it signed
    would fail `release verify` check 3, so `release record` refuses it and writes nothing."""
    out = world.tmp / "publisher-signed.json"
    made = world.record("--out", str(out), key=world.keys[world.pub.name])
    assert made.returncode == 2, made.stderr
    assert f"--key {world.keys[world.pub.name]}:" in made.stderr
    assert f"key {world.pub.keyid} is not a key of TUF role" in made.stderr
    assert f"{world.repo.replace('/', ':')}@prod" in made.stderr
    assert not out.exists()


def test_history_row_inserted_by_a_db_writer_is_not_a_version_of_the_record(
    world: World,
) -> None:
    """A database writer adds alias-history version 3 (d2 again, 'hotfix') and points the
    alias row at it. No TUF role version made that move: the record's versions are the
    signed moves (1 and 2), `--version 3` is out of range, and the default record is move
    2, with the inserted row shown only as the registry's unsigned word."""
    db = Db(world.reg.database_url)
    try:
        [(alias_id,)] = db.run(
            "SELECT a.id FROM aliases a JOIN repositories r ON a.repo_id = r.id "
            "WHERE r.name = ? AND a.name = ?",
            world.repo,
            "prod",
        )
        db.run(
            "INSERT INTO alias_history (alias_id, version, from_digest, to_digest, actor, at, "
            "reason, rollback) VALUES (?, 3, ?, ?, 'admin', CURRENT_TIMESTAMP, 'hotfix', ?)",
            alias_id,
            world.d2,
            world.d2,
            False,
        )
        db.run("UPDATE aliases SET version = 3 WHERE id = ?", alias_id)
    finally:
        db.conn.close()
    history = world.cli(world.rev, "alias", "history", f"{world.repo}@prod", "--json")
    assert history.returncode == 0, history.stderr
    assert "hotfix" in history.stdout  # the registry now says version 3

    out = world.tmp / "v3.json"
    refused = world.record("--out", str(out), "--version", "3")
    assert refused.returncode == 1
    assert "--version 3 is out of range (the alias's signed history" in refused.stderr
    assert "has moves 1 to 2;" in refused.stderr
    assert not out.exists()

    path, predicate = _recorded(world)
    assert (predicate["record"]["version"], predicate["record"]["digest"]) == (2, world.d2)
    assert [m["move"] for m in predicate["history"]] == [2]
    assert predicate["registry_history"]["signed"] is False
    verified = world.verify(path)
    assert verified.returncode == 0, verified.stderr
    assert f"valid: {world.repo}@prod version 2 is {world.d2}" in verified.stdout


@pytest.mark.sqlite_only
@pytest.mark.parametrize("forgery", ["version-3", "fake-next-move"])
def test_record_claiming_a_move_no_signed_role_version_made_is_refused(
    world: World, forgery: str
) -> None:
    """Someone holding a key the chain trusts for records (the reviewer's) re-signs a valid
    record of move 2 claiming what only the registry's rows say: that it is version 3, or
    that a rollback to d1 ended it. The embedded role versions make neither move."""
    from modelward.attest.release import write_record

    path, _ = _recorded(world, "--version", "2")
    statement = _payload(path)
    predicate = statement["predicate"]
    if forgery == "version-3":
        predicate["record"]["version"] = 3
        predicate["history"] = [
            {"move": 3, "role_version": 2, "from_digest": world.d2, "to_digest": world.d2}
        ]
        expected = "check 2 (tuf): record.version:"
    else:
        predicate["history"].append(
            {"move": 3, "role_version": 3, "from_digest": world.d2, "to_digest": world.d1}
        )
        expected = "check 2 (tuf): history:"
    forged = world.tmp / f"{unique('forged')}.json"
    reviewer = load_private_key(world.keys[world.rev.name])
    forged.write_bytes(write_record(json.dumps(statement).encode(), [reviewer]))
    refused = world.verify(forged)
    assert refused.returncode == 1, refused.stdout
    assert expected in refused.stderr
    if forgery == "fake-next-move":
        assert "a move not backed by a signed role version" in refused.stderr
    assert keyid(reviewer.public_key()) == world.rev.keyid


# -- fix round F4: the newest delegation decides, offline and without a registry -----------
REPO, ROLE, PATH = "acme/bot", "acme:bot@prod", "acme/bot/aliases/prod"
D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _tuf_md(signed: Any, *keys: Any) -> Any:
    from tuf.api.metadata import Metadata

    from modelward.attest.tuf import tuf_signer

    md = Metadata(signed)
    for key in keys:
        md.sign(tuf_signer(key), append=True)
    return md


def _top_targets(version: int, admin: Any, reviewers: list[Any]) -> bytes:
    """Top-level targets ``version``, signed by ``admin``: prod to ``reviewers``, threshold 1."""
    from tuf.api.metadata import DelegatedRole, Delegations, Targets

    from modelward.attest.tuf import tuf_key

    keys = {k.keyid: k for k in (tuf_key(r.public_key()) for r in reviewers)}
    role = DelegatedRole(ROLE, list(keys), 1, terminating=True, paths=[PATH])
    signed = Targets(version=version, delegations=Delegations(keys, roles={ROLE: role}))
    data: bytes = _tuf_md(signed, admin).to_bytes()
    return data


def _role_version(version: int, digest: str, signer: Any) -> bytes:
    from tuf.api.metadata import TargetFile, Targets

    target = TargetFile(1, {"sha256": digest.removeprefix("sha256:")}, PATH)
    data: bytes = _tuf_md(Targets(version=version, targets={PATH: target}), signer).to_bytes()
    return data


def _record_statement(
    targets: list[bytes], role_versions: list[bytes], version: int, digest: str
) -> bytes:
    """A release record's statement holding only what check 2 reads."""
    from tuf.api.metadata import Metadata, Targets

    from modelward.attest.release import signed_moves
    from modelward.attest.release._model import blob
    from modelward.attest.statement import make_statement

    moves = signed_moves(PATH, [Metadata[Targets].from_bytes(r) for r in role_versions])
    predicate = {
        "record": {"repository": REPO, "alias": "prod", "version": version, "digest": digest},
        "tuf": {
            "roots": [],
            "targets": [blob(t) for t in targets],
            "role": {"name": ROLE, "version": moves[version - 1]["role_version"]},
            "role_versions": [blob(r) for r in role_versions],
        },
        "history": moves[version - 1 : version + 1],
    }
    return make_statement(REPO, digest, "https://modelward.dev/release-record/v1", predicate)


@dataclass
class Delegation:
    """Root 1 (admin signs root and targets); targets 1 gives prod to Bob and Carol, targets
    2 to Carol only (Bob's key revoked); role version 1, signed by Carol, moves prod to d1."""

    root: bytes
    admin: Any
    bob: Any
    carol: Any
    targets: list[bytes]
    role_v1: bytes


@pytest.fixture
def delegation() -> Delegation:
    from tuf.api.metadata import Root

    from modelward.attest.keys import generate_private_key
    from modelward.attest.tuf import tuf_key

    admin, bob, carol = (generate_private_key() for _ in range(3))
    root = Root(consistent_snapshot=True)
    root.add_key(tuf_key(admin.public_key()), "root")
    root.add_key(tuf_key(admin.public_key()), "targets")
    return Delegation(
        root=_tuf_md(root, admin).to_bytes(),
        admin=admin,
        bob=bob,
        carol=carol,
        targets=[_top_targets(1, admin, [bob, carol]), _top_targets(2, admin, [carol])],
        role_v1=_role_version(1, D1, carol),
    )


def test_record_leaning_on_an_old_delegation_for_a_revoked_key_is_refused(
    delegation: Delegation,
) -> None:
    """Bob's key was removed from prod (targets 2). A role version 2 he signs moving prod to
    d2 verifies only by targets 1, which the record embeds beside targets 2: a record of
    that move, signed by a key the newest delegation trusts (Carol's, who recorded what the
    registry served), is refused at check 2 for the role version, not valid. The same
    record with version 2 signed by Carol passes check 2 (the control)."""
    from modelward.attest.release import (
        ReleaseRecordInvalid,
        verify_record,
        verify_record_key,
        write_record,
    )

    d = delegation
    honest = _record_statement(d.targets, [d.role_v1, _role_version(2, D2, d.carol)], 2, D2)
    assert verify_record_key(honest, d.root, d.carol.public_key()) == ROLE

    forged = _record_statement(d.targets, [d.role_v1, _role_version(2, D2, d.bob)], 2, D2)
    with pytest.raises(ReleaseRecordInvalid) as refused:
        verify_record(write_record(forged, [d.carol]), d.root)
    assert (refused.value.check, refused.value.field) == (2, "tuf.role_versions[1]")
    assert f"{ROLE} version 2 (at or after the recorded move" in refused.value.reason
    assert "fails the delegation of the newest top-level targets, version 2" in refused.value.reason
    with pytest.raises(ReleaseRecordInvalid):
        verify_record_key(forged, d.root, d.carol.public_key())


def test_record_leaving_out_a_top_level_targets_version_is_refused(
    delegation: Delegation,
) -> None:
    """Targets 1 and 3 without 2 (which could have removed a key from the role): refused at
    check 2, naming the missing version."""
    from modelward.attest.release import ReleaseRecordInvalid, verify_record_key

    d = delegation
    third = _top_targets(3, d.admin, [d.carol])
    statement = _record_statement([d.targets[0], third], [d.role_v1], 1, D1)
    with pytest.raises(ReleaseRecordInvalid) as refused:
        verify_record_key(statement, d.root, d.carol.public_key())
    assert (refused.value.check, refused.value.field) == (2, "tuf.targets")
    assert "holds top-level targets versions 1, 3: version 2 is missing" in refused.value.reason


# -- fix round F4: a protected pattern's role name fits the role columns and file names -----
@pytest.mark.sqlite_only
def test_a_protected_pattern_too_long_for_a_role_name_is_refused_at_policy_load(
    registry: Registry,
) -> None:
    """A protected pattern's role name must fit the repository it judges: a 120-character
    pattern makes a role name over the 300-character role columns for a repository of the
    longest name (a 500 on PostgreSQL at the first proposal); 70 '*'s, a metadata file name
    over 255 bytes for a short one; '/' could not be a file name at all. Each is refused
    when the policy is loaded: creating a repository with one (nothing created) and
    replacing a repository's policy with one (the old policy kept), each audited. The same
    120-character pattern fits a repository of a short name."""
    from modelward.client.api import APIError

    pub = new_publisher(registry)
    long_pattern = "release-" + "x" * 112

    def long_name() -> str:  # ORG and NAME at the registry's bound, 100 characters each
        return f"{unique('o') + 'o' * 89}/{unique('m') + 'm' * 89}"

    def short_name() -> str:
        return f"{unique('o')}/{unique('m')}"

    since = max((e["seq"] for e in registry.admin.iter_audit()), default=0)
    for pattern, new_name, reason in (
        (
            long_pattern,
            long_name,
            "would be 322 characters for repository {name}, over the limit of 300; keep "
            "the pattern to 98 characters",
        ),
        ("release-" + "*" * 70, short_name, "over the limit of 255 (a file name); keep the"),
        ("team/prod", short_name, "holds '/': a protected pattern names its TUF role"),
    ):
        policy = _policy(pub.name).replace("pattern: prod,", f"pattern: '{pattern}',")
        name = new_name()
        with pytest.raises(APIError) as refused:
            registry.admin.create_repo(name, policy)
        assert (refused.value.status, refused.value.code) == (400, "invalid_policy")
        assert "aliases[0]: protected pattern" in refused.value.message
        assert reason.format(name=name) in refused.value.message
        with pytest.raises(APIError) as missing:
            registry.admin.get_repo(name)
        assert missing.value.status == 404

        repo = new_name()
        registry.admin.create_repo(repo, _policy(pub.name))
        with pytest.raises(APIError) as replaced:
            registry.admin.set_policy(repo, policy)
        assert (replaced.value.status, replaced.value.code) == (400, "invalid_policy")
        assert reason.format(name=repo) in replaced.value.message
        assert registry.admin.get_repo(repo)["policy_yaml"] == _policy(pub.name)
    fits = short_name()
    long_policy = _policy(pub.name).replace("pattern: prod,", f"pattern: '{long_pattern}',")
    registry.admin.create_repo(fits, long_policy)
    assert registry.admin.get_repo(fits)["policy_yaml"] == long_policy
    denied = [
        e
        for e in registry.admin.iter_audit(after=since)
        if e["action"] == "denied" and (e.get("details") or {}).get("code") == "invalid_policy"
    ]
    assert len(denied) == 6, denied
