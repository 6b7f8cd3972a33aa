"""Repositories ``org/name``: who may publish, and the policy that judges their bundles.

Authorization is in the queries: ``writable_repo`` only returns a repository the caller may
publish to (admins everywhere, publishers where they are listed); everybody authenticated may
read a repository.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import TYPE_CHECKING

from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.service import Caller
from modelward.registry.errors import BadRequest, Conflict, Forbidden, NotFound
from modelward.registry.models import Identity, Principal, RepoPublisher, Repository, SigningKey

if TYPE_CHECKING:
    from modelward.attest.policy import Policy
    from modelward.attest.trust import TrustSet

__all__ = [
    "add_publisher",
    "all_registered_trust",
    "builtin_default_policy",
    "create_repo",
    "get_repo",
    "may_publish",
    "parse_policy",
    "parse_stored_policy",
    "publishers",
    "registered_signer_name",
    "registered_trust",
    "repo_policy",
    "set_policy",
    "writable_repo",
]

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}/[a-z0-9][a-z0-9._-]{0,99}$")


def builtin_default_policy() -> str:
    policies = resources.files("modelward.policies")
    return policies.joinpath("default.yaml").read_text(encoding="utf-8")


def parse_policy(text: str, source: str = "policy") -> Policy:
    """Validate a policy document; raises BadRequest (invalid_policy) naming the field."""
    from modelward.attest.errors import PolicyError
    from modelward.attest.policy import load_policy

    try:
        return load_policy(text.encode(), source=source)
    except PolicyError as exc:
        raise BadRequest(str(exc), code="invalid_policy") from exc
    except RecursionError as exc:
        raise BadRequest(f"{source}: nested too deeply", code="invalid_policy") from exc


def _file_references(policy: Policy) -> list[str]:
    """The fields of ``policy`` that name a file (not inline PEM)."""
    fields = [f"signers.keys[{i}].path" for i, k in enumerate(policy.signers.keys) if k.path]
    for i, ca in enumerate(policy.signers.cas):
        for part in ("roots", "intermediates"):
            fields += [
                f"signers.cas[{i}].{part}[{j}]"
                for j, ref in enumerate(getattr(ca, part))
                if not ref.lstrip().startswith("-----BEGIN")
            ]
    fields += [
        f"signers.identities[{i}].trust_root"
        for i, ident in enumerate(policy.signers.identities)
        if ident.trust_root is not None
    ]
    return fields


def parse_stored_policy(text: str, source: str = "policy") -> Policy:
    """Validate a policy sent through the API: it must be self-contained.

    A stored policy is read by the server, so a file path in it would make the server open
    its own files on a publisher's say (an existence oracle, or worse). Keys and certificates
    must be inline PEM; ``trust_root`` (a file) is refused: identities use the public-good
    root. Raises BadRequest (invalid_policy) naming every field at fault.
    """
    policy = parse_policy(text, source)
    refs = _file_references(policy)
    if refs:
        raise BadRequest(
            f"{source}: {refs[0]}: a policy stored in the registry must be self-contained: "
            "give keys and certificates as inline PEM, not file paths (trust_root is refused)",
            detail={"fields": refs},
            code="invalid_policy",
        )
    return policy


def repo_policy(repo: Repository, default_policy_yaml: str | None) -> Policy:
    """The repository's own (self-contained) policy, else the operator's, else the packaged
    default. Raises BadRequest (invalid_policy)."""
    if repo.policy_yaml:
        return parse_stored_policy(repo.policy_yaml, f"{repo.name} policy")
    text = default_policy_yaml or builtin_default_policy()
    return parse_policy(text, f"{repo.name} policy")


def _sha(text: str | None) -> str | None:
    return None if text is None else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def create_repo(
    session: Session, *, name: str, policy_yaml: str | None, caller: Caller
) -> Repository:
    if caller.role not in ("admin", "publisher"):
        raise Forbidden(f"role {caller.role!r} may not create repositories")
    if not NAME_RE.fullmatch(name):
        raise BadRequest(f"invalid repository name {name!r}: use org/name (lowercase)")
    if policy_yaml is not None:
        parse_stored_policy(policy_yaml, f"{name} policy")
    if session.execute(select(Repository.id).where(Repository.name == name)).first():
        raise Conflict(f"repository {name} already exists")
    repo = Repository(name=name, policy_yaml=policy_yaml, created_by=caller.id)
    session.add(repo)
    session.flush()
    session.add(RepoPublisher(repo_id=repo.id, principal_id=caller.id))
    append(
        session,
        actor=caller.name,
        action="repo.create",
        subject=name,
        details={"policy_sha256": _sha(policy_yaml)},
    )
    return repo


def get_repo(session: Session, name: str) -> Repository:
    repo = session.execute(select(Repository).where(Repository.name == name)).scalar_one_or_none()
    if repo is None:
        raise NotFound(f"no repository {name}")
    return repo


def writable_repo(session: Session, name: str, caller: Caller) -> Repository:
    """The repository if ``caller`` may publish to it; Forbidden or NotFound otherwise."""
    query = select(Repository).where(Repository.name == name)
    if not caller.is_admin:
        if caller.role != "publisher":
            get_repo(session, name)
            raise Forbidden(f"role {caller.role!r} may not publish to {name}")
        member = select(RepoPublisher.repo_id).where(
            RepoPublisher.repo_id == Repository.id, RepoPublisher.principal_id == caller.id
        )
        query = query.where(member.exists())
    repo = session.execute(query).scalar_one_or_none()
    if repo is None:
        get_repo(session, name)  # NotFound when it does not exist at all
        raise Forbidden(f"{caller.name} may not publish to {name}")
    return repo


def may_publish(session: Session, repo: Repository, caller: Caller) -> bool:
    if caller.is_admin:
        return True
    if caller.role != "publisher":
        return False
    row = session.get(RepoPublisher, (repo.id, caller.id))
    return row is not None


def publishers(session: Session, repo: Repository) -> list[str]:
    return list(
        session.execute(
            select(Principal.name)
            .join(RepoPublisher, RepoPublisher.principal_id == Principal.id)
            .where(RepoPublisher.repo_id == repo.id)
            .order_by(Principal.name)
        ).scalars()
    )


def set_policy(session: Session, *, name: str, policy_yaml: str, caller: Caller) -> Repository:
    if not caller.is_admin:
        raise Forbidden("only an admin may replace a repository's policy")
    repo = get_repo(session, name)
    parse_stored_policy(policy_yaml, f"{name} policy")
    old = repo.policy_yaml
    repo.policy_yaml = policy_yaml
    append(
        session,
        actor=caller.name,
        action="repo.policy",
        subject=name,
        details={"from_sha256": _sha(old), "to_sha256": _sha(policy_yaml)},
    )
    return repo


def add_publisher(session: Session, *, name: str, principal: str, caller: Caller) -> None:
    if not caller.is_admin:
        raise Forbidden("only an admin may add publishers to a repository")
    repo = get_repo(session, name)
    row = session.execute(select(Principal).where(Principal.name == principal)).scalar_one_or_none()
    if row is None:
        raise NotFound(f"no principal named {principal!r}")
    if row.role not in ("publisher", "admin"):
        raise BadRequest(f"{principal} has role {row.role!r}; only publishers can publish")
    if session.get(RepoPublisher, (repo.id, row.id)) is None:
        session.add(RepoPublisher(repo_id=repo.id, principal_id=row.id))
    append(
        session,
        actor=caller.name,
        action="repo.publisher.add",
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
            Principal.role == "admin",
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
