"""One test per attack on signed alias decisions by someone who can write the registry's
database (docs/tuf.md#attacks), against a real ``modelward serve`` on loopback (SQLite and
PostgreSQL) and a worker resolving through ``loader.tuf_resolve`` (``tuf.ngclient``) from the
root version 1 the registry served when the test began.

The attacker edits ``tuf_metadata`` and ``aliases`` rows with SQLAlchemy on the registry's
database URL, and may hold one reviewer's private key; it holds none of the registry's
online keys. ``attacker()`` undoes its edits when the test ends, so the module's registry
stays coherent for the next test. A worker that starts from the pinned root alone cannot
tell a consistent older state of the repository from the current one (a TUF limit, not
ours): the rollback and freeze attacks are refused for a worker that saw the newer state.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from sqlalchemy import Engine, create_engine, delete, insert, select, update
from tuf.api.metadata import Metadata, Snapshot, TargetFile, Targets, Timestamp

from modelward.attest.keys import generate_private_key, public_key_pem
from modelward.attest.tuf import QUARANTINE_ROLE, alias_path, protected_role, tuf_signer
from modelward.client.api import APIError, RegistryClient
from modelward.loader.errors import BundleQuarantined
from modelward.loader.tuf_resolve import TrustMetadataRefused, resolve_alias
from modelward.registry.domains.signing.tuf.keys import OnlineKeys
from modelward.registry.domains.signing.tuf.repository import meta_file
from modelward.registry.domains.signing.tuf.tables import TufMetadata
from modelward.registry.models import Alias, Repository
from tests.registry.conftest import (
    Publisher,
    Registry,
    new_publisher,
    pg_cluster,  # noqa: F401 - the fixture the postgres runs start from
    push_new,
    start_registry,
    unique,
)

POLICY = (
    "version: 1\ntrust_registered_signers: true\naliases:\n"
    "  - {pattern: prod, roles: [publisher], protected: true, approvals: 2}\n"
    "  - {pattern: '*', roles: [publisher]}\n"
)
# Nothing is re-signed behind a test's back: what changes, the test changed.
QUIET = {"MODELWARD_TUF_REFRESH_INTERVAL_SECONDS": "3600"}
UNCACHED = {"MODELWARD_TUF_FRESHNESS_SECONDS": "0"}
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
JSON = dict[str, Any]


# -- registries ------------------------------------------------------------------------------
def _start(request: pytest.FixtureRequest, base: Path, env: dict[str, str]) -> Registry:
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    # the attacker rewrites rows behind the registry's back, and each test expects its
    # forgery served at once: no copy in memory (docs/tuf.md#serving)
    return start_registry(request.param, base, pg, extra_env={**UNCACHED, **env})


def uncached_registry(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """A module's own registry, nothing served from memory: for the modules whose
    ``attacker`` rewrites stored rows behind the shared ``registry``'s back (its undo deletes
    rows the registry wrote meanwhile, and the registry then writes those versions again)."""
    registry = _start(request, tmp_path_factory.mktemp(f"uncached-{request.param}"), {})
    try:
        yield registry
    finally:
        registry.close()
        registry.server.stop()


@pytest.fixture(scope="module", params=KINDS)
def reg(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    registry = _start(request, tmp_path_factory.mktemp(f"tuf-{request.param}"), QUIET)
    try:
        yield registry
    finally:
        registry.close()
        registry.server.stop()


@pytest.fixture(params=KINDS)
def fresh(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[dict[str, str]], Registry]]:
    """Starts a private registry with the given TUF settings (lifetimes, refresh)."""
    started: list[Registry] = []

    def start(env: dict[str, str]) -> Registry:
        started.append(_start(request, tmp_path / f"reg{len(started)}", env))
        return started[-1]

    yield start
    for registry in started:
        registry.close()
        registry.server.stop()


# -- people and decisions --------------------------------------------------------------------
def new_reviewer(reg: Registry) -> Publisher:
    """A reviewer whose key the admin registers (reviewers sign protected aliases)."""
    actor = reg.actor("reviewer")
    key = generate_private_key()
    pem = public_key_pem(key.public_key()).decode()
    return Publisher(actor, key, str(reg.admin.register_key(pem, principal=actor.name)["keyid"]))


def sign(signer: Publisher, proposal_id: int) -> JSON:
    """What ``approve --key`` does: sign the proposal's payload locally, send the signature."""
    proposal = signer.actor.client.tuf_proposal(proposal_id)
    payload = Metadata.from_bytes(base64.b64decode(proposal["payload"]))
    signature = payload.sign(tuf_signer(signer.key))
    return signer.actor.client.tuf_sign(proposal_id, signature.keyid, signature.signature)


