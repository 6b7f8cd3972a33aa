"""A rollback: an alias moved back to a release it held under valid signatures
(docs/operations.md#rolling-back-a-release).

Such a move never needs the promotion gates of a protected alias (steps (4a) baseline,
(4b) replay, (4c) release gates): the release was promoted once, under the signatures of
the alias's signers, and going back to it is what an incident needs. Everything else is
judged as for any move: (1) who moves it, (2) the quarantine, (3) the current policy, and
the signatures of the alias's signers (its TUF role's threshold) before any worker follows.

"Held under valid signatures" is read from the signed history, never from a mutable row
alone (``signed_earlier_targets``):

1. the roles that top-level targets (verified from the pinned root chain) delegates the
   alias's path to now;
2. every stored version of those roles, up to the version the registry accepted (its own
   publish, or the one its verified snapshot lists): a newer row is a database writer's;
3. each version whose signatures meet the role's delegation now (its keys and threshold):
   a version that does not verify names nothing (a forged or garbage row); so does one
   signed only by a key since removed from the delegation (fail closed);
4. the digests those versions set the alias's path to.

A digest in that set that is not the alias's current target is a rollback
(``as_rollback``); any other move, an earlier target the registry recorded unsigned
included, is judged with every step.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session
from tuf.api.exceptions import RepositoryError
from tuf.api.metadata import Metadata, Targets
from tuf.api.serialization import DeserializationError

from modelward.attest.alias_decision import MoveRequest
from modelward.attest.tuf import alias_path
from modelward.registry.domains.signing.tuf.repository import MetadataRepository
from modelward.registry.domains.signing.tuf.store import SessionStore
from modelward.registry.errors import RegistryError

__all__ = ["PROMOTION_GATES", "as_rollback", "signed_earlier_targets"]

# the steps that guard a promotion, never a rollback (attest.alias_decision's module doc)
PROMOTION_GATES = frozenset({"4a", "4b", "4c"})


def signed_earlier_targets(session: Session, repo_name: str, alias: str) -> frozenset[str]:
    """Every digest a signed version of the role deciding ``repo_name@alias`` set it to
    (module doc, steps (1)-(4)); empty when no verified delegation can be read."""
    path = alias_path(repo_name, alias)
    repo = MetadataRepository(SessionStore(session), {})
    # (1): the delegation now, verified from the root chain.
    try:
        top = repo.open(Targets.type)
    except (RegistryError, RepositoryError, ValueError):
        return frozenset()
    delegations = top.signed.delegations
    if delegations is None:
        return frozenset()
    roles = [name for name, _ in delegations.get_roles_for_target(path)]
    found: set[str] = set()
    for role in roles:
        # (2): the stored versions the registry accepted.
        accepted = repo.accepted_version(role)
        if accepted is None:
            continue
        rows = SessionStore(session).versions_up_to(role, accepted)
        for data in rows:
            # (3): signed by the role's threshold of its delegation's keys now.
            try:
                md = Metadata[Targets].from_bytes(bytes(data))
                top.signed.verify_delegate(role, md.signed_bytes, md.signatures)
            except (RepositoryError, DeserializationError, ValueError, TypeError):
                continue
            # (4): what it set the alias to.
            target = md.signed.targets.get(path) if isinstance(md.signed, Targets) else None
            sha256 = target.hashes.get("sha256") if target is not None else None
            if sha256:
                found.add(f"sha256:{sha256}")
    return frozenset(found)


def as_rollback(request: MoveRequest, signed_earlier: frozenset[str]) -> MoveRequest:
    """``request`` judged as a rollback when its digest is one the alias held under valid
    signatures and not its target now: asked as one, without the promotion gates. Any other
    request is returned as it is."""
    if request.digest == request.current or request.digest not in signed_earlier:
        return request
    return replace(request, rollback=True, judged=request.judged - PROMOTION_GATES)
