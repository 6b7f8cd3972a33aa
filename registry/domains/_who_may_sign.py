"""One check for every change of who may sign (docs/operations.md#changing-who-may-sign).

A key revoked, a principal's role changed, a principal disabled, an org member or a
repository's publisher removed, a repository's policy replaced (its approvals, its
protected aliases): each endpoint wraps its change in ``who_may_sign``, in the change's own
transaction:

(1) the delegations the database asks for before the change
    (``registry.domains.signing.tuf.rotation.wanted_delegations``, over the sealed rows);
(2) the change, as its own service function makes it (nothing committed yet);
(3) the delegations the database asks for after it;
(4) ``signing.tuf.rotation.signatures_lost`` between the two: every live signed alias,
    rollout plan and quarantine whose signed version would keep fewer valid signatures
    than the threshold of the role deciding it, and the quarantine role if it would name
    too few keys;
(5) none: the change goes ahead. Some, without ``force``: refused, 409
    ``signers_would_be_short`` naming each (audited as ``denied`` by the app's one error
    handler; the transaction keeps nothing). Some, with ``force``: it goes ahead, audited
    as ``tuf.unsigning.forced`` with what it left short.

``POST /v1/tuf/impact`` (``registry.domains.signing.impact``) previews the same check. This
module sits beside the domains, not in ``signing``, so that every domain that changes who may
sign can call it without an import circle (it reads the TUF state through
``registry.domains.signing.tuf`` only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from sqlalchemy.orm import Session
from tuf.api.metadata import Delegations, Targets

from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.signing.tuf.bootstrap import open_repository
from modelward.registry.domains.signing.tuf.keys import tuf_keys
from modelward.registry.domains.signing.tuf.rotation import (
    SignaturesLost,
    signatures_lost,
    signed_version,
    wanted_delegations,
)
from modelward.registry.errors import Conflict, Forbidden

__all__ = ["CHANGES", "SignersWouldBeShort", "admin_only", "register_change", "who_may_sign"]


class SignersWouldBeShort(Conflict):
    """409: a change of who may sign refused; it would leave signed targets short."""

    code = "signers_would_be_short"


def _wanted(session: Session, state: AppState) -> Delegations | None:
    """What the database asks the delegations to be now (None: no targets yet)."""
    session.flush()
    keys = tuf_keys(state.settings)
    repo = open_repository(session, keys)
    if Targets.type not in repo.store.latest_versions():
        return None
    return wanted_delegations(session, repo, keys, state.default_policy_yaml)


@contextlib.contextmanager
def who_may_sign(
    session: Session, state: AppState, *, change: str, caller: Caller, force: bool
) -> Iterator[list[SignaturesLost]]:
    """Wrap a change of who may sign (module doc, steps (1)-(5)). The yielded list is
    filled with what the change left short (only ever non-empty with ``force``).
    Raises SignersWouldBeShort; TufKeyUnavailable when this replica holds no row key."""
    # (1): the delegations the database asks for before the change
    before = _wanted(session, state)
    lost: list[SignaturesLost] = []
    # (2): the change, by its own service function
    yield lost
    if before is None:
        return
    # (3): and after it
    after = _wanted(session, state)
    if after is None:  # pragma: no cover - a change of who may sign removes no targets
        return
    # (4): what it would leave short
    repo = open_repository(session, tuf_keys(state.settings))
    lost.extend(signatures_lost(before, after, lambda role: signed_version(repo, role)))
    if not lost:
        return
    lines = [item.line for item in lost]
    # (5): refused, or forced and audited
    if not force:
        shown = "; ".join(lines[:20]) + (f"; and {len(lines) - 20} more" if len(lines) > 20 else "")
        raise SignersWouldBeShort(
            f"{change} refused: it would leave {len(lost)} signed target(s) short of their "
            f"threshold: {shown}. Sign them again first, or do it anyway with the override "
            "(force: true in the API, --force in the CLI)",
            detail={"change": change, "lost": [item.as_json() for item in lost][:100]},
        )
    append(
        session,
        actor=caller.name,
        action="tuf.unsigning.forced",
        subject=change,
        details={"lost": lines[:100]},
    )


# -- what a preview may make ------------------------------------------------------------
#: how a preview makes a change: by the service function the change's own endpoint calls
#: (in the caller's name and with its authorization), given the change's fields
Apply = Callable[[Session, AppState, Caller, dict[str, str]], None]

#: each change of who may sign a preview (``POST /v1/tuf/impact``) can make: its fields,
#: and how it is made. Each domain registers its own (``register_change``) beside its
#: endpoint, so neither this module nor ``trust`` imports them (no import circle).
CHANGES: dict[str, tuple[tuple[str, ...], Apply]] = {}


def register_change(kind: str, fields: tuple[str, ...], apply: Apply) -> None:
    """Let ``POST /v1/tuf/impact`` preview change ``kind`` (``fields``: its args)."""
    CHANGES[kind] = (fields, apply)


def admin_only(caller: Caller, what: str) -> None:
    """Raise Forbidden unless ``caller`` is an admin (a preview of an admin's change)."""
    if not caller.is_admin:
        raise Forbidden(f"only an admin may preview {what}")
