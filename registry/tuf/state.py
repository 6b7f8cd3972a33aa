"""What the delegations are made of, read from the registry's database (docs/tuf.md#roles).

- a repository's protected alias rules with ``approvals`` >= 1, from its policy, in order;
- its publishers' active signing keys;
- every reviewer's active signing key (reviewers sign protected aliases and quarantine).

A protected rule with ``approvals: 0`` (protected only for its baseline or replay gates)
stays with the publishers' role: the registry checks those gates before it publishes.
Revoked keys are left out, so revoking a key ends its delegations with the next targets.
A repository whose stored policy is no longer usable gets a role with no keys (fail closed
for it alone).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from securesystemslib.signer import Key
from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.keys import load_public_key
from modelward.attest.tuf import tuf_key
from modelward.registry.errors import BadRequest
from modelward.registry.models import Principal, RepoPublisher, Repository, SigningKey
from modelward.registry.policy import FloorNotMet, repo_policy
from modelward.registry.tuf.roles import ProtectedRule, RepositoryTrust

__all__ = ["repository_trusts", "reviewer_keys"]

log = logging.getLogger("modelward.registry")


def _keys(session: Session, principal_ids: Sequence[int]) -> list[Key]:
    if not principal_ids:
        return []
    rows = session.scalars(
        select(SigningKey)
        .where(SigningKey.principal_id.in_(principal_ids), SigningKey.revoked_at.is_(None))
        .order_by(SigningKey.keyid)
    )
    return [
        tuf_key(load_public_key(row.public_key_pem.encode(), source=f"key {row.keyid}"))
        for row in rows
    ]


def reviewer_keys(session: Session) -> list[Key]:
    """Every reviewer's active signing key."""
    ids = list(session.scalars(select(Principal.id).where(Principal.role == "reviewer")))
    return _keys(session, ids)


def repository_trusts(
    session: Session, default_policy_yaml: str | None, *, only: str | None = None
) -> list[RepositoryTrust]:
    """One ``RepositoryTrust`` per repository (``only``: that one), by name. A repository
    whose stored policy no longer parses or no longer meets its org's floor gets no keys at
    all (its aliases' role verifies nothing until an admin replaces the policy), and is
    named in an error log line (``tuf_policy_unusable``); the others are not held back."""
    trusts = []
    query = select(Repository).order_by(Repository.name)
    if only is not None:
        query = query.where(Repository.name == only)
    for repo in session.scalars(query):
        try:
            policy = repo_policy(repo, default_policy_yaml)
        except (BadRequest, FloorNotMet) as exc:
            # fail closed for this repository only: every alias of it is delegated to a
            # role with no keys (nothing of it verifies), the others as their policies say
            log.error(  # noqa: TRY400 - the repository and why; no payload in logs
                json.dumps(
                    {
                        "event": "tuf_policy_unusable",
                        "repository": repo.name,
                        "code": exc.code,
                        "message": str(exc)[:500],
                    }
                )
            )
            trusts.append(RepositoryTrust(repo.name, [], [], []))
            continue
        protected = [
            ProtectedRule(rule.pattern, rule.approvals)
            for rule in policy.aliases
            if rule.protected and rule.approvals >= 1
        ]
        publishers = list(
            session.scalars(
                select(RepoPublisher.principal_id).where(RepoPublisher.repo_id == repo.id)
            )
        )
        trusts.append(
            RepositoryTrust(
                repo=repo.name,
                protected=protected,
                online_patterns=[rule.pattern for rule in policy.aliases if rule.online],
                publisher_keys=_keys(session, publishers),
            )
        )
    return trusts
