"""Whose signature counts for a serving worker's evidence when a protected alias moves.

Determinism baselines and replay results are evidence a serving worker produces; a protected
alias's ``require_baseline`` and ``replay`` count only statements vouched for by a signer
that, in order (docs/registry.md#trust, docs/policy.md#evidence):

  (1) is not an interested principal: the bundle's publisher, the principal moving the alias,
      a publisher of the repository, or an admin (admins may publish anywhere);
  (2) signed with a key or identity that is not registered to an interested principal, so a
      key the policy lists that a publisher also registered never counts;
  (3) is named for that purpose by the policy's ``evidence``: one of its own ``signers`` (by
      policy signer name), a registered principal listed in ``principals`` or holding a role
      listed in ``roles`` (registered keys and identities are named ``@<principal>``).

``evidence_signers`` reads what (1)-(3) need from the database; ``EvidenceSigners`` decides
without I/O. A policy that names nobody for evidence counts nobody (and attest.policy refuses
alias rules that would need it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from modelward.registry.domains.repos.service import registered_signer_name
from modelward.registry.models import Identity, Principal, RepoPublisher, Repository, SigningKey

if TYPE_CHECKING:
    from modelward.attest.policy import Policy
    from modelward.attest.trust import Signer

__all__ = ["EvidenceSigners", "evidence_signers"]


@dataclass(frozen=True)
class EvidenceSigners:
    """The signers whose baselines and replay results count for one alias move."""

    interested: frozenset[str]  # (1) @<principal> of every interested principal
    interested_credentials: frozenset[str]  # (2) their key ids and "identity (issuer)"s
    named: frozenset[str]  # (3) signer names the policy's evidence names

    def reason_against(self, signer: Signer) -> str | None:
        """Why ``signer`` does not count, or None when it does."""
        # (1): not the publisher, the mover, a publisher of the repository or an admin.
        if signer.name in self.interested:
            return (
                f"{signer.name} is the bundle's publisher, the mover, a publisher of the "
                "repository or an admin"
            )
        # (2): nor with their key or identity under another name.
        if signer.detail in self.interested_credentials:
            return (
                f"{signer.name} signed with {signer.detail}, registered to the bundle's "
                "publisher, the mover, a publisher of the repository or an admin"
            )
        # (3): named for evidence by the policy.
        if signer.name not in self.named:
            return f"{signer.name} is not an evidence signer of the policy (evidence)"
        return None


def evidence_signers(
    session: Session, repo: Repository, policy: Policy, *, publisher_id: int, mover_id: int
) -> EvidenceSigners:
    """What ``EvidenceSigners`` needs for a move of an alias of ``repo`` to a bundle that
    ``publisher_id`` pushed, by ``mover_id``, under ``policy``."""
    evidence = policy.evidence
    # (1): the interested principals.
    publishers = select(RepoPublisher.principal_id).where(RepoPublisher.repo_id == repo.id)
    interested = session.execute(
        select(Principal.id, Principal.name).where(
            or_(
                Principal.id.in_((publisher_id, mover_id)),
                Principal.id.in_(publishers),
                Principal.role == "admin",
            )
        )
    ).all()
    ids = {pid for pid, _ in interested}
    # (2): every key and identity ever registered to them (revoked ones too).
    keys = session.execute(
        select(SigningKey.keyid).where(SigningKey.principal_id.in_(ids))
    ).scalars()
    identities = session.execute(
        select(Identity.identity, Identity.issuer).where(Identity.principal_id.in_(ids))
    ).all()
    # (3): the names the policy's evidence section names.
    by_role = session.execute(
        select(Principal.name).where(Principal.role.in_(evidence.roles))
    ).scalars()
    named = {
        *evidence.signers,
        *(registered_signer_name(p) for p in evidence.principals),
        *(registered_signer_name(p) for p in by_role),
    }
    return EvidenceSigners(
        interested=frozenset(registered_signer_name(name) for _, name in interested),
        interested_credentials=frozenset(
            [*keys, *(f"{ident} ({issuer})" for ident, issuer in identities)]
        ),
        named=frozenset(named),
    )
