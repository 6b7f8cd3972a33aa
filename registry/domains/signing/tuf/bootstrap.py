"""The registry's TUF repository inside a database transaction (docs/tuf.md).

``open_repository`` binds python-tuf's repository to the caller's session, so a new role
version, its snapshot and its timestamp commit together with the decision they record.

``bootstrap_embedded`` is the embedded default: with no root in the database, the registry
creates root, targets, snapshot and timestamp keys online under its data directory and
publishes root version 1 itself. ``serve`` says so loudly; the proper ceremony keeps root and
targets keys offline (``modelward trust init``).

``sync_delegations`` re-makes the top-level targets role when repositories, their policies,
publishers or keys changed. With the targets key online (embedded default) it publishes at
once; otherwise it leaves a pending targets proposal for the admins to sign offline
(``modelward trust sign``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from sqlalchemy.orm import Session
from tuf.api.metadata import Targets

from modelward.registry.db import Database
from modelward.registry.domains.signing.tuf.keys import (
    ALIAS_KEY,
    EMBEDDED_ROLES,
    ONLINE_ROLES,
    ROW_KEY,
    OnlineKeys,
)
from modelward.registry.domains.signing.tuf.lost_state import refuse_if_signed_state_lost
from modelward.registry.domains.signing.tuf.proposals import propose_targets
from modelward.registry.domains.signing.tuf.repository import Expiries, MetadataRepository, new_root
from modelward.registry.domains.signing.tuf.rotation import wanted_delegations
from modelward.registry.domains.signing.tuf.seals import RowSeals, seal_unsealed_rows
from modelward.registry.domains.signing.tuf.store import SessionStore
from modelward.registry.domains.signing.tuf.tables import TufProposal

__all__ = [
    "RefreshHealth",
    "bootstrap_embedded",
    "delegated_as_wanted",
    "ensure_row_seals",
    "open_repository",
    "refresh_health",
    "row_seals",
    "sync_delegations",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefreshHealth:
    """How this process's re-signing of snapshot and timestamp went (``trust status``,
    ``/metrics``): a failure is reported there and in the log, never silent."""

    failures: int = 0  # since the process started
    failing: bool = False  # the last attempt failed
    last_error: str | None = None
    last_failure: datetime | None = None
    last_success: datetime | None = None


_HEALTH = RefreshHealth()
_HEALTH_LOCK = threading.Lock()


def refresh_health(*, error: BaseException | None = None, record: bool = False) -> RefreshHealth:
    """This process's ``RefreshHealth``; with ``record``, first note an attempt that failed
    with ``error`` (or succeeded when None)."""
    global _HEALTH  # noqa: PLW0603 - one record per process, guarded by the lock
    with _HEALTH_LOCK:
        if record:
            now = datetime.now(UTC)
            if error is None:
                _HEALTH = replace(_HEALTH, failing=False, last_success=now)
            else:
                _HEALTH = replace(
                    _HEALTH,
                    failures=_HEALTH.failures + 1,
                    failing=True,
                    last_error=f"{type(error).__name__}: {error}"[:500],
                    last_failure=now,
                )
        return _HEALTH


def open_repository(
    session: Session, keys: OnlineKeys, expiries: Expiries | None = None
) -> MetadataRepository:
    """The TUF repository in ``session``'s transaction, signing with the keys it holds."""
    return MetadataRepository(SessionStore(session), keys.signers(), expiries=expiries)


def ensure_row_seals(session: Session, keys: OnlineKeys) -> bool:
    """Make the registry's row seal key if it has none, and seal, in ``session``, every row
    that exists then (trust on first use: the embedded bootstrap, or the first start after
    the upgrade that added seals). True if this call made the key. From then on only rows
    the registry writes are sealed (registry.domains.signing.tuf.seals)."""
    if keys.has(ROW_KEY):
        return False
    if not keys.create_row_key():  # another process made it first: it seals
        return False
    seal_unsealed_rows(session, keys.row_seals())
    return True


def row_seals(db: Database, keys: OnlineKeys) -> RowSeals:
    """The registry's row seals, for a row it is about to write. The first call of a
    registry that has no row key yet (the first start after the upgrade that added seals)
    makes it and seals the rows that exist then, in a transaction of its own."""
    if not keys.has(ROW_KEY):
        with db.write() as session:
            ensure_row_seals(session, keys)
    return keys.row_seals()