def resolve(client: RegistryClient, root: bytes, repo: str, alias: str, cache: Path) -> str:
    """The digest a worker with ``cache`` (its trusted metadata) resolves ``repo@alias`` to."""
    return resolve_alias(
        repo,
        alias,
        metadata_url=client.tuf_url,
        cache_dir=cache,
        trust_root=root,
        fetcher=client.tuf_fetcher(),
    ).digest


def served_timestamp(client: RegistryClient) -> Timestamp:
    return Metadata[Timestamp].from_bytes(client.tuf_file("timestamp.json")).signed


@dataclass
class Release:
    """A repository whose ``prod`` (2 approvals) points at ``approved``, signed by reviewers
    ``r1`` (the key the attacker stole) and ``r2``; a worker's client and pinned root."""

    reg: Registry
    repo: str
    publisher: Publisher
    r1: Publisher
    r2: Publisher
    worker: RegistryClient
    root: bytes
    approved: str
    tmp: Path

    @property
    def role(self) -> str:
        return protected_role(self.repo, "prod")

    @property
    def path(self) -> str:
        return alias_path(self.repo, "prod")

    def push(self) -> str:
        # weights of its own: a bundle sharing the quarantined one's would be refused
        return push_new(self.publisher, self.repo, self.tmp / unique("w"))

    def propose(self, digest: str) -> int:
        answer = self.publisher.actor.client.set_alias(self.repo, "prod", digest, propose=True)
        return int(answer["pending"]["id"])

    def approve(self, digest: str) -> None:
        proposal = self.propose(digest)
        sign(self.r1, proposal)
        assert sign(self.r2, proposal)["state"] == "published"

    def resolve(self, worker: str) -> str:
        """What the worker whose cache is ``worker`` resolves ``prod`` to."""
        return resolve(self.worker, self.root, self.repo, "prod", self.tmp / worker)


