"""What a change of who may sign would leave short of its threshold, before it happens
(docs/tuf.md#previews, docs/operations.md#changing-who-may-sign).

``POST /v1/tuf/impact`` answers it for one change of who may sign (``CHANGES``: each
domain registers how its change is made, ``_who_may_sign.register_change``): the change is
made in a write transaction, measured by the one check every such change runs
(``registry.domains._who_may_sign``), and rolled back. And for a pending top-level targets
proposal: its delegations against the published ones (``signatures_at_risk``).
``key revoke``, the admin commands and ``trust sign`` show it. A preview the caller will
not go ahead with (``refuse_if_lost``) is audited as ``tuf.unsigning.refused``. A private
repository's aliases and plans are named only to its readers; the others learn how many
(``withheld``), which ``refused`` counts too (issue 38 item 4).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session
from tuf.api.metadata import Delegations, Metadata, Targets

from modelward.registry.domains._state import AppState
from modelward.registry.domains._who_may_sign import CHANGES, who_may_sign
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.role_access import proposals_readable
from modelward.registry.domains.signing.tuf.proposals import TARGETS_ROLE
from modelward.registry.domains.signing.tuf.rotation import (
    SignaturesLost,
    signatures_lost,
    signed_version,
)
from modelward.registry.domains.signing.tuf.tables import proposal_row
from modelward.registry.errors import BadRequest, NotFound

__all__ = ["impact", "signatures_at_risk"]


class _Measured(Exception):  # noqa: N818 - control flow: roll a preview back
    def __init__(self, lost: list[SignaturesLost]) -> None:
        super().__init__("preview")
        self.lost = lost


# -- previews ---------------------------------------------------------------------------
def describe(kind: str, args: dict[str, str]) -> str:
    """The words a refusal and the audit use for a change, e.g. ``set role of rev to
    reader``."""
    match kind:
        case "revoke_key":
            return f"revoke key {args['keyid']}"
        case "set_role":
            return f"set role of {args['principal']} to {args['role']}"
        case "disable_principal":
            return f"disable principal {args['principal']}"
        case "remove_publisher":
            return f"remove publisher {args['principal']} from {args['repository']}"
        case "remove_member":
            return f"remove member {args['principal']} from org {args['org']}"
        case _:
            return f"replace the policy of {args['repository']}"


def _measure(state: AppState, caller: Caller, kind: str, args: dict[str, str]) -> None:
    """Make the change in a write transaction and measure it; always raises (``_Measured``
    rolls the transaction back, keeping nothing)."""
    apply = CHANGES[kind][1]
    with state.db.write() as session:
        with who_may_sign(
            session, state, change=describe(kind, args), caller=caller, force=True
        ) as lost:
            apply(session, state, caller, args)
        raise _Measured(lost)


def _preview(state: AppState, caller: Caller, kind: str, args: dict[str, str]) -> list[Any]:
    """Make the change, measure it (``who_may_sign``), roll it back: what it would leave
    short. Raises BadRequest (a field missing), and whatever the change itself raises."""
    missing = [f for f in CHANGES[kind][0] if not args.get(f)]
    if missing:
        raise BadRequest(f"change {kind} needs {', '.join(missing)}")
    try:
        _measure(state, caller, kind, args)
    except _Measured as measured:
        return measured.lost
    raise AssertionError("unreachable")  # pragma: no cover - _measure always raises


def signatures_at_risk(
    session: Session, state: AppState, *, proposal_id: int
) -> list[SignaturesLost]:
    """Every target signed now whose signatures would fall below its role's threshold if
    the top-level targets proposal ``proposal_id`` were published. Raises NotFound,
    BadRequest (a proposal that is not of top-level targets)."""
    repo = repository(session, state)
    if TARGETS_ROLE not in repo.store.latest_versions():
        return []
    current = repo.targets().delegations
    row = proposal_row(session, proposal_id)
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
    kind: str | None,
    args: dict[str, str],
    proposal_id: int | None,
    refuse_if_lost: bool,
) -> dict[str, Any]:
    """``POST /v1/tuf/impact``: what one change of who may sign (``kind``, one of
    ``CHANGES``, with ``args``), or the top-level targets proposal ``proposal_id``, would
    leave short: ``lost``, each with its ``kind``, ``target`` and ``message``, those of a
    private repository only to a caller who may read it (``role_access.proposals_readable``);
    ``withheld``: how many more would be, not shown (no name, no digest). With
    ``refuse_if_lost`` the caller goes ahead only if nothing would be, shown or withheld: a
    non-empty answer is audited as ``tuf.unsigning.refused`` (``refused`` true). Raises
    BadRequest, NotFound, Forbidden (a change the caller may not make)."""
    if (kind is None) == (proposal_id is None):
        raise BadRequest("name one change: a change of who may sign, or a proposal")
    if kind is not None and kind not in CHANGES:
        raise BadRequest(f"unknown change {kind!r}; changes are {', '.join(CHANGES)}")
    if kind is not None:
        change = describe(kind, args) if all(args.get(f) for f in CHANGES[kind][0]) else kind
        lost = _preview(state, caller, kind, args)
    else:
        change = f"sign proposal {proposal_id}"
        with state.db.read() as session:
            lost = signatures_at_risk(session, state, proposal_id=int(proposal_id or 0))
    refused = refuse_if_lost and bool(lost)
    if refused:
        with state.db.write() as session:
            append(
                session,
                actor=caller.name,
                action="tuf.unsigning.refused",
                subject=change,
                details={
                    "lost": [item.line for item in lost][:100],
                    "needs": "--force" if kind is not None else "--yes",
                },
            )
    # what the caller is shown: a private repository's entries only to its readers (the
    # read rule role_access applies to proposals and status); ``refused`` counted them all
    with state.db.read() as session:
        shown = proposals_readable(session, caller, [item.as_json() for item in lost])
    return {
        "change": change,
        "lost": shown,
        "withheld": len(lost) - len(shown),
        "refused": refused,
    }