def bootstrap_embedded(
    session: Session,
    keys: OnlineKeys,
    default_policy_yaml: str | None,
    expiries: Expiries | None = None,
) -> bool:
    """Publish root v1 with online keys if the database has no root; True if it did.

    Raises SignedStateError instead when the audit log shows the registry published TUF
    metadata before (a downgrade dropped it): workers pinned to that root would not follow
    a new version 1 (registry.signed_state, docs/operations.md#downgrade)."""
    if SessionStore(session).read("root") is not None:
        return False
    refuse_if_signed_state_lost(session)
    for role in (*EMBEDDED_ROLES, *ONLINE_ROLES, ALIAS_KEY):
        keys.create(role)
    # the first start is the moment of trust on first use: whichever process makes the
    # root seals the rows there are, in the root's own transaction
    keys.create_row_key()
    seal_unsealed_rows(session, keys.row_seals())
    repo = open_repository(session, keys, expiries)
    signers = repo.signers
    expiries = repo.expiries
    root = new_root(
        root_keys=[signers["root"][0].public_key],
        root_threshold=1,
        targets_keys=[signers["targets"][0].public_key],
        targets_threshold=1,
        snapshot_key=signers["snapshot"][0].public_key,
        timestamp_key=signers["timestamp"][0].public_key,
        expires=repo.clock() + expiries.root,
    )
    root.sign(signers["root"][0], append=True)
    repo.install_root(root.to_bytes())
    sync_delegations(session, repo, keys, default_policy_yaml, proposer_id=None, force=True)
    log.warning(
        "TUF: created root version 1 with ONLINE root and targets keys in %s (the embedded "
        "default). Anyone who can read that directory can sign alias decisions: for "
        "production run `modelward trust init` with offline keys (docs/tuf.md#keys).",
        keys.directory,
    )
    return True


def sync_delegations(
    session: Session,
    repo: MetadataRepository,
    keys: OnlineKeys,
    default_policy_yaml: str | None,
    *,
    proposer_id: int | None,
    force: bool = False,
) -> bool | TufProposal:
    """Bring top-level targets' delegations in line with the database.

    Returns False when they already are; True when the registry signed the new targets
    itself (its targets key is online); else the pending targets proposal the admins sign
    offline (None as ``proposer_id`` then means the registry's own bootstrap admin)."""
    versions = repo.store.latest_versions()
    wanted = wanted_delegations(session, repo, keys, default_policy_yaml)
    current: Targets | None = repo.targets() if Targets.type in versions else None
    if (
        not force
        and current is not None
        and current.delegations is not None
        and (current.delegations.to_dict() == wanted.to_dict())
    ):
        return False
    if not repo.signers.get(Targets.type):
        return propose_targets(session, repo, wanted, proposer_id=proposer_id or _admin(session))
    with repo.edit_targets() as targets:
        targets.delegations = wanted
    repo.publish()
    return True


def delegated_as_wanted(
    session: Session,
    repo: MetadataRepository,
    keys: OnlineKeys,
    default_policy_yaml: str | None,
    repo_name: str,
) -> bool:
    """Whether top-level targets already delegates ``repo_name``'s aliases (and the
    quarantine) exactly as the database says: the cheap check an alias move makes before
    it would re-make every repository's delegations (``sync_delegations``)."""
    if Targets.type not in repo.store.latest_versions():
        return False
    current = repo.targets().delegations
    if current is None or current.roles is None:
        return False
    wanted = wanted_delegations(session, repo, keys, default_policy_yaml, only=repo_name)
    for name, role in (wanted.roles or {}).items():
        have = current.roles.get(name)
        if have is None or have.to_dict() != role.to_dict():
            return False
    return all(
        keyid in (current.keys or {}) and current.keys[keyid].to_dict() == key.to_dict()
        for keyid, key in (wanted.keys or {}).items()
    )


def _admin(session: Session) -> int:
    from sqlalchemy import select

    from modelward.registry.models import Principal

    first = session.scalar(
        select(Principal.id).where(Principal.role == "admin").order_by(Principal.id).limit(1)
    )
    if first is None:
        raise ValueError("no admin principal to make the targets proposal in the name of")
    return first
