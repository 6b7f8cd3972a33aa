"""``POST /v1/repos/{org}/{name}/bundles/{digest}/quarantine``: a quarantine is recorded
(``quarantine.service``) and proposed as the quarantine role's next version for reviewers to
sign (``trust.service.propose_quarantine``, docs/tuf.md#proposals), in one transaction.

It lives with the trust domain because it writes both: the bundles domain below it knows
nothing of TUF."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from modelward.registry.domains._state import State
from modelward.registry.domains.auth.deps import Reviewer
from modelward.registry.domains.bundles import service
from modelward.registry.domains.bundles.endpoints import ReasonIn
from modelward.registry.domains.quarantine.service import pending_record, quarantined_manifest
from modelward.registry.domains.quarantine.service import quarantine as quarantine_digest
from modelward.registry.domains.repos.service import get_repo
from modelward.registry.domains.trust.service import propose_quarantine
from modelward.registry.errors import NotFound

router = APIRouter(prefix="/v1/repos/{org}/{name}/bundles", tags=["bundles"])


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
        repo = get_repo(session, repo_name)
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
