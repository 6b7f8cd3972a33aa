"""``POST /v1/repos/{org}/{name}/bundles/{digest}/quarantine``: a quarantine is recorded
(``quarantine.service``) and proposed as the quarantine role's next version for reviewers to
sign (``trust.service.propose_quarantine``, docs/tuf.md#proposals), in one transaction.

``POST .../quarantine/lift`` undoes it the same way: a reviewer's request with a reason,
proposed as the quarantine role's next version without the digest; the quarantine stays in
force until a reviewer signs that proposal (``trust.service.sign_proposal`` lifts it when it
publishes). A quarantine never signed for workers (no signed version names it) is lifted on
the reviewer's word, as it was set. Either way an alias still pointing at the digest refuses
the lift (``quarantine.service.require_liftable``).

It lives with the trust domain because it writes both: the bundles domain below it knows
nothing of TUF."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.exceptions import UnsignedMetadataError

from modelward.attest.tuf import QUARANTINE_ROLE, quarantine_path
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.deps import Reviewer
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.bundles import service
from modelward.registry.domains.bundles.endpoints import ReasonIn
from modelward.registry.domains.quarantine.service import (
    lift,
    pending_record,
    quarantined_manifest,
    require_liftable,
)
from modelward.registry.domains.quarantine.service import quarantine as quarantine_digest
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.signing.online import repository
from modelward.registry.domains.signing.proposals import propose_quarantine
from modelward.registry.domains.signing.publish import sync
from modelward.registry.domains.signing.tuf.proposals import propose_target
from modelward.registry.domains.signing.tuf.tables import TufProposal
from modelward.registry.domains.signing.tuf.view import SignedView
from modelward.registry.errors import Conflict, NotFound
from modelward.registry.models import Bundle, Repository, utcnow

router = domain_router(prefix="/v1/repos/{org}/{name}/bundles", tags=["bundles"])


@router.post("/{digest}/quarantine")
def quarantine(
    *, org: str, name: str, digest: str, body: ReasonIn, caller: Reviewer, state: State
) -> dict[str, Any]:
    """Quarantine the digest in every repository (409 ``conflict`` when it already is), named
    through a repository holding it as a bundle or only as a ``/v2`` pending manifest;
    returns this repository's bundle record (for a pending-only digest: its quarantine
    fields, ``state`` ``pending``), with ``proposal``: the quarantine role's next version
    listing the digest, for a reviewer to sign (docs/tuf.md#proposals)."""
    repo_name = f"{org}/{name}"
    with state.db.write() as session:
        held = quarantine_digest(
            session, repo_name=repo_name, digest=digest, reason=body.reason, caller=caller
        )
        repo = get_repo(session, repo_name, caller)
        proposal = propose_quarantine(
            session,
            state,
            digest=digest,
            manifest=quarantined_manifest(session, repo, digest),
            caller=caller,
            reason=body.reason,
        )
        try:
            record = service.bundle_json(
                session, service.find_bundle(session, repo, digest), caller
            )
        except NotFound:  # only a pending /v2 copy holds it
            record = pending_record(session, held)
        return {**record, "proposal": proposal.id}


def _signed_aliases_at(session: Session, view: SignedView, digest: str) -> list[str]:
    """``repo@alias`` signed for workers to point at ``digest`` (the TUF alias roles of
    every repository holding it), whatever the alias rows say now."""
    held = session.execute(
        select(Repository.name)
        .join(Bundle, Bundle.repo_id == Repository.id)
        .where(Bundle.digest == digest)
        .distinct()
        .order_by(Repository.name)
    ).scalars()
    return [
        f"{repo}@{alias}"
        for repo in held
        for alias, signed in sorted(view.aliases(session, repo).items())
        if signed == digest
    ]


def _signed_quarantined(session: Session, state: Any, digest: str) -> bool:
    """Whether the quarantine role's newest verified version names ``digest``; a role that
    does not verify counts as naming it (fail closed: the lift is then proposed)."""
    try:
        md = repository(session, state).verified(QUARANTINE_ROLE)
    except UnsignedMetadataError:
        return True
    return md is not None and quarantine_path(digest) in md.signed.targets


@router.post("/{digest}/quarantine/lift")
def lift_quarantine(
    *, org: str, name: str, digest: str, body: ReasonIn, caller: Reviewer, state: State
) -> dict[str, Any]:
    """Lift the quarantine of the digest (in every repository), named through a repository
    holding it: 404 ``not_quarantined`` when it is not, 409 ``alias_points_at_quarantined``
    while an alias (its row or its signed target) points at it. When a signed version of the
    quarantine role names it, returns ``{lifted: false, proposal}``: the role's next version
    without it, for a reviewer to sign; the quarantine holds until then (audited
    ``bundle.quarantine.lift_proposed``). Otherwise it is lifted now: ``{lifted: true}``
    (audited ``bundle.quarantine.lift``)."""
    repo_name = f"{org}/{name}"
    with state.db.write() as session:
        row = require_liftable(
            session, repo_name=repo_name, digest=digest, reason=body.reason, caller=caller
        )
        signed = _signed_aliases_at(session, state.signed, digest)
        if signed:
            raise Conflict(
                f"bundle {digest} cannot be lifted while {', '.join(signed)} still point(s) at "
                "it in signed metadata: workers would load it again without an alias "
                "decision; move the alias to another bundle first (and sign that move)",
                detail={"digest": digest, "aliases": signed},
                code="alias_points_at_quarantined",
            )
        path = quarantine_path(digest)
        for old in session.scalars(
            select(TufProposal).where(TufProposal.target == path, TufProposal.state == "pending")
        ):
            old.state, old.decided_at = "superseded", utcnow()
        answer: dict[str, Any] = {"repository": repo_name, "digest": digest, "reason": body.reason}
        if not _signed_quarantined(session, state, digest):
            lift(session, digest=digest, reason=body.reason, actor=caller.name, signed_by=None)
            return {**answer, "lifted": True, "proposal": None}
        proposal = _propose_lift(session, state, digest=digest, reason=body.reason, caller=caller)
        append(
            session,
            actor=caller.name,
            action="bundle.quarantine.lift_proposed",
            subject=f"{repo_name}@{digest}",
            details={"reason": body.reason, "proposal": proposal.id, "since": row.reason},
        )
        return {**answer, "lifted": False, "proposal": proposal.id}


def _propose_lift(
    session: Session, state: Any, *, digest: str, reason: str, caller: Caller
) -> TufProposal:
    """The quarantine role's next version without ``digest`` (reviewers sign, threshold 1)."""
    repo = repository(session, state)
    sync(session, state, repo, proposer_id=caller.id)
    return propose_target(
        session,
        repo,
        path=quarantine_path(digest),
        data=None,
        proposer_id=caller.id,
        reason=reason,
        from_digest=digest,
        to_digest=None,
    )
