"""The registry's TUF repository: new versions of roles, verified before they are kept.

Built on python-tuf's Metadata API and its ``tuf.repository.Repository`` base (which
supplies ``do_snapshot``/``do_timestamp``). Which role holds which decision is
``registry.domains.signing.tuf.roles``; where the bytes are kept is a ``MetadataStore``.

Who signs what (docs/tuf.md#keys):

- ``snapshot`` and ``timestamp``: the registry's online keys, every time anything changes,
  and the timestamp again at half its lifetime (``refresh``).
- ``root`` and top-level ``targets``: the admins' keys. The registry signs them itself only
  when it holds them (the embedded default, which says loudly that its root key is online).
  Otherwise a new version is a proposal the admins sign offline.
- delegated roles (aliases, quarantine): the keys the top-level ``targets`` delegates them
  to. The registry proposes the next version; it keeps it only once the signatures meet the
  delegation's threshold (``publish_delegated``), checked here with python-tuf, exactly as
  a worker will check it.

Errors: ``tuf.api.exceptions.UnsignedMetadataError`` (threshold not met),
``attest.errors.StaleProposal`` (the role moved on since the proposal was made), ``ValueError`` for
misuse (a role the registry cannot sign).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, cast

from securesystemslib.signer import Key, Signer
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import (
    Delegations,
    Metadata,
    MetaFile,
    Role,
    Root,
    Snapshot,
    Targets,
    Timestamp,
)
from tuf.api.serialization import DeserializationError
from tuf.repository import AbortEdit, Repository

from modelward.attest.errors import StaleProposal
from modelward.registry.domains.signing.tuf.store import MetadataRowRefused, MetadataStore

__all__ = ["Expiries", "MetadataRepository", "MetadataRowRefused", "new_root", "row_refusal"]

TOP_LEVEL = (Root.type, Targets.type, Snapshot.type, Timestamp.type)
MAX_UNVERIFIED = 64  # the default of ``MetadataRepository(max_unverified=)``


def row_refusal(role: str, version: int, data: bytes) -> MetadataRowRefused | None:
    """Why the stored row ``role`` v``version`` is unusable as metadata, or None: it must
    parse as TUF metadata of its role's type and carry its own version."""
    try:
        md: Metadata[Any] = Metadata.from_bytes(data)
    except (DeserializationError, ValueError) as exc:
        return MetadataRowRefused(role, version, f"not TUF metadata ({type(exc).__name__})")
    expected = role if role in TOP_LEVEL else Targets.type
    if md.signed.type != expected:
        return MetadataRowRefused(role, version, f"a {md.signed.type} role, not {expected}")
    if md.signed.version != version:
        return MetadataRowRefused(role, version, f"it says version {md.signed.version}")
    return None


@lru_cache(maxsize=8192)
def _verifies(role: str, data: bytes, version: int, delegator: bytes) -> bool:
    """Whether ``data`` is ``role`` at ``version``, signed by the threshold the verified
    ``delegator`` (root or targets metadata) sets for it."""
    try:
        md: Metadata[Any] = Metadata.from_bytes(data)
        if md.signed.version != version or md.signed.type != (
            Targets.type if role not in TOP_LEVEL else role
        ):
            return False
        parent: Metadata[Any] = Metadata.from_bytes(delegator)
        parent.signed.verify_delegate(role, md.signed_bytes, md.signatures)
    except (UnsignedMetadataError, ValueError, DeserializationError):
        return False
    return True


@lru_cache(maxsize=256)
def _root_step(trusted: bytes | None, data: bytes, expected: int) -> bool:
    """Whether ``data`` is root version ``expected``, signed by its own threshold and, after
    version 1, by the threshold of ``trusted`` (the verified root before it)."""
    try:
        md = Metadata[Root].from_bytes(data)
        if md.signed.type != Root.type or md.signed.version != expected:
            return False
        if trusted is not None:
            Metadata[Root].from_bytes(trusted).signed.verify_delegate(
                Root.type, md.signed_bytes, md.signatures
            )
        md.signed.verify_delegate(Root.type, md.signed_bytes, md.signatures)
    except (UnsignedMetadataError, ValueError, DeserializationError):
        return False
    return True


