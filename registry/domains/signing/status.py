"""``trust status``: every role's version and expiry, what is short of its threshold, how
re-signing went (docs/tuf.md#status)."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Metadata, Root

from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.signing.online import DB_WRITER_OFFLINE, DB_WRITER_ONLINE, trust_of
from modelward.registry.domains.signing.tuf.bootstrap import (
    refresh_health,
)
from modelward.registry.domains.signing.tuf.keys import (
    ALIAS_KEY,
    ONLINE_ROLES,
)
from modelward.registry.domains.signing.tuf.repository import (
    MetadataRepository,
    MetadataRowRefused,
    row_refusal,
)
from modelward.registry.domains.signing.tuf.rotation import (
    short_of_threshold,
)
from modelward.registry.domains.signing.tuf.store import SessionStore, beyond_refusal
from modelward.registry.domains.signing.tuf.tables import TufProposal
from modelward.registry.errors import RegistryError
from modelward.registry.kit.logs import log_failure

log = logging.getLogger("modelward.registry")


def status(session: Session, state: AppState) -> dict[str, Any]:
    """Every role's latest version and expiry, which expire soon, the keys held online, every
    delegated role short of its threshold now (``short_of_threshold``: role, threshold,
    valid_signers, keys, version, decides; ``signing.tuf.rotation``), any stored row refused
    (``MetadataRowRefused``: it does not parse, or snapshot/timestamp not
    signed by root's key), and how this process's re-signing went (``refresh``). Reads
    only: it answers even while a key file is unusable (what ``refresh`` then reports)."""
    store = SessionStore(session)
    repo = MetadataRepository(store, {}, expiries=trust_of(state.settings).expiries)
    now = repo.clock()
    chain = repo.root_chain()

    def shown(role: str, version: int, data: bytes) -> dict[str, Any]:
        md: Metadata[Any] = Metadata.from_bytes(data)
        left = md.signed.expires - now
        return {
            "role": role,
            "version": version,
            "expires": iso(md.signed.expires),
            "expires_soon": left <= repo.expiries.of(role) / 4,
            "expired": left.total_seconds() <= 0,
        }

    roles = []
    for role, version in sorted(repo.store.latest_versions().items()):
        data = repo.store.read(role, version)
        if data is None:  # pragma: no cover - listed versions exist
            continue
        refused = row_refusal(role, version, data)
        current: tuple[bytes | None, int | None] = (data, version)
        if role in ONLINE_ROLES:
            current = repo.current_row(role)
            if refused is None and current[1] != version:
                refused = MetadataRowRefused(role, version, "not signed by root's key for it")
        elif role == Root.type:
            current = (chain[-1], len(chain)) if chain else (None, None)
            if refused is None and version > len(chain):
                refused = MetadataRowRefused(role, version, "not signed as a rotation of the root")
        if refused is None:
            roles.append(shown(role, version, data))
            continue
        # the version the registry builds on and serves, then the newer row it refuses
        if role in (*ONLINE_ROLES, Root.type) and current[0] is not None and current[1]:
            roles.append(shown(role, current[1], current[0]))
        roles.append(
            {
                "role": role,
                "version": version,
                "expires": None,
                "expires_soon": False,
                "expired": False,
                "refused": str(refused),
            }
        )
    for role, version in sorted(store.beyond_versions().items()):  # no version can follow
        refusal = str(beyond_refusal(role, version))
        roles.append({"role": role, "version": version, "expires": None, "refused": refusal})
        roles[-1].update(expires_soon=False, expired=False)
    keys = trust_of(state.settings).keys
    held = [r for r in ("root", "targets", "snapshot", "timestamp", ALIAS_KEY) if keys.has(r)]
    pending = session.scalar(
        select(func.count()).select_from(TufProposal).where(TufProposal.state == "pending")
    )
    online_targets = "targets" in held
    health = refresh_health()
    try:
        short = [role.as_json() for role in short_of_threshold(repo)]
    except (RepositoryError, RegistryError) as exc:  # a refused row: named in ``roles``
        log_failure(log, "tuf_status_short_unknown", exc)
        short = []
    return {
        "roles": roles,
        "short_of_threshold": short,
        "online_keys": held,
        "embedded": "root" in held,
        "targets_key": "online" if online_targets else "offline",
        "protects_against_db_writer": True,
        "db_writer": DB_WRITER_ONLINE if online_targets else DB_WRITER_OFFLINE,
        "pending_proposals": int(pending or 0),
        "refresh": {
            "failing": health.failing,
            "failures": health.failures,
            "last_error": health.last_error,
            "last_failure": iso(health.last_failure),
            "last_success": iso(health.last_success),
        },
    }
