"""The audit log's Merkle tree in the database: ``audit_tree_nodes`` holds every complete
perfect subtree (attest.audit.tree). Appends add O(1) nodes on average and read O(log n);
roots and proofs read O(log n) nodes in one query each."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import and_, func, insert, or_, select
from sqlalchemy.orm import Session

from modelward.attest.audit.tree import (
    Node,
    Range,
    append_needs,
    append_nodes,
    consistency_ranges,
    fold,
    inclusion_ranges,
    perfect_cover,
)
from modelward.registry.errors import RegistryError
from modelward.registry.models import AuditNode

__all__ = [
    "TreeIncomplete",
    "add_leaf",
    "consistency_proof",
    "inclusion_proof",
    "leaf_at",
    "root_at",
    "tree_size",
]


class TreeIncomplete(RegistryError):  # noqa: N818 - the name is the finding
    """A node the tree must hold is missing (the table was edited or truncated)."""

    code = "audit_log_inconsistent"

    def __init__(self, missing: Collection[Node]) -> None:
        self.missing = sorted(missing)
        shown = ", ".join(f"(level {lv}, index {ix})" for lv, ix in self.missing[:5])
        super().__init__(
            f"the audit log's Merkle tree lacks node(s) {shown}: audit_tree_nodes was edited; "
            "run `modelward audit verify --database-url ...`",
            detail={"missing": [list(n) for n in self.missing[:20]]},
        )


def _load(session: Session, wanted: Collection[Node]) -> dict[Node, bytes]:
    if not wanted:
        return {}
    rows = session.execute(
        select(AuditNode.level, AuditNode.idx, AuditNode.hash).where(
            or_(*(and_(AuditNode.level == lv, AuditNode.idx == ix) for lv, ix in set(wanted)))
        )
    )
    found = {(int(lv), int(ix)): bytes(h) for lv, ix, h in rows}
    missing = set(wanted) - set(found)
    if missing:
        raise TreeIncomplete(missing)
    return found


def tree_size(session: Session) -> int:
    """The number of leaves (the highest level-0 index + 1)."""
    last = session.execute(select(func.max(AuditNode.idx)).where(AuditNode.level == 0)).scalar()
    return 0 if last is None else int(last) + 1


def add_leaf(session: Session, index: int, leaf: bytes) -> None:
    """Store leaf ``index`` and every perfect subtree it completes (caller's transaction)."""
    stored = _load(session, append_needs(index))
    session.execute(
        insert(AuditNode),
        [
            {"level": lv, "idx": ix, "hash": digest}
            for (lv, ix), digest in append_nodes(index, leaf, stored)
        ],
    )


def _hashes(session: Session, ranges: Sequence[Range]) -> list[bytes]:
    covers = [perfect_cover(start, end) for start, end in ranges]
    nodes = _load(session, {n for cover in covers for n in cover})
    return [fold([nodes[n] for n in cover]) for cover in covers]


def root_at(session: Session, size: int) -> bytes:
    """The root of the tree's first ``size`` leaves (``size`` <= tree_size)."""
    return _hashes(session, [(0, size)])[0] if size else fold([])


def leaf_at(session: Session, index: int) -> bytes:
    return _load(session, [(0, index)])[(0, index)]


def inclusion_proof(session: Session, index: int, size: int) -> list[bytes]:
    """RFC 9162 PATH(index, D[0:size])."""
    return _hashes(session, inclusion_ranges(index, size))


def consistency_proof(session: Session, old_size: int, new_size: int) -> list[bytes]:
    """RFC 9162 PROOF(old_size, D[0:new_size])."""
    return _hashes(session, consistency_ranges(old_size, new_size))