@pytest.fixture
def release(reg: Registry, tmp_path: Path) -> Release:
    publisher, r1, r2 = new_publisher(reg), new_reviewer(reg), new_reviewer(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    approved = push_new(publisher, repo, tmp_path)
    worker = reg.actor("reader").client
    rel = Release(
        reg, repo, publisher, r1, r2, worker, worker.tuf_file("1.root.json"), approved, tmp_path
    )
    rel.approve(approved)
    assert rel.resolve("before") == approved
    return rel


# -- the attacker ----------------------------------------------------------------------------
class Attacker:
    """Write access to the registry's database, and nothing else."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def metadata(self, role: str, version: int | None = None) -> bytes:
        query = select(TufMetadata.data).where(TufMetadata.role == role)
        if version is None:
            query = query.order_by(TufMetadata.version.desc()).limit(1)
        else:
            query = query.where(TufMetadata.version == version)
        with self.engine.connect() as conn:
            data = conn.scalars(query).first()
        assert data is not None, f"no {role} v{version} in the database"
        return bytes(data)

    def latest(self, role: str) -> int:
        return int(Metadata.from_bytes(self.metadata(role)).signed.version)

    def write(self, role: str, version: int, data: bytes) -> None:
        """Serve ``data`` as ``role`` at ``version`` (replacing what is there)."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(TufMetadata).where(TufMetadata.role == role, TufMetadata.version == version)
            )
            conn.execute(
                insert(TufMetadata).values(
                    role=role, version=version, data=data, created_at=datetime.now(UTC)
                )
            )

    def list_in_snapshot(self, keys_dir: Path, role: str, version: int) -> None:
        """With the registry's online keys too (``keys_dir``): a new snapshot listing
        ``role`` at ``version`` with the sha256 of its stored bytes, and a new timestamp
        naming it, so that what a worker checks next is the role's signatures."""
        online = OnlineKeys(keys_dir)
        snapshot = Metadata[Snapshot].from_bytes(self.metadata("snapshot"))
        snapshot.signed.meta[f"{role}.json"] = meta_file(version, self.metadata(role, version))
        snapshot.signed.version += 1
        snapshot.signatures.clear()
        snapshot.sign(online.signer("snapshot"))
        data = snapshot.to_bytes()
        self.write("snapshot", snapshot.signed.version, data)
        timestamp = Metadata[Timestamp].from_bytes(self.metadata("timestamp"))
        timestamp.signed.snapshot_meta = meta_file(snapshot.signed.version, data)
        timestamp.signed.version += 1
        timestamp.signatures.clear()
        timestamp.sign(online.signer("timestamp"))
        self.write("timestamp", timestamp.signed.version, timestamp.to_bytes())

    def drop_after(self, role: str, version: int) -> None:
        """Delete every version of ``role`` newer than ``version``."""
        with self.engine.begin() as conn:
            conn.execute(
                delete(TufMetadata).where(TufMetadata.role == role, TufMetadata.version > version)
            )

    def move_alias(self, repo: str, alias: str, digest: str) -> None:
        """``UPDATE aliases SET digest=...``: the registry's word, without any signature."""
        repo_id = select(Repository.id).where(Repository.name == repo).scalar_subquery()
        with self.engine.begin() as conn:
            moved = conn.execute(
                update(Alias)
                .where(Alias.repo_id == repo_id, Alias.name == alias)
                .values(digest=digest)
            )
        assert moved.rowcount == 1


@contextmanager
def attacker(reg: Registry) -> Iterator[Attacker]:
    """An attacker on ``reg``'s database; its edits to metadata and aliases undone after."""
    engine = create_engine(reg.database_url)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(select(TufMetadata.__table__))]
        aliases = conn.execute(select(Alias.id, Alias.digest)).all()
    try:
        yield Attacker(engine)
    finally:
        with engine.begin() as conn:
            conn.execute(delete(TufMetadata))
            conn.execute(insert(TufMetadata), rows)
            for alias_id, digest in aliases:
                conn.execute(update(Alias).where(Alias.id == alias_id).values(digest=digest))
        engine.dispose()


def forge(
    data: bytes,
    path: str,
    digest: str | None,
    *,
    version: int,
    keys: list[PrivateKeyTypes],
    twice: bool = False,
) -> bytes:
    """``data`` (a delegated role) with ``path`` naming ``digest`` (dropped when None), as
    version ``version``, signed by ``keys`` (each signature listed twice when ``twice``)."""
    md = Metadata[Targets].from_bytes(data)
    if digest is None:
        del md.signed.targets[path]
    else:
        md.signed.targets[path] = TargetFile(length=1, hashes={"sha256": digest[7:]}, path=path)
    md.signed.version = version
    md.signatures.clear()
    for key in keys:
        md.sign(tuf_signer(key), append=True)
    forged = md.to_dict()
    if twice:
        forged["signatures"] = forged["signatures"] * 2
    return json.dumps(forged).encode()


def wait_until(done: Callable[[], bool], what: str, deadline: float = 90.0) -> None:
    end = time.monotonic() + deadline
    while not done():
        assert time.monotonic() < end, f"not within {deadline:.0f}s: {what}"
        time.sleep(0.25)


