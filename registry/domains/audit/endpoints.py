"""``/v1/audit``: the audit log, its signed checkpoints and Merkle proofs (docs/http-api.md).

Events and inclusion proofs: admins and reviewers. The checkpoint and consistency proofs carry
only sizes and hashes: any authenticated principal (serving workers record the checkpoint in
their boot reports).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import Query

from modelward.attest.audit.chain import event_to_json
from modelward.registry.domains._router import domain_router
from modelward.registry.domains._state import State
from modelward.registry.domains.audit.checkpoints import current_checkpoint
from modelward.registry.domains.audit.keyfile import checkpoint_signer
from modelward.registry.domains.audit.service import page
from modelward.registry.domains.audit.tree import (
    consistency_proof,
    inclusion_proof,
    leaf_at,
    tree_size,
)
from modelward.registry.domains.auth.deps import AnyCaller, Reviewer
from modelward.registry.errors import BadRequest

router = domain_router(prefix="/v1", tags=["audit"])
MAX_SIZE = 2**62


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


@router.get("/audit")
def list_events(
    caller: Reviewer,
    state: State,
    after: Annotated[int, Query(ge=0, le=MAX_SIZE)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Events with ``seq > after`` in order; ``next_after`` is null once the end is reached."""
    with state.db.read() as session:
        events = page(session, after=after, limit=limit)
    return {
        "events": [event_to_json(e) for e in events],
        "next_after": events[-1].seq if len(events) == limit else None,
    }


@router.get("/audit/checkpoint")
def checkpoint(caller: AnyCaller, state: State) -> dict[str, Any]:
    """The signed checkpoint (C2SP tlog-checkpoint note) of the current tree, signed on demand
    with the registry's checkpoint key; ``verifier_key`` is that key's public half (pin it
    from a trusted channel, not from this answer)."""
    signer = checkpoint_signer(state.settings)
    return current_checkpoint(state.db, signer).to_json(signer)


def _require_size(size: int, current: int) -> None:
    if size > current:
        raise BadRequest(
            f"the audit log has {current} events, not {size}",
            detail={"tree_size": current},
            code="invalid_tree_size",
        )


@router.get("/audit/proof/inclusion")
def prove_inclusion(
    caller: Reviewer,
    state: State,
    index: Annotated[int, Query(ge=0, le=MAX_SIZE, description="leaf index = seq - 1")],
    size: Annotated[int, Query(ge=1, le=MAX_SIZE, description="tree size of a checkpoint")],
) -> dict[str, Any]:
    """RFC 9162 inclusion proof of event ``seq = index + 1`` in the tree of ``size`` events:
    the audit path, nearest the leaf first."""
    if index >= size:
        raise BadRequest(
            f"leaf index {index} is not in a tree of {size} events",
            detail={"index": index, "tree_size": size},
            code="invalid_tree_size",
        )
    with state.db.read() as session:
        _require_size(size, tree_size(session))
        proof = inclusion_proof(session, index, size)
        leaf = leaf_at(session, index)
    return {
        "index": index,
        "seq": index + 1,
        "tree_size": size,
        "leaf_hash": _b64(leaf),
        "proof": [_b64(p) for p in proof],
    }


@router.get("/audit/proof/consistency")
def prove_consistency(
    caller: AnyCaller,
    state: State,
    first: Annotated[int, Query(alias="from", ge=0, le=MAX_SIZE, description="older size")],
    second: Annotated[int, Query(alias="to", ge=0, le=MAX_SIZE, description="newer size")],
) -> dict[str, Any]:
    """RFC 9162 consistency proof that the tree of ``to`` events extends the tree of
    ``from`` events (empty when ``from`` is 0 or equals ``to``)."""
    if first > second:
        raise BadRequest(
            f"no consistency proof from {first} events to fewer ({second})",
            detail={"from": first, "to": second},
            code="invalid_tree_size",
        )
    with state.db.read() as session:
        _require_size(second, tree_size(session))
        proof = consistency_proof(session, first, second)
    return {"from": first, "to": second, "proof": [_b64(p) for p in proof]}
