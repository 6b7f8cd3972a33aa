"""The signed state as the TUF roles sign it (docs/tuf.md)."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

from sqlalchemy.orm import Session
from tuf.api.metadata import Root

from modelward.registry.domains.signing.tuf.repository import (
    MetadataRepository,
)
from modelward.registry.domains.signing.tuf.store import SessionStore

_SIGNED_CACHE: OrderedDict[tuple[Any, ...], dict[str, str]] = OrderedDict()
_SIGNED_CACHE_SIZE = 1024
_SIGNED_LOCK = threading.Lock()


def signed_aliases(session: Session, repo_name: str) -> dict[str, str]:
    """alias -> digest as the repository's TUF roles sign them: each role at its newest
    version that verifies against its delegation (a forged row signs nothing).

    Kept per process by the exact bytes involved (top-level targets and the repository's
    newest role rows), so ``alias get`` (a hot path) costs one query until something
    changes."""
    from modelward.attest.tuf import protected_role

    prefix = protected_role(repo_name, "")
    store = SessionStore(session)
    rows = store.latest_rows(prefix)
    seal = hashlib.sha256()
    for role, (version, data) in sorted(rows.items()):
        seal.update(f"{role}\0{version}\0{len(data)}\0".encode())
        seal.update(data)
    key = (repo_name, seal.digest())
    with _SIGNED_LOCK:
        if key in _SIGNED_CACHE:
            _SIGNED_CACHE.move_to_end(key)
            return dict(_SIGNED_CACHE[key])
    roles = sorted(r for r in rows if r.startswith(prefix))
    signed = _signed_aliases(MetadataRepository(store, {}), repo_name, roles)
    with _SIGNED_LOCK:
        _SIGNED_CACHE[key] = signed
        while len(_SIGNED_CACHE) > _SIGNED_CACHE_SIZE:
            _SIGNED_CACHE.popitem(last=False)
    return dict(signed)


def _signed_aliases(repo: MetadataRepository, repo_name: str, roles: list[str]) -> dict[str, str]:
    from tuf.api.exceptions import UnsignedMetadataError

    head = f"{repo_name}/aliases/"
    signed: dict[str, str] = {}
    if Root.type not in repo.store.latest_versions():
        return signed
    delegations = repo.targets().delegations
    if delegations is None:
        return signed
    for role in roles:
        try:
            md = repo.verified(role)
        except UnsignedMetadataError:
            continue
        for path, target in (md.signed.targets if md is not None else {}).items():
            # an alias counts only in the role a worker's lookup reaches first
            deciding = next((name for name, _ in delegations.get_roles_for_target(path)), None)
            if path.startswith(head) and deciding == role:
                signed[path[len(head) :]] = "sha256:" + target.hashes.get("sha256", "")
    return signed
