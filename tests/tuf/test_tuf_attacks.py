"""One test per attack on alias decisions, at the TUF layer (docs/tuf.md#attacks).

The registry side (``signing.tuf.repository``) writes metadata into a directory served over
loopback HTTP; the worker side (``loader.tuf_resolve``, i.e. ``tuf.ngclient``) resolves
aliases from it with a pinned root. Each attack edits the served files directly, as someone
who can write the registry's storage (but holds none of the offline keys) would.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from securesystemslib.signer import CryptoSigner
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import Delegations, Metadata, Root, Snapshot, TargetFile, Targets, Timestamp
from tuf.api.serialization import DeserializationError

from modelward.attest.errors import StaleProposal
from modelward.attest.keys import generate_private_key
from modelward.attest.tuf import alias_path, open_role, protected_role, quarantine_path, tuf_signer
from modelward.loader.errors import BundleQuarantined
from modelward.loader.tuf_resolve import TrustMetadataRefused, resolve_alias
from modelward.registry.domains.signing.tuf.repository import (
    Expiries,
    MetadataRepository,
    meta_file,
    new_root,
)
from modelward.registry.domains.signing.tuf.roles import ProtectedRule, RepositoryTrust, delegations
from modelward.registry.domains.signing.tuf.store import DirectoryStore, file_name

REPO = "acme/tiny"


def signer() -> CryptoSigner:
    return tuf_signer(generate_private_key("ed25519"))


def manifest(n: int) -> bytes:
    return json.dumps({"schemaVersion": 2, "n": n}).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class World:
    """A TUF repository in a served directory, its keys, and a worker's cache."""

    store: DirectoryStore
    url: str
    cache: Path
    root_signers: list[CryptoSigner]
    online: CryptoSigner
    publisher: CryptoSigner
    reviewers: list[CryptoSigner]
    repo: MetadataRepository
    pinned_root: bytes = b""
    approvals: int = 2
    targets_signers: list[CryptoSigner] = field(default_factory=list)

    def resolve(self, alias: str, *, cache: Path | None = None) -> str:
        return resolve_alias(
            REPO,
            alias,
            metadata_url=self.url,
            cache_dir=cache or self.cache,
            trust_root=self.pinned_root,
        ).digest

    def move(self, role: str, alias: str, data: bytes, signers: list[CryptoSigner]) -> None:
        md = self.repo.propose(role, lambda t: set_target(t, alias_path(REPO, alias), data))
        for s in signers:
            md.sign(s, append=True)
        self.repo.publish_delegated(role, md)

    def delegations(self, quarantine: bool) -> Delegations:
        return delegations(
            [
                RepositoryTrust(
                    REPO, [ProtectedRule("prod", self.approvals)], [], [self.publisher.public_key]
                )
            ],
            reviewer_keys=[r.public_key for r in self.reviewers],
            online_key=self.online.public_key,
            quarantine=quarantine,
        )

    def served(self, role: str) -> Path:
        return self.store.root / file_name(role, self.store.latest_versions()[role])

    def forge_snapshot(self, role: str) -> None:
        """List ``role``'s served file by its current bytes in the snapshot and re-sign the
        snapshot and a new timestamp with the online key: what a writer who also stole the
        registry's online key does after rewriting a role file, so that the worker's next
        check (signatures, versions) is the one that answers instead of the hash."""
        name = file_name(Snapshot.type, self.store.latest_versions()[Snapshot.type])
        snapshot = Metadata[Snapshot].from_bytes((self.store.root / name).read_bytes())
        version = snapshot.signed.meta[f"{role}.json"].version
        snapshot.signed.meta[f"{role}.json"] = meta_file(version, self.served(role).read_bytes())
        snapshot.signed.version += 1  # a worker keeps the snapshot it cached at a version
        snapshot.signatures.clear()
        snapshot.sign(self.online, append=True)
        name = file_name(Snapshot.type, snapshot.signed.version)
        (self.store.root / name).write_bytes(snapshot.to_bytes())
        timestamp = Metadata[Timestamp].from_bytes(
            (self.store.root / "timestamp.json").read_bytes()
        )
        timestamp.signed.snapshot_meta = meta_file(snapshot.signed.version, snapshot.to_bytes())
        timestamp.signed.version += 1
        timestamp.signatures.clear()
        timestamp.sign(self.online, append=True)
        (self.store.root / "timestamp.json").write_bytes(timestamp.to_bytes())


def set_target(targets: Targets, path: str, data: bytes) -> None:
    targets.targets[path] = TargetFile.from_data(path, data, ["sha256"])


def _serve(directory: Path) -> tuple[str, http.server.ThreadingHTTPServer]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/", server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base name
        pass


