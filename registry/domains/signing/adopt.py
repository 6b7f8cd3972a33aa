"""The migration step: aliases the registry recorded on its word alone, proposed for signing
(docs/tuf.md#migration)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from tuf.api.metadata import Metadata, Targets

from modelward.attest.tuf import (
    alias_path,
    online_role,
)
from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.moves.service import (
    decide_again,
    require_move_allowed,
)
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.proposals import proposal_json
from modelward.registry.domains.signing.publish import sync
from modelward.registry.domains.signing.tuf.keys import (
    ALIAS_KEY,
)
from modelward.registry.domains.signing.tuf.proposals import (
    ADOPT_TARGET,
    add_signature,
    delegated_role_for,
    propose_changes,
)
from modelward.registry.domains.signing.tuf.tables import TufProposal
from modelward.registry.errors import NotFound, RegistryError


def adopt(state: AppState, *, caller: Caller) -> list[dict[str, Any]]:
    """The migration step (docs/tuf.md#migration): one proposal per role holding every alias
    the registry recorded on its word alone (no signed version names its digest), for the
    role's signers to sign (``modelward trust sign``); online roles are signed at once.
    Aliases already proposed as they are now are left to those proposals. An alias row
    whose bundle is quarantined, deleted or missing (a database writer's edit, or a bundle
    withdrawn since) is not proposed: it is skipped, and the audit event ``tuf.adopt``
    names it with why. Each adopted alias is still decided when its proposal is signed
    (``sign_proposal``); one an online role holds, which the registry signs here, is
    decided here, and skipped when refused."""
    from modelward.registry.models import Alias, Bundle, QuarantinedDigest, Repository

    with state.db.write() as session:
        repo = repository(session, state)
        sync(session, state, repo, proposer_id=caller.id)
        pending = {
            (p.target, p.to_digest)
            for p in session.scalars(select(TufProposal).where(TufProposal.state == "pending"))
        }
        by_role: dict[str, dict[str, bytes | None]] = {}
        online_roles: set[str] = set()
        rows = session.execute(
            select(
                Repository.name,
                Alias.name,
                Alias.digest,
                Bundle.manifest,
                Bundle.tombstoned,
                QuarantinedDigest.digest,
            )
            .join(Alias, Alias.repo_id == Repository.id)
            .outerjoin(Bundle, (Bundle.repo_id == Alias.repo_id) & (Bundle.digest == Alias.digest))
            .outerjoin(QuarantinedDigest, QuarantinedDigest.digest == Alias.digest)
            .order_by(Repository.name, Alias.name)
        ).all()
        signed: dict[str, dict[str, str]] = {}
        skipped: list[dict[str, str]] = []
        for repo_name, alias, digest, manifest, tombstoned, held in rows:
            why = (
                "no such bundle in the repository"
                if manifest is None
                else "the bundle was deleted"
                if tombstoned
                else "the bundle is quarantined"
                if held is not None
                else None
            )
            if why is not None:
                skipped.append({"alias": f"{repo_name}@{alias}", "digest": digest, "why": why})
                continue
            if repo_name not in signed:
                signed[repo_name] = state.signed.aliases(session, repo_name)
            path = alias_path(repo_name, alias)
            if signed[repo_name].get(alias) == digest or (path, digest) in pending:
                continue
            try:
                deciding = delegated_role_for(repo, path)
            except NotFound:
                continue
            if deciding.name == online_role(repo_name):
                # the registry's own key signs this role below, at once: the move is decided
                # first (steps (1)-(5), the adopter the mover) as ``sign_proposal`` decides
                # the others, its quarantine read again in this transaction
                try:
                    request = require_move_allowed(
                        state, repo_name=repo_name, alias=alias, digest=digest, mover=caller
                    )
                    decide_again(session, request, mover=caller)
                except RegistryError as exc:
                    why = f"{exc.code}: {exc.message}"[:500]
                    skipped.append({"alias": f"{repo_name}@{alias}", "digest": digest, "why": why})
                    continue
                online_roles.add(deciding.name)
            by_role.setdefault(deciding.name, {})[path] = bytes(manifest)
        made = []
        for role, changes in sorted(by_role.items()):
            proposal = propose_changes(
                session,
                repo,
                role,
                changes,
                proposer_id=caller.id,
                label=ADOPT_TARGET,
                reason=f"adopt {len(changes)} alias(es) the registry recorded unsigned",
            )
            if role in online_roles:
                signer = trust_of(state.settings).keys.signer(ALIAS_KEY)
                signature = signer.sign(Metadata[Targets].from_bytes(proposal.payload).signed_bytes)
                add_signature(
                    session,
                    repo,
                    proposal,
                    keyid=signature.keyid,
                    signature_hex=signature.signature,
                )
            made.append(proposal)
        append(
            session,
            actor=caller.name,
            action="tuf.adopt",
            subject="aliases",
            details={
                "proposals": [p.id for p in made],
                "aliases": sum(len(c) for c in by_role.values()),
                "skipped": skipped,
            },
        )
        return [proposal_json(session, repo, p) for p in made]