@lru_cache(maxsize=256)
def _snapshot_listing(data: bytes, version: int, roots: tuple[bytes, ...]) -> dict[str, int] | None:
    """The versions snapshot ``data`` lists (``ROLE.json`` -> version), if it is snapshot
    version ``version`` signed by the snapshot threshold of one of ``roots`` (newest first);
    else None. A copy is the caller's."""
    if not _signed_by_root(Snapshot.type, data, roots):
        return None
    md: Metadata[Any] = Metadata.from_bytes(data)
    if md.signed.version != version:
        return None
    return {name: meta.version for name, meta in md.signed.meta.items()}


def _parsed(data: bytes | None) -> Metadata[Any] | None:
    return Metadata.from_bytes(data) if data is not None else None


@lru_cache(maxsize=1024)
def _signed_by_root(role: str, data: bytes, roots: tuple[bytes, ...]) -> bool:
    """Whether ``data`` is ``role`` (snapshot, timestamp) signed by its threshold in one of
    ``roots``."""
    try:
        md: Metadata[Any] = Metadata.from_bytes(data)
        if md.signed.type != role:
            return False
    except (ValueError, DeserializationError):
        return False
    for root in roots:
        try:
            Metadata[Root].from_bytes(root).signed.verify_delegate(
                role, md.signed_bytes, md.signatures
            )
        except (UnsignedMetadataError, ValueError, DeserializationError):
            continue
        return True
    return False


def meta_file(version: int, data: bytes) -> MetaFile:
    """What a snapshot (or timestamp) says of a file it lists: its version and sha256, so
    that a worker verifies every file against it, one it cached included: a cached file at
    the listed version with other bytes (a version number reused after a restore, or after
    a database writer deleted a row) is refetched, never trusted by its version alone
    (docs/tuf.md#how-a-new-version-is-made). No length: the hash binds the bytes, and a
    file longer than the listed one would be refused as too large (``MetadataTooLarge``)
    instead of named as the wrong bytes (``LengthOrHashMismatchError``); the updater's own
    bounds and the fetch deadline still hold."""
    return MetaFile(version, hashes={"sha256": hashlib.sha256(data).hexdigest()})


@dataclass(frozen=True)
class Expiries:
    """How long each kind of role's metadata is valid after it is signed."""

    root: timedelta = timedelta(days=365)
    targets: timedelta = timedelta(days=365)
    delegated: timedelta = timedelta(days=365)
    snapshot: timedelta = timedelta(days=7)
    timestamp: timedelta = timedelta(days=1)

    def of(self, role: str) -> timedelta:
        return cast(timedelta, getattr(self, role, self.delegated))


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def new_root(
    *,
    root_keys: Sequence[Key],
    root_threshold: int,
    targets_keys: Sequence[Key],
    targets_threshold: int,
    snapshot_key: Key,
    timestamp_key: Key,
    expires: datetime,
) -> Metadata[Root]:
    """Version 1 of root, unsigned: the caller signs it with ``root_threshold`` root keys."""
    root = Root(expires=expires, consistent_snapshot=True)
    for role, keys, threshold in (
        (Root.type, root_keys, root_threshold),
        (Targets.type, targets_keys, targets_threshold),
        (Snapshot.type, [snapshot_key], 1),
        (Timestamp.type, [timestamp_key], 1),
    ):
        if not 1 <= threshold <= len({k.keyid for k in keys}):
            raise ValueError(
                f"{role}: threshold {threshold} needs between 1 and {len(keys)} distinct keys"
            )
        root.roles[role] = Role([], threshold)
        for key in keys:
            root.add_key(key, role)
    return Metadata(root)


