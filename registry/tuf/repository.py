"""The registry's TUF repository: new versions of roles, verified before they are kept.

Built on python-tuf's Metadata API and its ``tuf.repository.Repository`` base (which
supplies ``do_snapshot``/``do_timestamp``). Which role holds which decision is
``registry.tuf.roles``; where the bytes are kept is a ``MetadataStore``.

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
``StaleProposal`` (the role moved on since the proposal was made), ``ValueError`` for
misuse (a role the registry cannot sign).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
from tuf.repository import Repository

from modelward.registry.tuf.store import MetadataStore

__all__ = ["Expiries", "MetadataRepository", "StaleProposal", "new_root"]

TOP_LEVEL = (Root.type, Targets.type, Snapshot.type, Timestamp.type)


class StaleProposal(Exception):  # noqa: N818 - a domain name, like python-tuf's errors
    """A proposed version is not the next version of its role any more."""

    def __init__(self, role: str, proposed: int, current: int) -> None:
        super().__init__(
            f"role {role}: the proposal is version {proposed}, but the role is at version "
            f"{current} now; propose again from the current version"
        )
        self.role, self.proposed, self.current = role, proposed, current


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
    """

    def __init__(
        self,
        store: MetadataStore,
        signers: Mapping[str, Sequence[Signer]],
        *,
        expiries: Expiries | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.store = store
        self.signers = signers
        self.expiries = expiries or Expiries()
        self.clock = clock

    # -- python-tuf Repository hooks ----------------------------------------------------

    def open(self, role: str) -> Metadata[Any]:
        data = self.store.read(role)
        if data is not None:
            return Metadata.from_bytes(data)
        if role == Root.type:
            raise ValueError("the repository has no root yet: run `modelward trust init`")
        blank = {Snapshot.type: Snapshot, Timestamp.type: Timestamp}.get(role, Targets)
        return Metadata(blank())

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
        return {
            f"{role}.json": MetaFile(version)
            for role, version in self.store.latest_versions().items()
            if role not in (Root.type, Snapshot.type, Timestamp.type)
        }

    @property
    def snapshot_info(self) -> MetaFile:
        return MetaFile(self.store.latest_versions().get(Snapshot.type, 0))

    # -- root ------------------------------------------------------------------------------

    def install_root(self, data: bytes) -> Metadata[Root]:
        """Keep a signed root: version 1 signed by itself, or the next version signed by
        the current root's threshold and its own (TUF 5.3.4). Raises UnsignedMetadataError.
        """
        md = Metadata[Root].from_bytes(data)
        current = self.store.read(Root.type)
        if current is None:
            if md.signed.version != 1:
                raise ValueError(f"the first root must be version 1, not {md.signed.version}")
            md.signed.verify_delegate(Root.type, md.signed_bytes, md.signatures)
        else:
            trusted = Metadata[Root].from_bytes(current).signed
            if md.signed.version != trusted.version + 1:
                raise StaleProposal(Root.type, md.signed.version, trusted.version)
            trusted.verify_delegate(Root.type, md.signed_bytes, md.signatures)
            md.signed.verify_delegate(Root.type, md.signed_bytes, md.signatures)
        self.store.write(Root.type, md.signed.version, data)
        return md

    # -- delegated roles ---------------------------------------------------------------

    def propose(self, role: str, change: Callable[[Targets], None]) -> Metadata[Targets]:
        """The next version of delegated ``role`` with ``change`` applied, unsigned."""
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
        self.publish()

    # -- snapshot and timestamp --------------------------------------------------------

    def publish(self) -> None:
        """A new snapshot if any targets role changed, and a new timestamp if it did."""
        self.do_snapshot()
        self.do_timestamp()

    def refresh(self) -> bool:
        """Re-sign snapshot and timestamp past half their lifetime; True if anything was."""
        now = self.clock()
        changed = False
        for role, expires_in in (
            (Snapshot.type, self.expiries.snapshot),
            (Timestamp.type, self.expiries.timestamp),
        ):
            data = self.store.read(role)
            expires = Metadata.from_bytes(data).signed.expires if data else now
            if expires - now <= expires_in / 2:
                if role == Snapshot.type:
                    self.do_snapshot(force=True)
                self.do_timestamp(force=True)
                changed = True
        return changed
