"""The registry's online TUF keys and its repository inside a transaction (docs/tuf.md#keys)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState
from modelward.registry.domains.signing.tuf.bootstrap import (
    bootstrap_embedded,
    open_repository,
)
from modelward.registry.domains.signing.tuf.bootstrap import row_seals as tuf_row_seals
from modelward.registry.domains.signing.tuf.keys import (
    ONLINE_ROLES,
    OnlineKeys,
    TufKeyUnavailable,
    tuf_keys,
)
from modelward.registry.domains.signing.tuf.repository import (
    Expiries,
    MetadataRepository,
)
from modelward.registry.domains.signing.tuf.seals import RowSeals
from modelward.registry.settings import Settings

# What the registry says about someone who can write its database (docs/tuf.md#keys), in
# ``serve``'s start-up and ``trust status``.
DB_WRITER_ONLINE = (
    "the TUF targets key is ONLINE (the embedded default): the registry signs the "
    "delegations itself, from database rows it sealed with its row key (principals, "
    "signing_keys, publishers, policies), so a database writer cannot add a key that signs "
    "aliases; anyone who can read the registry's keys directory can sign every alias "
    "decision until `modelward trust init` takes the root and targets keys offline "
    "(docs/tuf.md#keys)"
)
DB_WRITER_OFFLINE = (
    "the TUF targets key is offline: a delegation change (a key, a reviewer, a publisher, "
    "a policy) waits as a targets proposal until the admins sign it (`modelward trust "
    "sign`), and a row the registry did not seal counts for nothing, so a database writer "
    "cannot add a key to any role (docs/tuf.md#keys)"
)


@dataclass(frozen=True)
class Trust:
    """The registry's TUF keys and lifetimes (from the settings)."""

    keys: OnlineKeys
    expiries: Expiries


def trust_of(settings: Settings) -> Trust:
    return Trust(
        keys=tuf_keys(settings),
        expiries=Expiries(
            timestamp=timedelta(seconds=settings.tuf_timestamp_expiry_seconds),
            snapshot=timedelta(seconds=settings.tuf_snapshot_expiry_seconds),
        ),
    )


def repository(session: Session, state: AppState) -> MetadataRepository:
    """The TUF repository in ``session``'s transaction. Raises TufKeyUnavailable (503) when
    the online snapshot and timestamp keys are missing: a replica that does not share the
    first one's ``tuf_keys_dir`` must sign nothing (docs/tuf.md#serving)."""
    trust = trust_of(state.settings)
    missing = [role for role in ONLINE_ROLES if not trust.keys.has(role)]
    if missing:
        raise TufKeyUnavailable(
            f"the TUF {' and '.join(missing)} keys are not in {trust.keys.directory}: every "
            "replica of a registry must share one tuf_keys_dir (docs/tuf.md#serving)"
        )
    return open_repository(session, trust.keys, trust.expiries)


def ensure_root(state: AppState) -> bool:
    """Publish the embedded root if the database has none (True if this call did), and
    make the row seal key if the registry has none (``row_seals``)."""
    trust = trust_of(state.settings)
    try:
        with state.db.write() as session:
            made = bootstrap_embedded(
                session, trust.keys, state.default_policy_yaml, trust.expiries
            )
    except IntegrityError:  # another replica bootstrapped first: theirs is the root
        made = False
    row_seals(state)
    return made


def row_seals(state: AppState) -> RowSeals:
    """The registry's row seals (``registry.domains.signing.tuf.bootstrap.row_seals``)."""
    return tuf_row_seals(state.db, trust_of(state.settings).keys)
