"""A revoked key: its signatures withdrawn from pending proposals, and who is left to sign
(docs/tuf.md#keys)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.exceptions import RepositoryError

from modelward.attest.tuf import (
    alias_path,
)
from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.tuf.bootstrap import (
    sync_delegations,
)
from modelward.registry.domains.signing.tuf.proposals import (
    withdraw_signatures,
)
from modelward.registry.errors import Conflict, RegistryError
from modelward.registry.models import SigningKey


def key_revoked(session: Session, state: AppState, keyid: str, *, caller: Caller) -> None:
    """In the revocation's own transaction: take ``keyid``'s signatures off every pending
    proposal (they stop counting at once) and bring the delegations in line (the key leaves
    every role: signed at once with an online targets key, else a targets proposal for the
    admins; until they sign it the registry refuses the key's signatures itself). Audited
    as ``tuf.signature.withdraw`` when a proposal lost a signature.

    A revocation the delegations cannot follow is refused, never half done: RevocationFailed
    (409 ``revocation_failed``, the reason) when they cannot be re-made, TufKeyUnavailable
    (503) when this replica holds no TUF keys; the caller's transaction then keeps nothing.
    """
    signers_left(
        session,
        state,
        [keyid],
        why="key revoked",
        refused=f"key {keyid} was not revoked",
        caller=caller,
    )


def signers_left(
    session: Session,
    state: AppState,
    keyids: list[str],
    *,
    why: str,
    refused: str,
    caller: Caller,
) -> None:
    """``key_revoked`` for every key of ``keyids`` at once (a revocation, a principal
    disabled): their signatures come off pending proposals (audited as
    ``tuf.signature.withdraw``, with ``why``) and the delegations are re-made without them,
    in the caller's transaction. Raises RevocationFailed (``refused``: what was not done)
    or TufKeyUnavailable."""
    unsigned = withdraw_signatures(session, keyids)
    if unsigned:
        append(
            session,
            actor=caller.name,
            action="tuf.signature.withdraw",
            subject=", ".join(keyids)[:500],
            details={"proposals": [p.id for p in unsigned], "why": why},
        )
    repo = repository(session, state)
    try:
        sync_delegations(
            session,
            repo,
            trust_of(state.settings).keys,
            state.default_policy_yaml,
            proposer_id=caller.id,
        )
    except (RegistryError, ValueError, RepositoryError) as exc:
        raise RevocationFailed(
            f"{refused}: the TUF delegations could not be re-made without "
            f"{'it' if len(keyids) == 1 else 'its keys'} ({type(exc).__name__}: "
            f"{str(exc)[:500]}); nothing was changed",
            detail={"keyids": keyids, "reason": type(exc).__name__},
        ) from exc


class RevocationFailed(Conflict):
    """409: a key's revocation refused because the delegations could not follow it."""

    code = "revocation_failed"


def withdraw_approval_signatures(
    session: Session, *, repo_name: str, alias: str, digest: str, caller: Caller
) -> list[int]:
    """``caller`` withdraws the approval of ``repo_name@alias`` -> ``digest``: the signatures
    of every key ``caller`` registered come off the pending proposals making that move, in
    the withdrawal's transaction. The proposals' ids; audited as ``tuf.signature.withdraw``.
    """
    keyids = list(
        session.scalars(select(SigningKey.keyid).where(SigningKey.principal_id == caller.id))
    )
    unsigned = withdraw_signatures(
        session, keyids, target=alias_path(repo_name, alias), to_digest=digest
    )
    if unsigned:
        append(
            session,
            actor=caller.name,
            action="tuf.signature.withdraw",
            subject=f"{repo_name}@{alias}",
            details={"proposals": [p.id for p in unsigned], "to": digest, "why": "withdrawn"},
        )
    return [p.id for p in unsigned]