# -- the attacks -----------------------------------------------------------------------------
def test_rolling_the_prod_role_back_is_refused_by_a_worker_that_saw_the_new_version(
    release: Release,
) -> None:
    timestamp = served_timestamp(release.worker)
    versions = {"snapshot": timestamp.snapshot_meta.version, "timestamp": timestamp.version}
    newer = release.push()
    release.approve(newer)
    assert release.resolve("seen") == newer
    with attacker(release.reg) as db:
        # the repository as it was when prod was at version 1: role, snapshot, timestamp
        db.drop_after(release.role, 1)
        for role, version in versions.items():
            db.drop_after(role, version)
        db.move_alias(release.repo, "prod", release.approved)
        assert served_timestamp(release.worker).version == versions["timestamp"]
        with pytest.raises(TrustMetadataRefused, match="BadVersionNumberError"):
            release.resolve("seen")


def test_prod_pointed_at_a_never_approved_digest_with_one_stolen_key_is_refused(
    release: Release,
) -> None:
    evil = release.push()
    with attacker(release.reg) as db:
        db.write(
            release.role,
            2,
            forge(db.metadata(release.role), release.path, evil, version=2, keys=[release.r1.key]),
        )
        db.move_alias(release.repo, "prod", evil)
        # the registry's own next snapshot passes over the forgery: it names verified
        # versions only (registry.domains.signing.tuf.repository.MetadataRepository.verified)
        new_reviewer(release.reg)
        release.reg.admin.tuf_sync()
        snapshot = Metadata[Snapshot].from_bytes(db.metadata("snapshot")).signed
        assert snapshot.meta[f"{release.role}.json"].version == 1
        for worker in ("before", "fresh"):
            assert release.resolve(worker) == release.approved
        # served in place of the version the snapshot names, the forgery is refused: its
        # bytes are not the ones the snapshot lists (sha256 and length), before its signatures
        db.write(
            release.role,
            1,
            forge(
                db.metadata(release.role, 1), release.path, evil, version=1, keys=[release.r1.key]
            ),
        )
        with pytest.raises(TrustMetadataRefused, match="LengthOrHashMismatchError"):
            release.resolve("fresh-2")


def test_a_db_writer_moving_the_alias_row_changes_nothing_a_worker_resolves(
    release: Release,
) -> None:
    evil = release.push()
    with attacker(release.reg) as db:
        db.move_alias(release.repo, "prod", evil)
        shown = release.worker.get_alias(release.repo, "prod")
        assert (shown["digest"], shown["signed"]) == (evil, False)
        assert release.resolve("before") == release.approved
        assert release.resolve("fresh") == release.approved


def test_a_quarantine_hidden_by_serving_an_older_quarantine_role_is_refused(
    release: Release,
) -> None:
    decoy = release.push()
    quarantine = release.r1.actor.client.quarantine(release.repo, decoy, "decoy")["proposal"]
    assert sign(release.r2, quarantine)["state"] == "published"
    assert release.resolve("seen") == release.approved  # the quarantine role exists now
    quarantine = release.r1.actor.client.quarantine(release.repo, release.approved, "bad")
    assert sign(release.r2, quarantine["proposal"])["state"] == "published"
    with pytest.raises(BundleQuarantined):
        release.resolve("seen")
    with attacker(release.reg) as db:
        current = db.latest(QUARANTINE_ROLE)
        db.write(QUARANTINE_ROLE, current, db.metadata(QUARANTINE_ROLE, current - 1))
        with pytest.raises((BundleQuarantined, TrustMetadataRefused)):
            release.resolve("seen")  # it keeps the quarantine it verified
        # not the bytes the snapshot lists for that version (sha256 and length)
        with pytest.raises(TrustMetadataRefused, match="LengthOrHashMismatchError"):
            release.resolve("fresh")


