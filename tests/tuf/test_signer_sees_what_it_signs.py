"""Issue 36 item 1: what a signer signs is computed on the signer's machine, from the bytes
it signs and the metadata it verified from its own pinned root; the registry's description
is compared, never shown instead (docs/tuf.md#what-a-signer-checks). A database writer with
no key steers nobody, on SQLite and PostgreSQL:

- a rollout plan proposal rewritten to another candidate, steps [100] and no analysis, with
  the rollout row's plan hash set to match: the reviewer's `trust sign` refuses, naming the
  candidate both ways;
- a move proposal rewritten to another digest: `approve --key` refuses, naming it;
- a routine targets proposal carrying a lowered threshold, with the stored bytes of the
  previous targets rewritten to match: the admin's `trust sign --yes` spells the threshold
  out and refuses without --accept-signer-changes (an admin who verified the current targets
  before), or refuses the forged stored targets (a fresh admin machine).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, update
from tuf.api.metadata import Metadata, TargetFile, Targets

from modelward.attest.keys import generate_private_key, save_private_key
from modelward.attest.rollout import make_plan, parse_plan
from modelward.attest.rollout.paths import rollout_path, signed_custom
from modelward.attest.tuf import alias_path, protected_role
from modelward.registry.domains.signing.tuf.tables import TufMetadata, TufProposal
from modelward.registry.models import Rollout
from tests.registry.conftest import Publisher, Registry, new_publisher, push_new
from tests.tuf.test_delegation_attacks import new_reviewer, sign
from tests.tuf.test_registry_attacks_tuf import KINDS, uncached_registry

ONE_REVIEWER = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher, reviewer], protected: true, approvals: 1}\n"
)
TWO_REVIEWERS = ONE_REVIEWER.replace("approvals: 1", "approvals: 2")


@pytest.fixture(params=KINDS)
def reg(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """A registry of its own, serving nothing from memory: the database writer rewrites its
    stored targets behind its back (docs/tuf.md#serving); its targets key goes offline."""
    yield from uncached_registry(request, tmp_path_factory)


def _key_file(who: Publisher, tmp: Path) -> Path:
    path = tmp / f"{who.actor.name}.key"
    save_private_key(who.key, path)
    return path


def _rewrite_payload(registry: Registry, proposal_id: int, path: str, target: TargetFile) -> bytes:
    """The database writer: ``path`` of proposal ``proposal_id`` set to ``target``; returns
    the payload as it was."""
    engine = create_engine(registry.database_url)
    try:
        with engine.begin() as db:
            old = db.scalar(select(TufProposal.payload).where(TufProposal.id == proposal_id))
            assert old is not None
            md = Metadata[Targets].from_bytes(old)
            md.signed.targets[path] = target
            db.execute(
                update(TufProposal)
                .where(TufProposal.id == proposal_id)
                .values(payload=md.to_bytes())
            )
    finally:
        engine.dispose()
    return bytes(old)


def _restore_payload(registry: Registry, proposal_id: int, payload: bytes) -> None:
    engine = create_engine(registry.database_url)
    try:
        with engine.begin() as db:
            db.execute(
                update(TufProposal).where(TufProposal.id == proposal_id).values(payload=payload)
            )
    finally:
        engine.dispose()


def _signatures(registry: Registry, proposal_id: int) -> list[object]:
    signatures: list[object] = registry.admin.tuf_proposal(proposal_id)["signatures"] or []
    return signatures


def test_a_rollout_plan_rewritten_by_a_database_writer_is_refused_by_the_reviewer(
    registry: Registry, tmp_path: Path
) -> None:
    publisher, reviewer = new_publisher(registry), new_reviewer(registry)
    repo = registry.repo(publisher, policy_yaml=ONE_REVIEWER)
    stable = push_new(publisher, repo, tmp_path)
    moved = publisher.actor.client.set_alias(repo, "prod", stable, propose=True)["pending"]
    assert sign(reviewer, int(moved["id"]))["state"] == "published"
    candidate, unreviewed = push_new(publisher, repo, tmp_path), push_new(publisher, repo, tmp_path)
    started = publisher.actor.client.start_rollout(repo, "prod", candidate)
    proposal = int(started["proposal"])
    path = rollout_path(repo, "prod")
    honest = Metadata[Targets].from_bytes(
        base64.b64decode(registry.admin.tuf_proposal(proposal)["payload"])
    )
    raw = signed_custom(honest.signed.targets[path], "plan")
    assert raw is not None
    reviewed = parse_plan(raw)
    forged = make_plan(
        rollout_id=reviewed.rollout_id,
        repository=repo,
        alias="prod",
        stable=reviewed.stable,
        candidate=unreviewed,
        steps=(100,),
    )
    target = TargetFile.from_data(path, forged.raw)
    target.unrecognized_fields["custom"] = {"plan": forged.raw.decode()}
    original = _rewrite_payload(registry, proposal, path, target)
    engine = create_engine(registry.database_url)
    try:
        with engine.begin() as db:  # the row's plan hash set to match the rewritten payload
            db.execute(
                update(Rollout)
                .where(Rollout.rollout_id == reviewed.rollout_id)
                .values(plan_sha256=forged.sha256)
            )
    finally:
        engine.dispose()
    key = _key_file(reviewer, tmp_path)
    refused = registry.cli(
        "trust", "sign", str(proposal), "--key", str(key), token=reviewer.actor.token
    )
    assert refused.returncode == 1, refused.stderr
    assert "disagrees with the bytes to be signed" in refused.stderr
    assert f'candidate: the bytes to sign say "{unreviewed}"' in refused.stderr
    assert f'the registry shows "{candidate}"' in refused.stderr
    assert "steps: the bytes to sign say [100]" in refused.stderr
    assert f"candidate  {unreviewed}" in refused.stderr  # computed from the bytes, shown
    assert _signatures(registry, proposal) == []
    # the honest proposal: the plan is shown from its bytes and signed
    _restore_payload(registry, proposal, original)
    engine = create_engine(registry.database_url)
    try:
        with engine.begin() as db:
            db.execute(
                update(Rollout)
                .where(Rollout.rollout_id == reviewed.rollout_id)
                .values(plan_sha256=reviewed.sha256)
            )
    finally:
        engine.dispose()
    signed = registry.cli(
        "trust", "sign", str(proposal), "--key", str(key), token=reviewer.actor.token
    )
    assert signed.returncode == 0, signed.stderr
    assert f"candidate  {candidate}" in signed.stderr
    assert f"stable     {stable}" in signed.stderr
    assert "steps      5%, 20%, 50%, 100%" in signed.stderr
    assert "fleet      none listed: cohorts by hash bucket" in signed.stderr
    assert publisher.actor.client.rollout_status(repo, "prod")["plan_signed"]


def test_a_move_rewritten_by_a_database_writer_is_refused_by_approve(
    registry: Registry, tmp_path: Path
) -> None:
    publisher, reviewer = new_publisher(registry), new_reviewer(registry)
    repo = registry.repo(publisher, policy_yaml=ONE_REVIEWER)
    reviewed, unreviewed = push_new(publisher, repo, tmp_path), push_new(publisher, repo, tmp_path)
    moved = publisher.actor.client.set_alias(repo, "prod", reviewed, propose=True)["pending"]
    path = alias_path(repo, "prod")
    manifest = publisher.actor.client.get_manifest(repo, unreviewed)
    _rewrite_payload(registry, int(moved["id"]), path, TargetFile.from_data(path, manifest))
    approve = registry.cli(
        "approve", f"{repo}@{reviewed}", "--alias", "prod", "--key",
        str(_key_file(reviewer, tmp_path)), token=reviewer.actor.token,
    )  # fmt: skip
    assert approve.returncode == 1, approve.stderr
    assert f"the bytes to sign set it to {unreviewed}, the registry says {reviewed}" in (
        approve.stderr
    )
    assert f"{path}: (unset) -> {unreviewed}" in approve.stderr
    assert _signatures(registry, int(moved["id"])) == []


def _offline_targets(registry: Registry, tmp: Path) -> Path:
    root_key, targets_key = tmp / "root.key", tmp / "targets.key"
    save_private_key(generate_private_key(), root_key)
    save_private_key(generate_private_key(), targets_key)
    init = registry.cli(
        "trust", "init", "--root-key", str(root_key), "--targets-key", str(targets_key)
    )
    assert init.returncode == 0, init.stderr
    return targets_key


def _sign_targets(registry: Registry, targets_key: Path) -> None:
    registry.admin.tuf_sync()
    for pending in registry.admin.tuf_proposals(pending=True):
        if pending["role"] == "targets":
            done = registry.cli(
                "trust", "sign", str(pending["id"]), "--key", str(targets_key), "--yes",
                "--accept-signer-changes",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr


def _lower(data: bytes, role: str) -> bytes:
    md = Metadata[Targets].from_bytes(data)
    assert md.signed.delegations is not None
    assert md.signed.delegations.roles is not None
    md.signed.delegations.roles[role].threshold = 1
    return md.to_bytes()


def test_a_lowered_threshold_in_a_targets_proposal_and_the_stored_targets_is_spelled_out(
    reg: Registry, tmp_path: Path
) -> None:
    targets_key = _offline_targets(reg, tmp_path)
    publisher = new_publisher(reg)
    new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(publisher, policy_yaml=TWO_REVIEWERS)
    _sign_targets(reg, targets_key)
    prod = protected_role(repo, "prod")
    # the admin's machine verified the targets as they are now
    pinned = reg.cli("trust", "pin", "--trust-root", reg.client_env()["MODELWARD_TRUST_ROOT"])
    assert pinned.returncode == 0, pinned.stderr
    # a routine change: another repository; its delegation waits for the admins
    reg.repo(publisher)
    reg.admin.tuf_sync()
    [routine] = [p for p in reg.admin.tuf_proposals(pending=True) if p["role"] == "targets"]
    # the database writer: prod at threshold 1 in the proposal and in the stored targets
    engine = create_engine(reg.database_url)
    try:
        with engine.begin() as db:
            payload = db.scalar(select(TufProposal.payload).where(TufProposal.id == routine["id"]))
            assert payload is not None
            db.execute(
                update(TufProposal)
                .where(TufProposal.id == routine["id"])
                .values(payload=_lower(payload, prod))
            )
            version = db.scalar(
                select(TufMetadata.version)
                .where(TufMetadata.role == "targets")
                .order_by(TufMetadata.version.desc())
            )
            stored = db.scalar(
                select(TufMetadata.data).where(
                    TufMetadata.role == "targets", TufMetadata.version == version
                )
            )
            assert stored is not None
            db.execute(
                update(TufMetadata)
                .where(TufMetadata.role == "targets", TufMetadata.version == version)
                .values(data=_lower(stored, prod))
            )
    finally:
        engine.dispose()
    sign = ("trust", "sign", str(routine["id"]), "--key", str(targets_key), "--yes")
    refused = reg.cli(*sign)
    assert refused.returncode == 1, refused.stderr
    assert f"role {prod}: threshold lowered: 2 -> 1" in refused.stderr
    assert "--accept-signer-changes" in refused.stderr
    # a fresh admin machine has not verified the current targets: the forged stored bytes
    # are refused outright
    fresh = {"XDG_CACHE_HOME": str(tmp_path / "fresh-admin")}
    forged = reg.cli(*sign, "--accept-signer-changes", env=fresh)
    assert forged.returncode == 1, forged.stderr
    assert "the registry's TUF metadata was refused" in forged.stderr
    proposal = reg.admin.tuf_proposal(int(routine["id"]))
    assert (proposal["state"], proposal["signatures"] or []) == ("pending", [])


def test_signing_without_a_pinned_root_is_refused_and_names_trust_pin(
    registry: Registry, tmp_path: Path
) -> None:
    publisher, reviewer = new_publisher(registry), new_reviewer(registry)
    repo = registry.repo(publisher, policy_yaml=ONE_REVIEWER)
    digest = push_new(publisher, repo, tmp_path)
    moved = publisher.actor.client.set_alias(repo, "prod", digest, propose=True)["pending"]
    bare = {"MODELWARD_TRUST_ROOT": "", "XDG_CACHE_HOME": str(tmp_path / "bare")}
    answer = registry.cli(
        "trust", "sign", str(moved["id"]), "--key", str(_key_file(reviewer, tmp_path)),
        "--json", token=reviewer.actor.token, env=bare,
    )  # fmt: skip
    assert answer.returncode == 2, answer.stderr
    assert "modelward trust pin --trust-root root.json" in answer.stderr
    assert _signatures(registry, int(moved["id"])) == []
