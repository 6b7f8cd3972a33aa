"""``/tuf/{file}`` (the TUF metadata, as static files) and ``/v1/tuf/...`` (proposals,
signatures, status, root installs). docs/tuf.md."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import BaseModel, Field

from modelward.registry.domains._names import AliasName, RepositoryName
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import AppState, State
from modelward.registry.domains.auth.deps import Admin, AnyCaller, KeyHolder, bearer_token
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.signing.adopt import adopt as adopt_aliases
from modelward.registry.domains.signing.fast_path import authenticate_reader
from modelward.registry.domains.signing.impact import impact as impact_of
from modelward.registry.domains.signing.proposals import get_proposal, list_proposals
from modelward.registry.domains.signing.publish import refresh
from modelward.registry.domains.signing.resign import propose_resign
from modelward.registry.domains.signing.role_access import (
    may_read_role,
    proposals_readable,
    repository_of_role,
)
from modelward.registry.domains.signing.root import install_root as keep_root
from modelward.registry.domains.signing.root import next_online_keys
from modelward.registry.domains.signing.sign import sign_proposal
from modelward.registry.domains.signing.status import status
from modelward.registry.domains.signing.tuf.served import Missing, etag_matches
from modelward.registry.domains.signing.tuf.store import parse_file_name
from modelward.registry.errors import BadRequest, NotFound

router = domain_router(tags=["trust"])


class SignatureIn(BaseModel):
    keyid: str = Field(min_length=1, max_length=128)
    signature: str = Field(min_length=1, max_length=2048)


class RootIn(BaseModel):
    root: str = Field(max_length=2 * 2**20, description="base64 of the signed root.json")


@router.get("/tuf/{file_name}")
async def metadata_file(file_name: str, request: Request) -> Response:
    """One metadata file, byte for byte: ``timestamp.json`` (``no-cache``) or
    ``VERSION.ROLE.json`` (immutable: a version never changes), with a strong ETag (its
    sha256) and ``304 Not Modified`` for a matching ``If-None-Match``. Any authenticated
    caller, or anyone with ``tuf_public``. Served from memory: the database is read at most
    every ``tuf_freshness_seconds`` and a token at most every ``tuf_token_cache_seconds``
    (docs/tuf.md#serving). What memory answers for a token it knows never reaches this
    function (domains/signing/fast_path.py answers it the same way); this answers the rest,
    and every repository's role ``N.ORG:NAME@….json``: a private repository's only to its
    readers, as a missing file to everyone else (domains/signing/role_access.py)."""
    parsed = parse_file_name(file_name)
    if parsed is None:
        raise NotFound(f"no TUF metadata file {file_name!r}")
    role, version = parsed
    state: AppState = request.app.state.registry
    caller: Caller | None = None
    scoped = repository_of_role(role) is not None
    if not state.settings.tuf_public or (scoped and request.headers.get("authorization")):
        token = bearer_token(request)
        caller = state.tuf_tokens.get(token)
        if caller is None:
            caller = await run_in_threadpool(authenticate_reader, state, token)
        request.state.caller = caller
    if scoped and not await run_in_threadpool(may_read_role, state, role, caller):
        # a private repository's role, to a caller who may not read it: as a missing file
        raise NotFound(f"no TUF metadata file {file_name!r}")
    found = state.tuf_files.peek(role, version)
    if found is None:
        found = await run_in_threadpool(state.tuf_files.load, role, version)
    if found is None or isinstance(found, Missing):
        raise NotFound(f"no TUF metadata file {file_name!r}")
    headers = {"cache-control": found.cache_control, "etag": found.etag}
    if etag_matches(request.headers.get("if-none-match"), found.etag):
        return Response(status_code=304, headers=headers)
    return Response(found.data, media_type="application/json", headers=headers)


@router.get("/v1/tuf/status")
def trust_status(caller: AnyCaller, state: State) -> dict[str, Any]:
    """Every role's version and expiry, which expire soon, the keys held online; a private
    repository's roles only to its readers (docs/tuf.md#private-repositories)."""
    with state.db.read() as session:
        answer = status(session, state)
        for key in ("roles", "short_of_threshold"):
            answer[key] = proposals_readable(session, caller, answer[key])
        return answer


@router.get("/v1/tuf/proposals")
def proposals(
    *,
    caller: AnyCaller,
    state: State,
    pending: bool = True,
    repository: RepositoryName | None = None,
    alias: AliasName | None = None,
) -> dict[str, Any]:
    """The newest proposals (200 at most), pending ones only unless ``pending=false``."""
    with state.db.read() as session:
        items = list_proposals(
            session, state, pending_only=pending, repo_name=repository, alias=alias
        )
        items = proposals_readable(session, caller, items)
    return {"proposals": items}


@router.get("/v1/tuf/proposals/{proposal_id}")
def proposal(proposal_id: int, caller: AnyCaller, state: State) -> dict[str, Any]:
    """One proposal with its ``payload`` (base64 of the unsigned metadata to sign)."""
    with state.db.read() as session:
        found = proposals_readable(session, caller, [get_proposal(session, state, proposal_id)])
    if not found:  # a private repository's proposal: as a missing one
        raise NotFound(f"no TUF proposal {proposal_id}")
    return found[0]


@router.post("/v1/tuf/proposals/{proposal_id}/signatures")
def sign(proposal_id: int, body: SignatureIn, caller: AnyCaller, state: State) -> dict[str, Any]:
    """Add a signature made with one of the caller's keys; published at threshold. A
    proposal the caller may not list (a private repository's, a private-only digest's
    quarantine) is answered as missing, before anything of it is checked."""
    proposal(proposal_id, caller, state)  # NotFound when missing or not the caller's to read
    return sign_proposal(
        state, proposal_id, keyid=body.keyid, signature_hex=body.signature, caller=caller
    )


@router.post("/v1/tuf/root")
def install_root(body: RootIn, caller: Admin, state: State) -> dict[str, Any]:
    """Keep the next root version, signed by the current root's threshold and its own."""
    try:
        data = base64.b64decode(body.root, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"root: not base64: {exc}") from exc
    return keep_root(state, data, caller=caller)


@router.post("/v1/tuf/sync")
def sync(caller: Admin, state: State) -> dict[str, Any]:
    """Re-make the delegations from the database now, and re-sign what is due. ``failed``:
    each step it could not do (``step``, ``code``, ``message``; ``role`` and ``version`` of
    a stored row it refuses), empty when all went well; nothing of a failed re-signing is
    kept. 503 ``tuf_key_unavailable`` when this replica holds no online keys."""
    done = refresh(state)
    with state.db.read() as session:
        return {
            "changed": done.changed,
            "failed": [f.as_json() for f in done.failed],
            **status(session, state),
        }


ImpactKind = Literal[
    "revoke_key",
    "set_role",
    "disable_principal",
    "remove_publisher",
    "remove_member",
    "set_policy",
]


class ImpactIn(BaseModel):
    change: ImpactKind | None = None
    args: dict[Annotated[str, Field(max_length=40)], Annotated[str, Field(max_length=2**18)]] = (
        Field(default_factory=dict, max_length=4)
    )
    revoke_key: str | None = Field(default=None, min_length=1, max_length=128)
    proposal: int | None = Field(default=None, ge=1, le=2**62)
    refuse_if_lost: bool = False


@router.post("/v1/tuf/impact")
def impact(body: ImpactIn, caller: AnyCaller, state: State) -> dict[str, Any]:
    """What one change of who may sign would leave short of its threshold, before it is
    made (the same server-side check the change itself runs; docs/tuf.md#previews):
    ``change`` (``revoke_key`` {keyid}, ``set_role`` {principal, role},
    ``disable_principal`` {principal}, ``remove_publisher`` {repository, principal},
    ``remove_member`` {org, principal}, ``set_policy`` {repository, policy_yaml}) with its
    ``args``, or ``revoke_key`` (the same as change ``revoke_key``), or a top-level targets
    ``proposal``. ``lost``: each live signed alias, rollout plan and quarantine (and the
    quarantine role) that would be short, with ``kind``, ``target``, ``remaining`` of
    ``threshold`` and a ``message``; a private repository's only to its readers, the others
    counted in ``withheld`` (docs/tuf.md#private-repositories). ``refuse_if_lost``: the
    caller will not go ahead if anything would be (withheld ones too), and a non-empty
    answer is audited as ``tuf.unsigning.refused`` (``refused``). Each change only for who
    may make it (a key's: its owner and admins)."""
    kind: str | None = body.change
    args = dict(body.args)
    if body.revoke_key is not None:
        if kind is not None:
            raise BadRequest("name one change: change or revoke_key, not both")
        kind, args = "revoke_key", {"keyid": body.revoke_key}
    return impact_of(
        state,
        caller=caller,
        kind=kind,
        args=args,
        proposal_id=body.proposal,
        refuse_if_lost=body.refuse_if_lost,
    )


class ResignIn(BaseModel):
    repository: RepositoryName
    alias: AliasName | None = None


@router.post("/v1/tuf/resign")
def resign(body: ResignIn, caller: KeyHolder, state: State) -> dict[str, Any]:
    """Proposals re-signing ``repository``'s roles (``alias``: the role deciding it) with
    their signers' newest keys, for them to sign (docs/tuf.md#rotating-a-signers-key):
    ``proposals`` (a pending one reused), ``current`` (roles that need nothing)."""
    return propose_resign(state, repo_name=body.repository, alias=body.alias, caller=caller)


@router.post("/v1/tuf/adopt")
def adopt(caller: Admin, state: State) -> dict[str, Any]:
    """The migration step: propose every alias recorded unsigned, one proposal per role."""
    return {"proposals": adopt_aliases(state, caller=caller)}


@router.post("/v1/tuf/online-keys")
def online_keys(caller: Admin, state: State) -> dict[str, Any]:
    """New snapshot and timestamp keys for ``trust rotate --online``: their public halves."""
    return next_online_keys(state, caller=caller)
