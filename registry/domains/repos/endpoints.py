"""``/v1/repos``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from modelward.attest.policy import MAX_POLICY_BYTES
from modelward.registry.domains._state import State, iso
from modelward.registry.domains.auth.deps import Admin, AnyCaller, Publisher
from modelward.registry.domains.repos import service
from modelward.registry.models import Repository

router = APIRouter(prefix="/v1/repos", tags=["repositories"])


class RepoIn(BaseModel):
    name: str = Field(max_length=201)
    policy_yaml: str | None = Field(default=None, max_length=MAX_POLICY_BYTES)


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
    }


@router.post("", status_code=201)
def create_repo(body: RepoIn, caller: Publisher, state: State) -> dict[str, Any]:
    """Create ``org/name`` (the org's owners, admins); its policy must meet the org's floor."""
    with state.db.write() as session:
        repo = service.create_repo(
            session,
            name=body.name,
            policy_yaml=body.policy_yaml,
            caller=caller,
            default_policy_yaml=state.default_policy_yaml,
        )
        return _out(repo, service.publishers(session, repo))


@router.get("/{org}/{name}")
def get_repo(org: str, name: str, caller: AnyCaller, state: State) -> dict[str, Any]:
    with state.db.read() as session:
        repo = service.get_repo(session, f"{org}/{name}")
        return _out(repo, service.publishers(session, repo))


@router.put("/{org}/{name}/policy")
def set_policy(org: str, name: str, body: PolicyIn, caller: Admin, state: State) -> dict[str, Any]:
    with state.db.write() as session:
        repo = service.set_policy(
            session, name=f"{org}/{name}", policy_yaml=body.policy_yaml, caller=caller
        )
        return _out(repo, service.publishers(session, repo))


@router.post("/{org}/{name}/publishers", status_code=201)
def add_publisher(
    org: str, name: str, body: PublisherIn, caller: Admin, state: State
) -> dict[str, Any]:
    with state.db.write() as session:
        service.add_publisher(
            session, name=f"{org}/{name}", principal=body.principal, caller=caller
        )
        repo = service.get_repo(session, f"{org}/{name}")
        return _out(repo, service.publishers(session, repo))