def test_a_cached_quarantine_role_at_a_version_number_reused_after_a_deleted_row_is_refetched(
    release: Release,
) -> None:
    """Issue 38 item 2: a database writer deletes the quarantine role's newest row, and the
    registry signs the next quarantine at that version number again, with other bytes. The
    snapshot lists every role with its sha256 and length (``repository.meta_file``), so a
    worker that cached the old bytes at that version refetches the new ones instead of
    trusting its cache by the version number alone."""
    decoy = release.push()
    quarantine = release.r1.actor.client.quarantine(release.repo, decoy, "decoy")["proposal"]
    assert sign(release.r2, quarantine)["state"] == "published"
    assert release.resolve("seen") == release.approved  # it caches the quarantine role
    with attacker(release.reg) as db:
        reused = db.latest(QUARANTINE_ROLE)
        db.drop_after(QUARANTINE_ROLE, reused - 1)
        quarantine = release.r1.actor.client.quarantine(release.repo, release.approved, "bad")
        assert sign(release.r2, quarantine["proposal"])["state"] == "published"
        assert db.latest(QUARANTINE_ROLE) == reused  # the same number, other bytes
        for worker in ("seen", "fresh"):
            with pytest.raises(BundleQuarantined):
                release.resolve(worker)
        listed = Metadata[Snapshot].from_bytes(db.metadata("snapshot")).signed
        assert listed.meta[f"{QUARANTINE_ROLE}.json"].hashes, "the snapshot lists no hash"


def test_a_frozen_timestamp_past_its_expiry_is_refused(
    fresh: Callable[[dict[str, str]], Registry], tmp_path: Path
) -> None:
    reg = fresh({"MODELWARD_TUF_TIMESTAMP_EXPIRY_SECONDS": "6", **QUIET})
    digest, worker, root, repo = _signed_dev(reg, tmp_path)
    assert resolve(worker, root, repo, "dev", tmp_path / "seen") == digest
    # nobody re-signs the timestamp (an attacker serving it, or a registry stopped signing)
    expires = served_timestamp(worker).expires
    wait_until(lambda: datetime.now(UTC) > expires, "the timestamp expired")
    for cache in ("seen", "fresh"):
        with pytest.raises(TrustMetadataRefused, match="ExpiredMetadataError"):
            resolve(worker, root, repo, "dev", tmp_path / cache)


def test_mixing_role_versions_from_different_snapshots_is_refused(release: Release) -> None:
    newer = release.push()
    release.approve(newer)
    for role in (release.role, "targets"):
        with attacker(release.reg) as db:
            # a validly signed older version, served as the version the snapshot names
            current = db.latest(role)
            db.write(role, current, db.metadata(role, current - 1))
            # not the bytes the snapshot lists for that version (sha256 and length)
            with pytest.raises(TrustMetadataRefused, match="LengthOrHashMismatchError"):
                release.resolve(f"fresh-{role}")


def test_one_stolen_reviewer_key_where_the_threshold_is_2_is_refused(release: Release) -> None:
    evil = release.push()
    # at the registry: one signature of two keeps the move pending
    answer = sign(release.r1, release.propose(evil))
    assert (answer["state"], len(answer["signatures"]), answer["threshold"]) == ("pending", 1, 2)
    assert release.worker.get_alias(release.repo, "prod")["digest"] == release.approved
    assert release.resolve("before") == release.approved
    # in the database, with the online keys too (the snapshot lists each role's sha256):
    # the current version re-signed by the stolen key alone, and listed
    keys_dir = release.reg.server.data_dir / "tuf-keys"
    with attacker(release.reg) as db:
        db.write(
            release.role,
            1,
            forge(
                db.metadata(release.role, 1), release.path, evil, version=1, keys=[release.r1.key]
            ),
        )
        db.list_in_snapshot(keys_dir, release.role, 1)
        with pytest.raises(TrustMetadataRefused, match="UnsignedMetadataError"):
            release.resolve("fresh")
        # the same write with both reviewers' keys is served and believed: what refused the
        # attack above is the threshold
        db.write(
            release.role,
            1,
            forge(
                db.metadata(release.role, 1),
                release.path,
                evil,
                version=1,
                keys=[release.r1.key, release.r2.key],
            ),
        )
        db.list_in_snapshot(keys_dir, release.role, 1)
        assert release.resolve("control") == evil


