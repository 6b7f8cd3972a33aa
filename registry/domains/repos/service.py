"""Repositories ``org/name``: who may publish, and the policy that judges their bundles.

Authorization is in the queries: ``writable_repo`` only returns a repository the caller may
publish to (admins everywhere, publishers where they are listed); ``orgs.service.creatable_org``
only returns an org the caller may create repositories in (its owners, admins); everybody
authenticated may read a repository. A repository's policy is bounded by its org's floor
(``registry.policy``): checked when it is created, when its policy is replaced, and at use.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

from modelward.attest.names import REPOSITORY_RE
from modelward.registry.domains._principals import principal_named
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.authz import GRANTS, Action, allows, may, may_clause
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.orgs.service import creatable_org
from modelward.registry.domains.repos.listing import readable_repo
from modelward.registry.domains.signing.tuf.seals import RowSeals
from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound
from modelward.registry.models import (
    Identity,
    Org,
    Principal,
    RepoPublisher,
    Repository,
    SigningKey,
)
from modelward.registry.policy import (
    builtin_default_policy,
    effective_policy,
    load_floor,
    parse_policy,
    parse_stored_policy,
    repo_policy,
    require_floor,
)

if TYPE_CHECKING:
    from modelward.attest.trust import TrustSet

__all__ = [
    "add_publisher",
    "all_registered_trust",
    "authorized_repo",
    "builtin_default_policy",
    "create_repo",
    "get_repo",
    "may_publish",
    "org_name",
    "parse_policy",
    "parse_stored_policy",
    "publishers",
    "registered_signer_name",
    "registered_trust",
    "remove_publisher",
    "repo_policy",
    "set_policy",
    "writable_repo",
]

NAME_RE = REPOSITORY_RE  # attest.names: the one repository grammar, the client's too


def _sha(text: str | None) -> str | None:
    return None if text is None else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def create_repo(
    session: Session,
    *,
    name: str,
    policy_yaml: str | None,
    caller: Caller,
    default_policy_yaml: str | None,
    seals: RowSeals | None = None,
    private: bool | None = None,
) -> Repository:
    """Create ``org/name``; the caller becomes its publisher (a row sealed with ``seals``:
    registry.domains.signing.tuf.seals; None: unsealed, in no TUF delegation). In order:

    1. the caller is a publisher or an admin, and the name is ``org/name``;
    2. the caller may create repositories in the org (``creatable_org``: its owners; admins,
       who create a missing org implicitly);
    3. the policy (the repository's own, else the operator's or the packaged default) is
       valid and meets the org's floor (400 ``invalid_policy`` / ``policy_below_floor``);
    4. the name is free (409).

    ``private`` None: the org's ``private_by_default`` (docs/registry.md#private-repositories).
    """
    if not allows(caller.role, Action.OWN):
        raise Forbidden(f"role {caller.role!r} may not create repositories")
    if not NAME_RE.fullmatch(name):
        raise BadRequest(f"invalid repository name {name!r}: use org/name (lowercase)")
    org = creatable_org(session, org_name(name), caller)
    source = f"{name} policy"
    policy = effective_policy(policy_yaml, default_policy_yaml, source, name)
    require_floor(policy, load_floor(org.floor), source)
    if session.execute(select(Repository.id).where(Repository.name == name)).first():
        raise Conflict(f"repository {name} already exists")
    repo = Repository(
        name=name,
        org_id=org.id,
        policy_yaml=policy_yaml,
        created_by=caller.id,
        private=org.private_by_default if private is None else private,
    )
    if seals is not None:  # registry.domains.signing.tuf.seals
        repo.seal = seals.policy(name, policy_yaml)
    session.add(repo)
    session.flush()
    publisher = RepoPublisher(repo_id=repo.id, principal_id=caller.id)
    if seals is not None:
        publisher.seal = seals.publisher(name, caller.id)
    session.add(publisher)
    append(
        session,
        actor=caller.name,
        action="repo.create",
        subject=name,
        details={"policy_sha256": _sha(policy_yaml), "org": org.name, "private": repo.private},
    )
    return repo


def org_name(repo_name: str) -> str:
    return repo_name.split("/", 1)[0]


def get_repo(session: Session, name: str, caller: Caller) -> Repository:
    """The repository ``name`` if ``caller`` may read it (``listing.readable_repo``: the read
    rule in the query); the same NotFound whether it is missing or unreadable. Every lookup
    of a repository by name goes through here or ``readable_repo``
    (tests/registry/test_private_repos_rule.py)."""
    return readable_repo(session, name, caller)


def authorized_repo(session: Session, name: str) -> Repository:
    """The repository ``name`` for a write its caller was already authorized for (the
    alias row a decided move records: ``moves.service.record_move``); NotFound otherwise.
    Never a read door: those use ``get_repo`` (tests/registry/test_private_repos_rule.py
    lists the callers)."""
    repo = session.execute(select(Repository).where(Repository.name == name)).scalar_one_or_none()
    if repo is None:
        raise NotFound(f"no repository {name}")
    return repo


def writable_repo(session: Session, name: str, caller: Caller) -> Repository:
    """The repository if ``caller`` may publish to it; Forbidden or NotFound otherwise."""
    if not allows(caller.role, Action.PUBLISH):
        get_repo(session, name, caller)  # NotFound when missing or unreadable
        raise Forbidden(f"role {caller.role!r} may not publish to {name}")
    query = select(Repository).where(Repository.name == name, may_clause(caller, Action.PUBLISH))
    repo = session.execute(query).scalar_one_or_none()
    if repo is None:
        get_repo(session, name, caller)  # NotFound when it is missing or unreadable
        raise Forbidden(f"{caller.name} may not publish to {name}")
    return repo


def may_publish(session: Session, repo: Repository, caller: Caller) -> bool:
    """``auth.authz.may(caller, PUBLISH, repo)``: admins anywhere, listed publishers."""
    return may(session, caller, Action.PUBLISH, repo)


def publishers(session: Session, repo: Repository) -> list[str]:
    return list(
        session.execute(
            select(Principal.name)
            .join(RepoPublisher, RepoPublisher.principal_id == Principal.id)
            .where(RepoPublisher.repo_id == repo.id)
            .order_by(Principal.name)
        ).scalars()
    )


def set_policy(
    session: Session, *, name: str, policy_yaml: str, caller: Caller, seals: RowSeals
) -> Repository:
    """Replace a repository's policy (admins): it must be self-contained and meet the org's
    floor (400 ``invalid_policy`` / ``policy_below_floor``); sealed with ``seals``
    (registry.domains.signing.tuf.seals)."""
    if not caller.is_admin:
        raise Forbidden("only an admin may replace a repository's policy")
    repo = get_repo(session, name, caller)
    source = f"{name} policy"
    policy = parse_stored_policy(policy_yaml, source, name)
    org = session.get(Org, repo.org_id)
    if org is None:  # the foreign key rules this out; never read it as "no floor"
        raise RuntimeError(f"repository {name} has no org")
    require_floor(policy, load_floor(org.floor), source)
    old = repo.policy_yaml
    repo.policy_yaml = policy_yaml
    repo.seal = seals.policy(name, policy_yaml)
    append(
        session,
        actor=caller.name,
        action="repo.policy",
        subject=name,
        details={"from_sha256": _sha(old), "to_sha256": _sha(policy_yaml)},
    )
    return repo


def add_publisher(
    session: Session, *, name: str, principal: str, caller: Caller, seals: RowSeals
) -> None:
    """Make ``principal`` a publisher of ``name``: a row sealed with ``seals``."""
    if not caller.is_admin:
        raise Forbidden("only an admin may add publishers to a repository")
    repo = get_repo(session, name, caller)
    row = principal_named(session, principal)
    if not allows(row.role, Action.OWN):
        raise BadRequest(f"{principal} has role {row.role!r}; only publishers can publish")
    publisher = session.get(RepoPublisher, (repo.id, row.id))
    if publisher is None:
        publisher = RepoPublisher(repo_id=repo.id, principal_id=row.id)
        session.add(publisher)
    publisher.seal = seals.publisher(repo.name, row.id)  # registry.domains.signing.tuf.seals
    append(
        session,
        actor=caller.name,
        action="repo.publisher.add",
        subject=name,
        details={"principal": principal},
    )


def remove_publisher(session: Session, *, name: str, principal: str, caller: Caller) -> None:
    """Take ``principal`` off the publishers of ``name`` (``add_publisher``'s counterpart);
    audited ``repo.publisher.remove``. Its keys leave the repository's alias roles when the
    delegations are next made (``trust.service.sync``).

    Raises Forbidden (not an admin), NotFound (no such repository or principal, or the
    principal is not a publisher of it)."""
    if not caller.is_admin:
        raise Forbidden("only an admin may remove publishers from a repository")
    repo = get_repo(session, name, caller)
    row = principal_named(session, principal)
    publisher = session.get(RepoPublisher, (repo.id, row.id))
    if publisher is None:
        raise NotFound(
            f"{principal} is not a publisher of {repo.name}",
            detail={"repository": repo.name, "principal": principal},
        )
    session.delete(publisher)
    session.flush()
    append(
        session,
        actor=caller.name,
        action="repo.publisher.remove",
        subject=name,
        details={"principal": principal},
    )


def registered_signer_name(principal: str) -> str:
    """The signer name of a principal's registered keys and identities: ``@<principal>``.

    Policy signer names must start with a letter or digit, so a registered key can never
    stand in for a signer a policy pins by name; one principal still counts once toward a
    threshold (all its keys and identities share the name)."""
    return f"@{principal}"


def registered_trust(session: Session, repo: Repository) -> TrustSet:
    """Keys and identities registered to the repository's publishers and to admins, each
    named ``@<principal>`` (registered_signer_name)."""
    allowed = select(Principal.id).where(
        or_(
            Principal.role.in_(GRANTS[Action.ADMINISTER].roles),
            Principal.id.in_(
                select(RepoPublisher.principal_id).where(RepoPublisher.repo_id == repo.id)
            ),
        )
    )
    return _registered_signers(session, allowed)


def all_registered_trust(session: Session) -> TrustSet:
    """Every unrevoked registered key and identity, each named ``@<principal>``
    (registered_signer_name): what an attestation may be signed by to verify at all."""
    return _registered_signers(session, None)


def _registered_signers(session: Session, allowed: Select[int] | None) -> TrustSet:
    """The unrevoked keys and identities of the principals ``allowed`` selects (all when
    None) as a TrustSet; the one place a registered signer gets its name."""
    from modelward.attest.keys import load_public_key, trusted_key
    from modelward.attest.trust import TrustedIdentity, TrustSet

    key_query = (
        select(SigningKey, Principal.name)
        .join(Principal, Principal.id == SigningKey.principal_id)
        .where(SigningKey.revoked_at.is_(None))
    )
    ident_query = (
        select(Identity, Principal.name)
        .join(Principal, Principal.id == Identity.principal_id)
        .where(Identity.revoked_at.is_(None))
    )
    if allowed is not None:
        key_query = key_query.where(SigningKey.principal_id.in_(allowed))
        ident_query = ident_query.where(Identity.principal_id.in_(allowed))
    keys = session.execute(key_query).all()
    idents = session.execute(ident_query).all()
    return TrustSet(
        keys=tuple(
            trusted_key(
                registered_signer_name(pname),
                load_public_key(k.public_key_pem.encode(), f"key {k.keyid}"),
            )
            for k, pname in keys
        ),
        identities=tuple(
            TrustedIdentity(registered_signer_name(pname), i.identity, i.issuer)
            for i, pname in idents
        ),
    )
