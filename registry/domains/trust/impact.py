"""What a change to the delegations would unsign, before it happens
(docs/tuf.md#rotating-a-signers-key).

``signatures_at_risk`` is the registry's one answer to "which aliases (and quarantines)
would lose their valid signatures": for a key's revocation (the delegations the database
asks for without it) or for a pending top-level targets proposal (its delegations), each
against the signed state as it is now (``registry.tuf.rotation.signatures_lost``).
``POST /v1/tuf/impact`` answers it; ``key revoke`` and ``trust sign`` show it and go ahead
only with ``--yes``. A caller that will not go ahead (``refuse_if_lost``) is recorded:
the audit event ``tuf.unsigning.refused`` names the change and what it would have unsigned.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session
from tuf.api.metadata import Delegations, Metadata, Targets

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.trust.service import repository, trust_of
from modelward.registry.errors import BadRequest, Forbidden, NotFound
from modelward.registry.models import SigningKey, TufProposal
from modelward.registry.tuf.proposals import TARGETS_ROLE
from modelward.registry.tuf.rotation import (
    SignaturesLost,
    signatures_lost,
    signed_version,
    wanted_delegations,
)

__all__ = ["impact", "signatures_at_risk"]


def _revocable(session: Session, keyid: str, caller: Caller) -> None:
    row = session.get(SigningKey, keyid)
    if row is None:
        raise NotFound(f"no key {keyid}")
    if not caller.is_admin and row.principal_id != caller.id:
        raise Forbidden(f"{caller.name} may not revoke key {keyid}")


def signatures_at_risk(
    session: Session,
    state: AppState,
    *,
    revoke_key: str | None = None,
    proposal_id: int | None = None,
) -> list[SignaturesLost]:
    """Every target signed now whose signatures would fall below its role's threshold if
    ``revoke_key`` were revoked, or if the top-level targets proposal ``proposal_id`` were
    published. Raises NotFound, BadRequest (a proposal that is not of top-level targets)."""
    repo = repository(session, state)
    if TARGETS_ROLE not in repo.store.latest_versions():
        return []
    current = repo.targets().delegations
    wanted: Delegations | None
    if revoke_key is not None:
        keys = trust_of(state.settings).keys
        wanted = wanted_delegations(
            session, repo, keys, state.default_policy_yaml, excluded={revoke_key}
        )
    else:
        row = session.get(TufProposal, proposal_id)
        if row is None:
            raise NotFound(f"no TUF proposal {proposal_id}")
        if row.role != TARGETS_ROLE:
            raise BadRequest(
                f"proposal {proposal_id} is of role {row.role}, not top-level targets: it "
                "changes no delegation"
            )
        wanted = Metadata[Targets].from_bytes(row.payload).signed.delegations
        if wanted is None:
            wanted = Delegations(keys={}, roles={})
    return signatures_lost(current, wanted, lambda role: signed_version(repo, role))


def impact(
    state: AppState,
    *,
    caller: Caller,
    revoke_key: str | None,
    proposal_id: int | None,
    refuse_if_lost: bool,
) -> dict[str, Any]:
    """``POST /v1/tuf/impact``: ``signatures_at_risk`` for one change, ``lost`` (each with
    its ``message``). With ``refuse_if_lost`` the caller goes ahead only if nothing would be
    lost: a non-empty answer is audited as ``tuf.unsigning.refused`` (``refused`` true).
    A key's impact is for its owner and admins only (Forbidden otherwise)."""
    if (revoke_key is None) == (proposal_id is None):
        raise BadRequest("name one change: revoke_key or proposal")
    change = f"revoke key {revoke_key}" if revoke_key else f"sign proposal {proposal_id}"
    with state.db.read() as session:
        if revoke_key is not None:
            _revocable(session, revoke_key, caller)
        lost = signatures_at_risk(session, state, revoke_key=revoke_key, proposal_id=proposal_id)
    refused = refuse_if_lost and bool(lost)
    if refused:
        with state.db.write() as session:
            append(
                session,
                actor=caller.name,
                action="tuf.unsigning.refused",
                subject=change,
                details={"lost": [item.line for item in lost][:100], "needs": "--yes"},
            )
    return {"change": change, "lost": [item.as_json() for item in lost], "refused": refused}