class MetadataRepository(Repository):
    """TUF metadata over a ``MetadataStore``, signed by the online ``signers`` it holds.

    ``signers`` maps a top-level role to the signers the registry holds for it (always
    snapshot and timestamp; root and targets only in the embedded default).
    ``max_unverified``: how many stored versions of a role, newest first, that do not
    verify are passed over before the role is refused (``verified``).
    """

    def __init__(
        self,
        store: MetadataStore,
        signers: Mapping[str, Sequence[Signer]],
        *,
        expiries: Expiries | None = None,
        clock: Callable[[], datetime] = _now,
        max_unverified: int = MAX_UNVERIFIED,
    ) -> None:
        if max_unverified < 1:
            raise ValueError(f"max_unverified must be at least 1, not {max_unverified}")
        self.store = store
        self.signers = signers
        self.expiries = expiries or Expiries()
        self.clock = clock
        self.max_unverified = max_unverified
        # delegated role versions this repository kept itself (``publish_delegated``), not
        # yet in a snapshot: with the verified snapshot, what the registry accepted
        self._accepted: dict[str, int] = {}

    # -- python-tuf Repository hooks ----------------------------------------------------

    def open(self, role: str) -> Metadata[Any]:
        """The newest stored version of ``role`` that verifies: root through its chain of
        versions, top-level targets against root, a delegated role against top-level
        targets' delegation (``verified``); snapshot and timestamp as stored (the registry
        signs them itself). A blank role when none is stored yet."""
        if role in (Root.type, Targets.type):
            md = self.verified(role)
            if md is not None:
                return md
        elif role not in TOP_LEVEL:
            md = self._delegated_base(role)
            if md is not None:
                return md
        else:
            md = self.current(role)
            if md is not None:
                return md
        if role == Root.type:
            raise self._no_root()
        blank = {Snapshot.type: Snapshot, Timestamp.type: Timestamp}.get(role, Targets)
        return Metadata(blank())

    def verified(self, role: str) -> Metadata[Any] | None:
        """The newest stored version of ``role`` whose signatures meet its delegation, or
        None when the store holds none. Rows are only a database writer's word: a newer
        version that does not verify (a forgery) is passed over, and when none of the
        newest ``max_unverified`` does, ``UnsignedMetadataError`` names the role."""
        latest = self.store.latest_versions().get(role)
        if latest is None:
            return None
        if role == Root.type:
            return self._root_chain(latest)
        delegators = self._delegators(role)
        if not delegators:  # no longer delegated: nobody resolves through it
            return self._newest_usable(role, latest)
        if role != Targets.type:
            # a delegated role: never newer than the registry accepted (its own publish,
            # or the version its verified snapshot lists): a version a database writer
            # stored, even one its delegation's keys signed, is not the registry's
            accepted = self.accepted_version(role)
            if accepted is None:
                return None
            latest = min(latest, accepted)
        for delegator in delegators:  # the current root first: an older one is a fallback
            for version in range(latest, max(0, latest - self.max_unverified), -1):
                data = self.store.read(role, version)
                if data is not None and _verifies(role, data, version, delegator):
                    return Metadata.from_bytes(data)
        raise UnsignedMetadataError(
            f"role {role}: none of its newest stored versions (up to {latest}) is signed by "
            "its delegation's threshold: the metadata store was written around the registry"
        )

    def _newest_usable(self, role: str, latest: int) -> Metadata[Any] | None:
        """The newest of ``role``'s newest ``max_unverified`` rows that parses as its own
        version (``row_refusal``), for a role nothing delegates; None when none does: an
        unparsable row is passed over, never a reason to refuse every snapshot."""
        for version in range(latest, max(0, latest - self.max_unverified), -1):
            data = self.store.read(role, version)
            if data is not None and row_refusal(role, version, data) is None:
                return Metadata.from_bytes(data)
        return None

    def _delegated_base(self, role: str) -> Metadata[Any] | None:
        """What the next version of delegated ``role`` is made from: its newest version that
        verifies under the *current* delegation (``verified``), which is also the version
        the snapshot lists and a worker reads. A version that verified only thanks to a key
        since revoked (or a threshold since raised) is never the base: what it alone signed
        is dropped, not signed again by the others. None: no stored version verifies (every
        one checked), so the next version starts blank. When none of the newest
        ``max_unverified`` does and older ones were not checked, ``UnsignedMetadataError``
        names the role (``proposals.propose_changes`` answers it as ``RoleUnverified``)."""
        latest = self.store.latest_versions().get(role, 0)
        try:
            return self.verified(role)
        except UnsignedMetadataError:
            if latest > self.max_unverified:
                raise
            return None

    def _delegators(self, role: str) -> list[bytes]:
        """The verified metadata that delegates ``role``, as bytes: for top-level targets
        every root of the chain, newest first (the targets signed before a rotation of its
        keys is still what the next one is made from); for a delegated role, top-level
        targets, or none when it does not delegate ``role``."""
        if role == Targets.type:
            roots = self.root_chain()
            if not roots:
                raise self._no_root()
            return list(reversed(roots))
        targets = self.open(Targets.type)
        roles = targets.signed.delegations.roles if targets.signed.delegations else None
        return [targets.to_bytes()] if roles and role in roles else []

    def _root_chain(self, latest: int) -> Metadata[Root]:
        """The newest root reached from version 1 through verified rotations."""
        chain = self.root_chain()
        if not chain:
            raise self._no_root()
        return Metadata[Root].from_bytes(chain[-1])

    def _no_root(self) -> Exception:
        """Why there is no verified root: none stored yet (ValueError, misuse), or a
        stored version 1 the registry refuses (``MetadataRowRefused``: which row, why)."""
        data = self.store.read(Root.type, 1)
        if data is None:
            return ValueError("the repository has no root yet: run `modelward trust init`")
        return row_refusal(Root.type, 1, data) or MetadataRowRefused(
            Root.type, 1, "not signed by the threshold of its own root keys"
        )

    def root_chain(self) -> tuple[bytes, ...]:
        """The stored root versions 1..N that verify as a chain of rotations (TUF 5.3.4),
        oldest first. A stored version after N that does not verify (a database writer's
        forgery, an unparsable row) is passed over, never a reason to refuse everything:
        the next root installed takes its place (``install_root``)."""
        latest = self.store.latest_versions().get(Root.type, 0)
        chain: list[bytes] = []
        for version in range(1, latest + 1):
            data = self.store.read(Root.type, version)
            if data is None or not _root_step(chain[-1] if chain else None, data, version):
                break
            chain.append(data)
        return tuple(chain)

    def current(self, role: str) -> Metadata[Any] | None:
        """The newest stored ``snapshot`` or ``timestamp`` signed by that role's keys in a
        root of the verified chain; a newer row that does not parse or verify (garbage, a
        forgery) is passed over, and the next version the registry signs goes over it."""
        data, version = self.current_row(role)
        return _parsed(data) if data is not None and version is not None else None

    def current_row(self, role: str) -> tuple[bytes | None, int | None]:
        """(bytes, version) of ``current(role)``, or (None, None) when none verifies."""
        latest = self.store.latest_versions().get(role)
        if latest is None:
            return None, None
        roots = tuple(reversed(self.root_chain()))
        for version in range(latest, max(0, latest - self.max_unverified), -1):
            data = self.store.read(role, version)
            if data is not None and _signed_by_root(role, data, roots):
                return data, version
        return None, None

    def accepted_version(self, role: str) -> int | None:
        """The newest version of delegated ``role`` the registry accepted: the one it kept
        itself in this transaction, else the one its newest verified snapshot lists."""
        if role in self._accepted:
            return self._accepted[role]
        return self.snapshot_listing().get(f"{role}.json")

    def snapshot_listing(self) -> dict[str, int]:
        """What the newest stored snapshot that verifies lists (``ROLE.json`` -> version):
        the registry's own record of what it accepted (only it holds the snapshot key)."""
        latest = self.store.latest_versions().get(Snapshot.type)
        if latest is None:
            return {}
        roots = tuple(reversed(self.root_chain()))
        for version in range(latest, max(0, latest - self.max_unverified), -1):
            data = self.store.read(Snapshot.type, version)
            listing = _snapshot_listing(data, version, roots) if data is not None else None
            if listing is not None:
                return dict(listing)
        return {}

    def close(self, role: str, md: Metadata[Any]) -> None:
        signers = self.signers.get(role) if role in TOP_LEVEL else None
        if not signers:
            raise ValueError(f"the registry holds no key for role {role}: it is signed offline")
        md.signed.version = self.store.latest_versions().get(role, 0) + 1
        md.signed.expires = self.clock() + self.expiries.of(role)
        md.signatures.clear()
        for signer in signers:
            md.sign(signer, append=True)
        self.store.write(role, md.signed.version, md.to_bytes())

    @property
    def targets_infos(self) -> dict[str, MetaFile]:
        """Every targets role at its newest *verified* version (a snapshot never names a
        forged row); a delegated role with no verified version yet is left out. The newest
        rows are read in one go; only a role whose newest row does not verify is walked."""
        rows = self.store.latest_rows()
        infos = {}
        targets_md = self.open(Targets.type)
        if Targets.type in rows:
            infos[f"{Targets.type}.json"] = self._meta(Targets.type, targets_md.signed.version)
        delegated = targets_md.signed.delegations
        named = set(delegated.roles or {}) if delegated is not None else set()
        seal = targets_md.to_bytes()
        listing = self.snapshot_listing()
        for role, (version, data) in rows.items():
            if role in TOP_LEVEL:
                continue
            if self._accepted.get(role, listing.get(f"{role}.json")) != version:
                # a newer row than the registry accepted, or none accepted: walk down
                try:
                    md = self.verified(role)
                except UnsignedMetadataError:
                    continue
                if md is not None:
                    infos[f"{role}.json"] = self._meta(role, md.signed.version)
                continue
            if role in named and _verifies(role, data, version, seal):
                infos[f"{role}.json"] = meta_file(version, data)
                continue
            try:
                md = self.verified(role)
            except UnsignedMetadataError:
                continue
            if md is not None:
                infos[f"{role}.json"] = self._meta(role, md.signed.version)
        return infos

    def _meta(self, role: str, version: int) -> MetaFile:
        """``meta_file`` of the stored ``role`` at ``version`` (just read and verified)."""
        data = self.store.read(role, version)
        return MetaFile(version) if data is None else meta_file(version, data)

    @property
    def snapshot_info(self) -> MetaFile:
        """The snapshot a new timestamp names: the newest one signed by root's key, never
        a newer row that does not verify; with its length and sha256 (``meta_file``)."""
        data, version = self.current_row(Snapshot.type)
        return meta_file(version, data) if data is not None and version else MetaFile(0)

    # -- root ------------------------------------------------------------------------------

    def install_root(self, data: bytes) -> Metadata[Root]:
        """Keep a signed root: version 1 signed by itself, or the next version signed by
        the current root's threshold and its own (TUF 5.3.4). Raises UnsignedMetadataError.
        """
        md = Metadata[Root].from_bytes(data)
        current = self.verified(Root.type) if self.root_chain() else None
        if current is None:
            if md.signed.version != 1:
                raise ValueError(f"the first root must be version 1, not {md.signed.version}")
            md.signed.verify_delegate(Root.type, md.signed_bytes, md.signatures)
        else:
            trusted = current.signed
            if md.signed.version != trusted.version + 1:
                raise StaleProposal(Root.type, md.signed.version, trusted.version)
            trusted.verify_delegate(Root.type, md.signed_bytes, md.signatures)
            md.signed.verify_delegate(Root.type, md.signed_bytes, md.signatures)
        # a stored row at this version did not verify (root_chain stopped before it): a
        # forgery or garbage, which the verified root takes the place of
        self.store.write(Root.type, md.signed.version, data, replace=True)
        return md

    # -- delegated roles ---------------------------------------------------------------

    def propose(self, role: str, change: Callable[[Targets], None]) -> Metadata[Targets]:
        """The next version of delegated ``role`` with ``change`` applied, unsigned, made
        from ``_delegated_base`` (blank when nothing verifies). Raises UnsignedMetadataError
        when the role's newest ``max_unverified`` versions do not verify."""
        if role in TOP_LEVEL:
            raise ValueError(f"{role} is a top-level role, not a delegated one")
        md = cast(Metadata[Targets], self.open(role))
        md.signed.version = self.store.latest_versions().get(role, 0) + 1
        md.signed.expires = self.clock() + self.expiries.delegated
        md.signatures.clear()
        change(md.signed)
        return md

    def publish_delegated(
        self,
        role: str,
        md: Metadata[Targets],
        *,
        delegations: Delegations | None = None,
    ) -> None:
        """Keep a signed version of delegated ``role`` and publish a new snapshot.

        Checks, in order: (1) it is the next version of the role; (2) it has not expired;
        (3) its signatures meet the threshold of the delegation that top-level targets makes
        to ``role``: the current targets, or the next one when ``delegations`` (the new
        delegations, for a role delegated only once it exists) is given. Then stores the
        next targets if any, the role, a new snapshot and a new timestamp.
        """
        current = self.store.latest_versions().get(role, 0)
        # (1) a proposal made from an older version is stale (compare-and-swap)
        if md.signed.version != current + 1:
            raise StaleProposal(role, md.signed.version, current)
        # (2) never publish what a worker would refuse as expired
        if md.signed.is_expired(self.clock()):
            raise ValueError(f"role {role}: the proposal expired at {md.signed.expires}")
        # (3) the delegation's keys and threshold, as a worker checks them
        delegator = self.targets()
        if delegations is not None:
            delegator = copy.deepcopy(delegator)
            delegator.delegations = delegations
        if delegator.delegations is None or role not in (delegator.delegations.roles or {}):
            raise UnsignedMetadataError(f"role {role} is not delegated by targets")
        delegator.verify_delegate(role, md.signed_bytes, md.signatures)
        if delegations is not None:
            with self.edit_targets() as targets:
                targets.delegations = delegations
        self.store.write(role, md.signed.version, md.to_bytes())
        self._accepted[role] = md.signed.version
        self.publish()

    def publish_targets(self, md: Metadata[Targets]) -> None:
        """Keep a new top-level targets signed offline by the admins, then a new snapshot.

        Checks, in order: (1) it is the next version; (2) it has not expired; (3) its
        signatures meet root's threshold for targets (python-tuf, as a worker checks it).
        """
        current = self.store.latest_versions().get(Targets.type, 0)
        if md.signed.version != current + 1:
            raise StaleProposal(Targets.type, md.signed.version, current)
        if md.signed.is_expired(self.clock()):
            raise ValueError(f"targets: the proposal expired at {md.signed.expires}")
        self.root().verify_delegate(Targets.type, md.signed_bytes, md.signatures)
        self.store.write(Targets.type, md.signed.version, md.to_bytes())
        self.publish()

    def next_targets(self, delegations: Delegations) -> Metadata[Targets]:
        """The next version of top-level targets with ``delegations``, unsigned (for the
        admins to sign offline when the registry holds no targets key)."""
        md = cast(Metadata[Targets], self.open(Targets.type))
        md.signed.version = self.store.latest_versions().get(Targets.type, 0) + 1
        md.signed.expires = self.clock() + self.expiries.targets
        md.signed.delegations = delegations
        md.signatures.clear()
        return md

    # -- snapshot and timestamp --------------------------------------------------------

    def publish(self) -> None:
        """A new snapshot if any targets role changed, and a new timestamp if it did."""
        self.do_snapshot()
        self.do_timestamp()

    def do_snapshot(self, force: bool = False) -> tuple[bool, dict[str, MetaFile]]:
        """python-tuf's ``do_snapshot``, with one more reason for a new snapshot: a role
        listed at its version with other bytes, or without its length and sha256 (a snapshot
        signed before they were listed, ``meta_file``). That version number was used again
        (a restore, a deleted row): the listing follows the bytes the registry accepted, so
        a worker that cached the old ones refetches the new. Raises ValueError on a role
        listed at a lower version than the snapshot lists (a rollback), as python-tuf's."""
        update_version = force
        removed: dict[str, MetaFile] = {}
        snapshot_md = self.open(Snapshot.type)
        try:
            self.root().verify_delegate(
                Snapshot.type, snapshot_md.signed_bytes, snapshot_md.signatures
            )
        except UnsignedMetadataError:
            update_version = True
        with self.edit_snapshot() as snapshot:
            for name, new_meta in self.targets_infos.items():
                old_meta = snapshot.meta.get(name)
                if old_meta == new_meta:
                    continue
                if old_meta is not None:
                    if new_meta.version < old_meta.version:
                        raise ValueError(f"{name} version rollback")
                    removed[name] = old_meta
                update_version = True
                snapshot.meta[name] = copy.deepcopy(new_meta)
            if not update_version:
                raise AbortEdit("Skip snapshot: no targets role changed")
        return update_version, removed

    def refresh(self) -> bool:
        """Re-sign snapshot and timestamp past half their lifetime; True if anything was."""
        now = self.clock()
        changed = False
        for role, expires_in in (
            (Snapshot.type, self.expiries.snapshot),
            (Timestamp.type, self.expiries.timestamp),
        ):
            # the newest row that verifies; a newer one that does not (garbage, a forgery)
            # is signed over now, never left to freeze what workers see
            current, version = self.current_row(role)
            newest = self.store.latest_versions().get(role)
            md = _parsed(current) if current is not None else None
            expires = md.signed.expires if md is not None else now
            if expires - now <= expires_in / 2 or version != newest:
                if role == Snapshot.type:
                    self.do_snapshot(force=True)
                self.do_timestamp(force=True)
                changed = True
        return changed
