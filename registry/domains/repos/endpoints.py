"""``/v1/repos``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from modelward.attest.policy import MAX_POLICY_BYTES
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State, iso
from modelward.registry.domains._who_may_sign import register_change, who_may_sign
from modelward.registry.domains.auth.deps import Admin, AnyCaller, Publisher
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.repos import access, listing, service
from modelward.registry.domains.signing.tuf.bootstrap import row_seals
from modelward.registry.domains.signing.tuf.keys import tuf_keys
from modelward.registry.models import Repository

router = domain_router(prefix="/v1/repos", tags=["repositories"])


class RepoIn(BaseModel):
    name: str = Field(max_length=201)
    policy_yaml: str | None = Field(default=None, max_length=MAX_POLICY_BYTES)
    private: bool | None = Field(
        default=None, description="readable only by its readers; null: the org's default"
    )


class VisibilityIn(BaseModel):
    private: bool


class ReaderIn(BaseModel):
    principal: str = Field(max_length=200)


class PolicyIn(BaseModel):
    policy_yaml: str = Field(max_length=MAX_POLICY_BYTES)


class PublisherIn(BaseModel):
    principal: str = Field(max_length=200)


def _out(repo: Repository, publishers: list[str]) -> dict[str, Any]:
    return {
        "name": repo.name,
        "org": service.org_name(repo.name),
        "policy_yaml": repo.policy_yaml,
        "created_at": iso(repo.created_at),
        "publishers": publishers,
        "private": repo.private,
    }


def _full(session: Session, repo: Repository) -> dict[str, Any]:
    return {
        **_out(repo, service.publishers(session, repo)),
        "readers": access.readers(session, repo),
    }


@router.post("", status_code=201)
def create_repo(body: RepoIn, caller: Publisher, state: State) -> dict[str, Any]:
    """Create ``org/name`` (the org's owners, admins); its policy must meet the org's floor."""
    seals = row_seals(state.db, tuf_keys(state.settings))
    with state.db.write() as session:
        repo = service.create_repo(
            session,
            name=body.name,
            policy_yaml=body.policy_yaml,
            caller=caller,
            default_policy_yaml=state.default_policy_yaml,
            seals=seals,
            private=body.private,
        )
        return _full(session, repo)


@router.get("")
def list_repos(
    *,
    caller: AnyCaller,
    state: State,
    limit: Annotated[int, Query(ge=1, le=listing.MAX_PAGE)] = listing.DEFAULT_PAGE,
    cursor: Annotated[str | None, Query(max_length=listing.MAX_CURSOR_CHARS)] = None,
    org: Annotated[str | None, Query(max_length=100)] = None,
    publishable: bool = False,
) -> dict[str, Any]:
    """The repositories the caller may read, by name, a page at a time (``next``: the
    ``cursor`` of the next page, null on the last); ``org`` keeps one org's, ``publishable``
    those the caller may publish to (``may_publish``)."""
    with state.db.read() as session:
        page = listing.list_repos(
            session, caller, limit=limit, cursor=cursor, org=org, publishable=publishable
        )
    return {"repositories": page.items, "next": page.next}


@router.get("/{org}/{name}")
def get_repo(org: str, name: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    """The repository; ``effective_policy_yaml`` is the policy that judges its bundles now
    (its own, else the operator's, else the packaged default): ``push`` checks against it
    before uploading."""
    with state.db.read() as session:
        repo = service.get_repo(session, f"{org}/{name}", caller)
        out = _full(session, repo)
    default = state.default_policy_yaml or service.builtin_default_policy()
    out["effective_policy_yaml"] = out["policy_yaml"] or default
    return out


@router.put("/{org}/{name}/policy")
def set_policy(
    org: str, name: str, body: PolicyIn, caller: Admin, state: State, *, force: bool = False
) -> dict[str, Any]:
    """Replace the repository's policy (admins; audited ``repo.policy``). A change of who
    may sign: 409 ``signers_would_be_short`` when its alias rules (approvals, protected
    aliases) would leave a live signed alias or rollout plan short of its threshold,
    naming each; ``force`` does it anyway (audited ``tuf.unsigning.forced``)."""
    seals = row_seals(state.db, tuf_keys(state.settings))
    change = f"replace the policy of {org}/{name}"
    with state.db.write() as session:
        with who_may_sign(session, state, change=change, caller=caller, force=force):
            repo = service.set_policy(
                session,
                name=f"{org}/{name}",
                policy_yaml=body.policy_yaml,
                caller=caller,
                seals=seals,
            )
        return _full(session, repo)


@router.post("/{org}/{name}/publishers", status_code=201)
def add_publisher(
    org: str, name: str, body: PublisherIn, caller: Admin, state: State
) -> dict[str, Any]:
    seals = row_seals(state.db, tuf_keys(state.settings))
    with state.db.write() as session:
        service.add_publisher(
            session, name=f"{org}/{name}", principal=body.principal, caller=caller, seals=seals
        )
        repo = service.get_repo(session, f"{org}/{name}", caller)
        return _full(session, repo)


@router.delete("/{org}/{name}/publishers/{principal}")
def remove_publisher(
    org: str, name: str, principal: str, caller: Admin, state: State, *, force: bool = False
) -> dict[str, Any]:
    """Take a principal off the repository's publishers (admins; audited
    ``repo.publisher.remove``): it may no longer push or move aliases there, and its keys
    leave the repository's alias roles when the delegations are next made (at once on the
    next move or refresh); returns the repository. 409 ``signers_would_be_short`` when
    that would leave a live signed alias or rollout plan short of its threshold, naming
    each; ``force`` does it anyway (audited ``tuf.unsigning.forced``)."""
    change = f"remove publisher {principal} from {org}/{name}"
    with state.db.write() as session:
        with who_may_sign(session, state, change=change, caller=caller, force=force):
            service.remove_publisher(
                session, name=f"{org}/{name}", principal=principal, caller=caller
            )
        repo = service.get_repo(session, f"{org}/{name}", caller)
        return _full(session, repo)


@router.put("/{org}/{name}/visibility")
def set_visibility(
    org: str, name: str, body: VisibilityIn, caller: AnyCaller, state: State
) -> dict[str, Any]:
    """Make the repository private (readable only by admins, reviewers, its org's owners
    and members, its publishers and the principals granted read) or public (every
    authenticated principal); the org's owners and admins; audited ``repo.visibility``.
    A caller who may not read it gets the 404 of a missing repository."""
    with state.db.write() as session:
        repo = access.set_visibility(
            session, name=f"{org}/{name}", private=body.private, caller=caller
        )
        return _full(session, repo)


@router.post("/{org}/{name}/readers", status_code=201)
def grant_read(
    org: str, name: str, body: ReaderIn, caller: AnyCaller, state: State
) -> dict[str, Any]:
    """Grant a principal read on the repository (the org's owners and admins; idempotent;
    audited ``repo.grant``); returns the repository."""
    with state.db.write() as session:
        repo = access.grant_read(
            session, name=f"{org}/{name}", principal=body.principal, caller=caller
        )
        return _full(session, repo)


@router.delete("/{org}/{name}/readers/{principal}")
def revoke_read(
    org: str, name: str, principal: str, caller: AnyCaller, state: State
) -> dict[str, Any]:
    """Take back a principal's read grant (the org's owners and admins; audited
    ``repo.revoke``); 404 when it holds none. Returns the repository."""
    with state.db.write() as session:
        repo = access.revoke_read(session, name=f"{org}/{name}", principal=principal, caller=caller)
        return _full(session, repo)


def _preview_remove_publisher(
    session: Session, state: AppState, caller: Caller, args: dict[str, str]
) -> None:
    """``POST /v1/tuf/impact`` change ``remove_publisher`` {repository, principal}."""
    service.remove_publisher(
        session, name=args["repository"], principal=args["principal"], caller=caller
    )


def _preview_set_policy(
    session: Session, state: AppState, caller: Caller, args: dict[str, str]
) -> None:
    """``POST /v1/tuf/impact`` change ``set_policy`` {repository, policy_yaml}."""
    service.set_policy(
        session,
        name=args["repository"],
        policy_yaml=args["policy_yaml"],
        caller=caller,
        seals=row_seals(state.db, tuf_keys(state.settings)),
    )


register_change("remove_publisher", ("repository", "principal"), _preview_remove_publisher)
register_change("set_policy", ("repository", "policy_yaml"), _preview_set_policy)