def make_world(tmp_path: Path, *, approvals: int = 2, expiries: Expiries | None = None) -> World:
    store = DirectoryStore(tmp_path / "metadata")
    root_signers = [signer(), signer()]
    online, publisher = signer(), signer()
    reviewers = [signer(), signer(), signer()]
    repo = MetadataRepository(
        store,
        {"targets": [root_signers[0]], "snapshot": [online], "timestamp": [online]},
        expiries=expiries,
    )
    root = new_root(
        root_keys=[s.public_key for s in root_signers],
        root_threshold=2,
        targets_keys=[root_signers[0].public_key],
        targets_threshold=1,
        snapshot_key=online.public_key,
        timestamp_key=online.public_key,
        expires=datetime.now(UTC) + timedelta(days=365),
    )
    for s in root_signers:
        root.sign(s, append=True)
    repo.install_root(root.to_bytes())
    url, server = _serve(store.root)
    world = World(
        store,
        url,
        tmp_path / "cache",
        root_signers,
        online,
        publisher,
        reviewers,
        repo,
        pinned_root=root.to_bytes(),
        approvals=approvals,
    )
    with repo.edit_targets() as targets:
        targets.delegations = world.delegations(quarantine=False)
    repo.publish()
    world.move(open_role(REPO), "dev", manifest(1), [publisher])
    world.move(protected_role(REPO, "prod"), "prod", manifest(1), reviewers[:approvals])
    _SERVERS.append(server)
    return world


_SERVERS: list[http.server.ThreadingHTTPServer] = []


@pytest.fixture(autouse=True)
def _stop_servers() -> Iterator[None]:
    yield
    while _SERVERS:
        _SERVERS.pop().shutdown()


