"""Who vouches for a fact the console shows (docs/console.md#who-vouches): the TUF metadata
the registry verified (``signed``: by whom, which role version), or the registry's own rows.

Read only, through the registry's metadata repository (``trust.service.repository``) and its
``verified`` versions; a role that does not verify, or names nothing, signs nothing here.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import Metadata

from modelward.attest.tuf import QUARANTINE_ROLE, alias_path, quarantine_path
from modelward.registry.domains._state import AppState
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.tuf.proposals import delegated_role_for
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.errors import NotFound
from modelward.registry.models import Principal, SigningKey

__all__ = ["alias_signature", "holders", "quarantine_signature", "signature_of"]


def holders(session: Session) -> dict[str, str]:
    """keyid -> the name of the principal holding the key (the registry's rows)."""
    return dict(
        session.execute(
            select(SigningKey.keyid, Principal.name).join(
                Principal, Principal.id == SigningKey.principal_id
            )
        ).all()
    )


def signature_of(
    repo: MetadataRepository, role: str, path: str, names: dict[str, str]
) -> dict[str, Any] | None:
    """``{role, version, digest, signers, keyids}`` of the newest verified version of the
    delegated ``role`` when it signs ``path``; None when it does not, or does not verify.
    ``signers`` are the holders of the keys whose signatures the delegation counts."""
    try:
        md: Metadata[Any] | None = repo.verified(role)
    except UnsignedMetadataError:
        return None
    if md is None or path not in md.signed.targets:
        return None
    target = md.signed.targets[path]
    counted = repo.targets().get_verification_result(role, md.signed_bytes, md.signatures)
    keyids = sorted(counted.signed)
    return {
        "role": role,
        "version": md.signed.version,
        "digest": "sha256:" + target.hashes.get("sha256", ""),
        "keyids": keyids,
        "signers": sorted({names.get(k, k[:16]) for k in keyids}),
    }


def alias_signature(
    session: Session, state: AppState, repo_name: str, alias: str
) -> dict[str, Any] | None:
    """The signature of what ``repo_name@alias`` names, in the role a worker's lookup
    reaches first (``delegated_role_for``); None when no verified role signs it."""
    repo = repository(session, state)
    path = alias_path(repo_name, alias)
    try:
        role = delegated_role_for(repo, path)
    except NotFound:
        return None
    return signature_of(repo, role.name, path, holders(session))


def quarantine_signature(session: Session, state: AppState, digest: str) -> dict[str, Any] | None:
    """The signed quarantine role's version that names ``digest``; None when the
    quarantine is only the registry's word (its row)."""
    repo = repository(session, state)
    try:
        return signature_of(repo, QUARANTINE_ROLE, quarantine_path(digest), holders(session))
    except (NotFound, ValueError):
        return None
