"""What the delegations are made of, read from the registry's database (docs/tuf.md#roles).

- a repository's protected alias rules with ``approvals`` >= 1, from its policy, in order;
- its publishers' active signing keys (of enabled principals);
- every enabled reviewer's active signing key (reviewers sign protected aliases and quarantine).

Only rows the registry sealed count (``signing.tuf.seals``): a reviewer whose principal
row, a key whose ``signing_keys`` row, a publisher whose ``repo_publishers`` row does not
carry a valid seal is left out (and named in a ``tuf_row_unsealed`` log line), so a
database writer's row signs nothing, even with the targets key online.

One key per principal: a worker counts keys, the registry counts people, and the two must
agree (docs/tuf.md#proposals). So a principal's newest active sealed key is her one key in
every delegation; registering a second key replaces the first there, except in a role
whose signed version would lose its threshold by it: that role keeps naming her older key
until its signers re-sign it (``signing.tuf.rotation``, ``modelward trust resign``).

A protected rule with ``approvals: 0`` (protected only for its baseline or replay gates)
stays with the publishers' role: the registry checks those gates before it publishes.
Revoked keys are left out, so revoking a key ends its delegations with the next targets;
so are a disabled principal's keys (disabling re-makes the delegations in its own
transaction, as a revocation does).
A repository whose stored policy is no longer usable gets a role with no keys (fail closed
for it alone).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence

from securesystemslib.signer import Key
from sqlalchemy import select
from sqlalchemy.orm import Session

from modelward.attest.keys import load_public_key
from modelward.attest.tuf import tuf_key
from modelward.registry.domains.signing.tuf.roles import ProtectedRule, RepositoryTrust
from modelward.registry.domains.signing.tuf.seals import RowSeals
from modelward.registry.errors import BadRequest
from modelward.registry.models import Principal, RepoPublisher, Repository, SigningKey
from modelward.registry.policy import FloorNotMet, repo_policy

__all__ = ["key_owners", "repository_trusts", "reviewer_keys"]

log = logging.getLogger("modelward.registry")


def _unsealed(table: str, row: str) -> None:
    log.warning(json.dumps({"event": "tuf_row_unsealed", "table": table, "row": row}))


def _disabled(principal: Principal, seals: RowSeals) -> bool:
    """A disabled principal's keys count nowhere, exactly as revoked keys (also when a
    database writer cleared ``disabled_at`` of a row the registry sealed as disabled)."""
    return principal.disabled_at is not None or seals.disabled_by_seal(principal)


def _keys(
    session: Session,
    principal_ids: Sequence[int],
    seals: RowSeals,
    excluded: Collection[str] = (),
) -> list[Key]:
    """One key per principal: the newest active key whose seal verifies (none of
    ``excluded``: keys about to be revoked, for a preview)."""
    if not principal_ids:
        return []
    rows = session.execute(
        select(SigningKey, Principal)
        .join(Principal, Principal.id == SigningKey.principal_id)
        .where(SigningKey.principal_id.in_(principal_ids), SigningKey.revoked_at.is_(None))
        .order_by(SigningKey.principal_id, SigningKey.created_at.desc(), SigningKey.keyid)
    ).tuples()
    newest: dict[int, SigningKey] = {}
    for row, owner in rows:
        if row.keyid in excluded or _disabled(owner, seals):
            continue
        if not seals.signing_key_ok(row):
            _unsealed("signing_keys", row.keyid)
            continue
        newest.setdefault(row.principal_id, row)
    return sorted(
        (
            tuf_key(load_public_key(row.public_key_pem.encode(), source=f"key {row.keyid}"))
            for row in newest.values()
        ),
        key=lambda key: key.keyid,
    )


def reviewer_keys(session: Session, seals: RowSeals, excluded: Collection[str] = ()) -> list[Key]:
    """Every sealed reviewer's one active signing key (none of ``excluded``)."""
    ids = []
    for principal in session.scalars(select(Principal).where(Principal.role == "reviewer")):
        if principal.disabled_at is not None:
            continue  # disabled: signs nothing (nor is it "unsealed")
        if seals.principal_ok(principal):
            ids.append(principal.id)
        else:
            _unsealed("principals", principal.name)
    return _keys(session, ids, seals, excluded)


def key_owners(session: Session, seals: RowSeals, excluded: Collection[str] = ()) -> dict[str, int]:
    """keyid -> owner (principal id) of every active signing key whose seal verifies (none
    of ``excluded``): the keys a delegation may keep naming during a rotation
    (``registry.domains.signing.tuf.rotation``)."""
    owners = {}
    rows = session.execute(
        select(SigningKey, Principal)
        .join(Principal, Principal.id == SigningKey.principal_id)
        .where(SigningKey.revoked_at.is_(None))
    ).tuples()
    for row, owner in rows:
        if row.keyid in excluded or _disabled(owner, seals):
            continue
        if seals.signing_key_ok(row):
            owners[row.keyid] = row.principal_id
    return owners


def _require_sealed(repo: Repository, seals: RowSeals) -> None:
    if not seals.policy_ok(repo):
        raise BadRequest(
            "its stored policy does not carry the registry's seal (written around the "
            "registry): an admin replaces it (PUT /v1/repos/ORG/NAME/policy)",
            code="policy_unsealed",
        )


def repository_trusts(
    session: Session,
    default_policy_yaml: str | None,
    seals: RowSeals,
    *,
    only: str | None = None,
    excluded: Collection[str] = (),
) -> list[RepositoryTrust]:
    """One ``RepositoryTrust`` per repository (``only``: that one), by name. A repository
    whose stored policy no longer parses or no longer meets its org's floor gets no keys at
    all (its aliases' role verifies nothing until an admin replaces the policy), and is
    named in an error log line (``tuf_policy_unusable``); the others are not held back. So
    does one whose policy row does not carry the registry's seal (code ``policy_unsealed``):
    a database writer's policy decides nothing."""
    trusts = []
    query = select(Repository).order_by(Repository.name)
    if only is not None:
        query = query.where(Repository.name == only)
    for repo in session.scalars(query):
        try:
            _require_sealed(repo, seals)
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
        publishers = []
        for row in session.scalars(select(RepoPublisher).where(RepoPublisher.repo_id == repo.id)):
            if seals.publisher_ok(row, repo.name):
                publishers.append(row.principal_id)
            else:
                _unsealed("repo_publishers", f"{repo.name} {row.principal_id}")
        trusts.append(
            RepositoryTrust(
                repo=repo.name,
                protected=protected,
                online_patterns=[rule.pattern for rule in policy.aliases if rule.online],
                publisher_keys=_keys(session, publishers, seals, excluded),
            )
        )
    return trusts