def test_a_worker_resolves_aliases_through_verified_metadata(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    assert world.resolve("dev") == digest_of(manifest(1))
    assert world.resolve("prod") == digest_of(manifest(1))


def test_an_alias_without_a_signed_target_is_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    with pytest.raises(TrustMetadataRefused, match="no signed target"):
        world.resolve("staging")


def test_resolving_without_a_pinned_root_is_refused_with_a_hint(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    with pytest.raises(TrustMetadataRefused, match="needs a pinned TUF root"):
        resolve_alias(
            REPO, "prod", metadata_url=world.url, cache_dir=tmp_path / "fresh", trust_root=None
        )


def test_prod_moved_with_fewer_approvals_than_the_threshold_is_refused(tmp_path: Path) -> None:
    """The registry itself refuses to publish it ..."""
    world = make_world(tmp_path)
    with pytest.raises(UnsignedMetadataError):
        world.move(protected_role(REPO, "prod"), "prod", manifest(2), world.reviewers[:1])
    assert world.resolve("prod") == digest_of(manifest(1))


def test_prod_pointed_at_a_never_approved_digest_by_a_storage_writer_is_refused(
    tmp_path: Path,
) -> None:
    """... and a worker refuses it when someone writes it into storage anyway (one stolen
    reviewer key; the threshold is 2)."""
    world = make_world(tmp_path)
    role = protected_role(REPO, "prod")
    md = Metadata[Targets].from_bytes(world.served(role).read_bytes())
    set_target(md.signed, alias_path(REPO, "prod"), manifest(666))
    md.signatures.clear()
    md.sign(world.reviewers[0], append=True)
    world.served(role).write_bytes(md.to_bytes())
    # the snapshot lists prod's sha256: the rewritten file is refused by its hash ...
    with pytest.raises(TrustMetadataRefused, match="LengthOrHashMismatchError"):
        world.resolve("prod")
    # ... and with the online key stolen too, by its missing second signature
    world.forge_snapshot(role)
    with pytest.raises(TrustMetadataRefused, match="UnsignedMetadataError"):
        world.resolve("prod")


def test_a_threshold_met_by_the_same_key_twice_is_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    role = protected_role(REPO, "prod")
    md = world.repo.propose(role, lambda t: set_target(t, alias_path(REPO, "prod"), manifest(3)))
    md.sign(world.reviewers[0], append=True)
    raw = json.loads(md.to_bytes())
    raw["signatures"].append(dict(raw["signatures"][0]))  # the same keyid and signature again
    with pytest.raises(DeserializationError) as refused:
        Metadata.from_bytes(json.dumps(raw).encode())
    assert "Multiple signatures" in str(refused.value.__cause__)
    # Written into storage as the current version, a worker refuses it too.
    current = world.served(role)
    stale = json.loads(current.read_bytes())
    stale["signatures"] = [stale["signatures"][0], dict(stale["signatures"][0])]
    current.write_text(json.dumps(stale))
    with pytest.raises(TrustMetadataRefused):
        world.resolve("prod")


def test_rollback_of_an_alias_role_to_an_older_version_is_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.move(protected_role(REPO, "prod"), "prod", manifest(2), world.reviewers[:2])
    assert world.resolve("prod") == digest_of(manifest(2))  # the worker has seen version 2
    old_timestamp = world.store.root / "timestamp.json"
    snapshots = sorted(world.store.root.glob("*.snapshot.json"))
    # Serve the previous timestamp: it names the previous snapshot, hence the previous prod.
    previous = Metadata.from_bytes(snapshots[-2].read_bytes())
    forged_ts = Metadata[Timestamp].from_bytes(old_timestamp.read_bytes())
    forged_ts.signed.snapshot_meta.version = previous.signed.version
    forged_ts.signed.version -= 1
    forged_ts.signatures.clear()
    forged_ts.sign(world.online, append=True)  # even with the online key stolen
    old_timestamp.write_bytes(forged_ts.to_bytes())
    with pytest.raises(TrustMetadataRefused, match="BadVersionNumberError"):
        world.resolve("prod")


def test_a_quarantine_hidden_by_serving_an_older_quarantine_role_is_refused(
    tmp_path: Path,
) -> None:
    world = make_world(tmp_path)
    other, prod = manifest(99), manifest(1)
    first = world.repo.propose(
        "quarantine", lambda t: set_target(t, quarantine_path(digest_of(other)), other)
    )
    first.sign(world.reviewers[2], append=True)
    world.repo.publish_delegated("quarantine", first, delegations=world.delegations(True))
    assert world.resolve("prod") == digest_of(prod)
    second = world.repo.propose(
        "quarantine", lambda t: set_target(t, quarantine_path(digest_of(prod)), prod)
    )
    second.sign(world.reviewers[1], append=True)
    world.repo.publish_delegated("quarantine", second)
    with pytest.raises(BundleQuarantined):
        world.resolve("prod")
    # Serve quarantine v1 (validly signed, without prod) under v2's name.
    v1 = world.store.read("quarantine", 1)
    assert v1 is not None
    world.served("quarantine").write_bytes(v1)
    with pytest.raises(TrustMetadataRefused):
        world.resolve("prod", cache=tmp_path / "other-worker")


def test_a_stale_timestamp_past_its_expiry_is_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path, expiries=Expiries(timestamp=timedelta(seconds=2)))
    assert world.resolve("prod")
    time.sleep(3)  # the registry did not re-sign: the metadata is frozen
    with pytest.raises(TrustMetadataRefused, match="ExpiredMetadataError"):
        world.resolve("prod")
    world.repo.refresh()
    assert world.resolve("prod") == digest_of(manifest(1))


def test_mix_and_match_of_role_versions_from_different_snapshots_is_refused(
    tmp_path: Path,
) -> None:
    world = make_world(tmp_path)
    role = protected_role(REPO, "prod")
    first = world.served(role).read_bytes()
    world.move(role, "prod", manifest(2), world.reviewers[:2])
    # The current snapshot names prod v2; serve v1's (validly signed) bytes as v2.
    world.served(role).write_bytes(first)
    with pytest.raises(TrustMetadataRefused, match="LengthOrHashMismatchError"):
        world.resolve("prod")
    world.forge_snapshot(role)  # the online key re-lists the file with v1's hash under v2's name
    with pytest.raises(TrustMetadataRefused, match="BadVersionNumberError"):
        world.resolve("prod")


def test_a_stale_proposal_is_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    role = protected_role(REPO, "prod")
    late = world.repo.propose(role, lambda t: set_target(t, alias_path(REPO, "prod"), manifest(5)))
    world.move(role, "prod", manifest(4), world.reviewers[:2])
    for s in world.reviewers[:2]:
        late.sign(s, append=True)
    with pytest.raises(StaleProposal, match="propose again"):
        world.repo.publish_delegated(role, late)


def test_a_worker_with_only_the_old_root_follows_a_root_rotation(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    assert world.resolve("prod")
    new_signers = [signer(), signer()]
    current = Metadata[Root].from_bytes(world.store.read("root") or b"")
    rotated = Metadata[Root].from_bytes(current.to_bytes())
    rotated.signed.version += 1
    for old in world.root_signers:
        rotated.signed.revoke_key(old.public_key.keyid, "root")
    for new in new_signers:
        rotated.signed.add_key(new.public_key, "root")
    rotated.signatures.clear()
    for s in [*world.root_signers, *new_signers]:
        rotated.sign(s, append=True)
    world.repo.install_root(rotated.to_bytes())
    # A fresh worker pinned to root v1 walks to v2; the old worker's cache does too.
    fresh = resolve_alias(
        REPO,
        "prod",
        metadata_url=world.url,
        cache_dir=tmp_path / "fresh",
        trust_root=world.pinned_root,
    )
    assert fresh.digest == digest_of(manifest(1))
    assert json.loads((tmp_path / "fresh" / "root.json").read_bytes())["signed"]["version"] == 2
    assert world.resolve("prod") == digest_of(manifest(1))


def test_a_root_rotation_without_the_old_roots_threshold_is_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    current = Metadata[Root].from_bytes(world.store.read("root") or b"")
    rotated = Metadata[Root].from_bytes(current.to_bytes())
    rotated.signed.version += 1
    intruder = signer()
    rotated.signed.add_key(intruder.public_key, "root")
    rotated.signatures.clear()
    rotated.sign(intruder, append=True)
    rotated.sign(world.root_signers[0], append=True)  # one of two old root keys
    with pytest.raises(UnsignedMetadataError):
        world.repo.install_root(rotated.to_bytes())