def test_a_threshold_met_by_the_same_key_twice_is_refused(release: Release) -> None:
    evil = release.push()
    proposal = release.propose(evil)
    sign(release.r1, proposal)
    answer = sign(release.r1, proposal)
    assert (answer["state"], len(answer["signatures"])) == ("pending", 1)
    assert release.worker.get_alias(release.repo, "prod")["digest"] == release.approved
    assert release.resolve("before") == release.approved
    with attacker(release.reg) as db:
        db.write(
            release.role,
            1,
            forge(
                db.metadata(release.role, 1),
                release.path,
                evil,
                version=1,
                keys=[release.r1.key],
                twice=True,
            ),
        )
        db.list_in_snapshot(release.reg.server.data_dir / "tuf-keys", release.role, 1)
        with pytest.raises(TrustMetadataRefused, match="DeserializationError"):
            release.resolve("fresh")


def test_the_timestamp_is_re_signed_at_half_life_without_anyone_acting(
    fresh: Callable[[dict[str, str]], Registry], tmp_path: Path
) -> None:
    reg = fresh(
        {
            "MODELWARD_TUF_TIMESTAMP_EXPIRY_SECONDS": "6",
            "MODELWARD_TUF_REFRESH_INTERVAL_SECONDS": "0.5",
        }
    )
    digest, worker, root, repo = _signed_dev(reg, tmp_path)
    first = served_timestamp(worker)
    wait_until(
        lambda: (
            served_timestamp(worker).version >= first.version + 2
            and datetime.now(UTC) > first.expires
        ),
        "the timestamp re-signed twice and the first one expired",
    )
    assert resolve(worker, root, repo, "dev", tmp_path / "later") == digest


def _signed_dev(reg: Registry, tmp: Path) -> tuple[str, RegistryClient, bytes, str]:
    """``dev`` (an unprotected alias) moved and signed by the publisher: (digest, a worker's
    client, the pinned root, the repository)."""
    publisher = new_publisher(reg)
    repo = reg.repo(publisher, policy_yaml=POLICY)
    digest = push_new(publisher, repo, tmp)
    proposal = publisher.actor.client.set_alias(repo, "dev", digest)["proposal"]
    assert sign(publisher, proposal)["state"] == "published"
    worker = reg.actor("reader").client
    return digest, worker, worker.tuf_file("1.root.json"), repo


# -- the registry never builds on, or shows as signed, a row that does not verify ----------
def test_a_forged_quarantine_version_is_not_carried_into_the_next_signed_one(
    release: Release,
) -> None:
    quarantine = release.r1.actor.client.quarantine(release.repo, release.approved, "bad")
    assert sign(release.r2, quarantine["proposal"])["state"] == "published"
    decoy = release.push()
    with attacker(release.reg) as db:
        # an unsigned next version that no longer lists the quarantined bundle
        current = db.latest(QUARANTINE_ROLE)
        db.write(
            QUARANTINE_ROLE,
            current + 1,
            forge(
                db.metadata(QUARANTINE_ROLE),
                "quarantine/" + release.approved[7:],
                None,
                version=current + 1,
                keys=[],
            ),
        )
        # a reviewer quarantines something else, and signs what the registry proposes
        with contextlib.suppress(APIError):  # a registry that refuses to build on it is right
            quarantine = release.r1.actor.client.quarantine(release.repo, decoy, "other")
            sign(release.r2, quarantine["proposal"])
        with pytest.raises((BundleQuarantined, TrustMetadataRefused)):
            release.resolve("fresh")


def test_an_alias_named_by_a_forged_role_version_is_not_shown_as_signed(
    release: Release,
) -> None:
    evil = release.push()
    with attacker(release.reg) as db:
        db.write(
            release.role,
            2,
            forge(db.metadata(release.role), release.path, evil, version=2, keys=[release.r1.key]),
        )
        db.move_alias(release.repo, "prod", evil)
        assert release.worker.get_alias(release.repo, "prod")["signed"] is False
