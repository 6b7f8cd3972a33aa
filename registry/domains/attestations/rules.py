"""Who may attach which attestation to a bundle: one table, decided here and nowhere else.

The attach endpoint (``POST .../attestations``) and push (the attestations sent with
``PUT .../bundles/{digest}``) both call ``require_may_attach`` with the predicate type and
kind of the VERIFIED statement (``attest.verify.verify_attestation``), never a field the
client sent. The table (docs/registry.md#who-may-attach-what):

- ``https://slsa.dev/provenance/v1`` and OMS signatures (kind ``oms``, predicate types
  ``https://model_signing/...``): publishers of the repository (and admins);
- ``https://modelward.dev/determinism-baseline/v1`` and ``.../replay-result/v1``: readers
  (serving workers) and admins;
- ``https://modelward.dev/approval/v1`` and ``.../evaluation/v1``: reviewers and admins;
- any other predicate type: publishers of the repository (and admins): fail closed.

"Publishers of the repository" is ``repos.may_publish`` (admins everywhere, listed
publishers). An unknown predicate type fails closed to that row. Who may attach a statement
says nothing about whether it counts: the signers are judged by the policy
(``bundles.verdict``) and, for baselines and replay results, by the alias rules.

Retraction (``require_may_retract``): the principal that attached the attestation, or an
admin. Retracted rows are listed only to ``FORENSIC_ROLES`` (``require_may_see_retracted``).

Raises ``Forbidden`` (403, audited as ``denied`` by the app's one error handler).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from sqlalchemy.orm import Session

from modelward.attest.statement import PredicateType
from modelward.attest.verify import OMS_PREDICATE_PREFIX
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos.service import may_publish
from modelward.registry.errors import Forbidden
from modelward.registry.models import Attestation, Repository

__all__ = [
    "ATTACH_RULES",
    "FORENSIC_ROLES",
    "OTHER_PREDICATES",
    "AttachRule",
    "may_attach",
    "require_may_attach",
    "require_may_attach_some",
    "require_may_retract",
    "require_may_see_retracted",
    "rule_for",
]


@dataclass(frozen=True)
class AttachRule:
    """Who may attach one kind of statement: ``roles`` anywhere, plus the repository's
    publishers (``repos.may_publish``: admins too) when ``publishers``."""

    who: str  # for messages and the docs
    roles: frozenset[str] = frozenset()
    publishers: bool = False


PUBLISHERS: Final = AttachRule("publishers of the repository and admins", publishers=True)
WORKERS: Final = AttachRule("readers (serving workers) and admins", frozenset({"reader", "admin"}))
REVIEWERS: Final = AttachRule("reviewers and admins", frozenset({"reviewer", "admin"}))

ATTACH_RULES: Final[Mapping[str, AttachRule]] = MappingProxyType(
    {
        PredicateType.PROVENANCE: PUBLISHERS,
        PredicateType.BASELINE: WORKERS,
        PredicateType.REPLAY: WORKERS,
        PredicateType.APPROVAL: REVIEWERS,
        PredicateType.EVALUATION: REVIEWERS,
    }
)
OMS_SIGNATURES: Final = PUBLISHERS
OTHER_PREDICATES: Final = PUBLISHERS  # fail closed: an unknown type is a publisher's claim
FORENSIC_ROLES: Final = frozenset({"admin", "reviewer"})  # may list retracted attestations


def rule_for(predicate_type: str, kind: str) -> AttachRule:
    """The rule for a verified statement's predicate type and signature kind."""
    if kind == "oms" or predicate_type.startswith(OMS_PREDICATE_PREFIX):
        return OMS_SIGNATURES
    return ATTACH_RULES.get(predicate_type, OTHER_PREDICATES)


def may_attach(
    session: Session, repo: Repository, caller: Caller, predicate_type: str, kind: str
) -> bool:
    """Whether ``caller`` may attach a statement of this type to bundles of ``repo``."""
    rule = rule_for(predicate_type, kind)
    if caller.role in rule.roles:
        return True
    return rule.publishers and may_publish(session, repo, caller)


def require_may_attach(
    session: Session, repo: Repository, caller: Caller, predicate_type: str, kind: str
) -> None:
    """Raise ``Forbidden`` unless ``caller`` may attach this statement to bundles of ``repo``.

    ``predicate_type`` and ``kind`` must be the verified statement's (``VerifiedStatement``),
    or a stored row's (recorded from one). The message names the caller, its role, the
    predicate type and who may attach it.
    """
    if may_attach(session, repo, caller, predicate_type, kind):
        return
    rule = rule_for(predicate_type, kind)
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not attach {predicate_type} attestations "
        f"in {repo.name}: only {rule.who} may",
        detail={
            "principal": caller.name,
            "role": caller.role,
            "predicate_type": predicate_type,
            "kind": kind,
            "allowed": rule.who,
        },
    )


def require_may_attach_some(session: Session, repo: Repository, caller: Caller) -> None:
    """Raise ``Forbidden`` when ``caller`` may attach nothing at all to bundles of ``repo``.

    A cheap check before verifying (which may hash a whole model): a publisher of another
    repository is refused without the registry reading the bundle's files.
    """
    rules = {*ATTACH_RULES.values(), OMS_SIGNATURES, OTHER_PREDICATES}
    if any(caller.role in r.roles for r in rules):
        return
    if any(r.publishers for r in rules) and may_publish(session, repo, caller):
        return
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not attach attestations in {repo.name}",
        detail={"principal": caller.name, "role": caller.role},
    )


def require_may_retract(caller: Caller, row: Attestation, attached_by: str) -> None:
    """Raise ``Forbidden`` unless ``caller`` attached ``row`` or is an admin."""
    if caller.is_admin or caller.id == row.created_by:
        return
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not retract attestation {row.id}: only "
        f"{attached_by}, who attached it, or an admin may",
        detail={"principal": caller.name, "role": caller.role, "attached_by": attached_by},
    )


def require_may_see_retracted(caller: Caller) -> None:
    """Raise ``Forbidden`` unless ``caller`` may list retracted attestations (forensics)."""
    if caller.role in FORENSIC_ROLES:
        return
    raise Forbidden(
        f"{caller.name} ({caller.role}) may not list retracted attestations: only admins and "
        "reviewers may",
        detail={"principal": caller.name, "role": caller.role, "allowed": sorted(FORENSIC_ROLES)},
    )
