"""The audit log's Merkle tree (RFC 6962 / RFC 9162): pure logic, no I/O.

Hashing (RFC 9162 §2.1.1): a leaf is ``SHA-256(0x00 || entry)``, an interior node
``SHA-256(0x01 || left || right)``, the empty tree ``SHA-256("")``. ``MTH(D[n])`` for ``n > 1``
splits the leaves at ``k``, the largest power of two smaller than ``n``.

Storage model: a *perfect* subtree is addressed as ``(level, index)`` and covers the leaves
``[index * 2**level, (index + 1) * 2**level)``. The registry stores the hash of each perfect
subtree once it is complete (level 0: the leaf hashes), in the same transaction as the event.
Appending leaf ``i`` completes one node per trailing 1-bit of ``i`` (one on average), built from
left siblings already stored (``append_needs`` / ``append_nodes``). Every other hash a root or a
proof needs is the fold of at most ``log2(n)`` stored nodes (``perfect_cover``), so roots and
proofs cost ``O(log n)`` (``O(log² n)`` hashes for a consistency proof), never ``O(n)``.

Proofs: ``inclusion_ranges`` and ``consistency_ranges`` name the leaf ranges whose hashes make
up RFC 9162's PATH (§2.1.3.1) and PROOF (§2.1.4.1); ``verify_inclusion`` and
``verify_consistency`` are §2.1.3.2 and §2.1.4.2 step by step. A verifier that streams the
entries keeps a ``CompactRange`` (``O(log n)`` memory).

Errors (attest.errors)::

    AuditVerificationError
    └── InvalidProof        a proof does not lead from its inputs to the given root(s)

Caller misuse (an index outside the tree, a range RFC 9162 never asks for) is ``ValueError``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from modelward.attest.errors import InvalidProof

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactRange",
    "InvalidProof",
    "Node",
    "Range",
    "append_needs",
    "append_nodes",
    "consistency_ranges",
    "fold",
    "inclusion_ranges",
    "leaf_hash",
    "node_hash",
    "perfect_cover",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
Node = tuple[int, int]  # (level, index) of a perfect subtree
Range = tuple[int, int]  # leaves [start, end)


def leaf_hash(entry: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256(0x00 || entry)."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def fold(hashes: Sequence[bytes]) -> bytes:
    """The hash of consecutive perfect subtrees, left to right: ``H(p1, H(p2, ... pk))``."""
    if not hashes:
        return EMPTY_ROOT
    root = hashes[-1]
    for left in reversed(hashes[:-1]):
        root = node_hash(left, root)
    return root


def perfect_cover(start: int, end: int) -> list[Node]:
    """The perfect subtrees, left to right, whose ``fold`` is ``MTH(D[start:end])``.

    Defined for the ranges RFC 9162's recursions produce: ``start`` is a multiple of the
    smallest power of two not below ``end - start`` (``[0, n)`` always is). Raises ValueError
    for any other range.
    """
    width = end - start
    if start < 0 or width <= 0 or start % (1 << (width - 1).bit_length()):
        raise ValueError(f"[{start}, {end}) is not a subtree range of an RFC 9162 tree")
    nodes: list[Node] = []
    while width:
        level = width.bit_length() - 1
        nodes.append((level, start >> level))
        start += 1 << level
        width -= 1 << level
    return nodes


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """RFC 9162 §2.1.3.1 PATH(index, D[0:size]): the ranges whose hashes form the audit path,
    nearest the leaf first. Raises ValueError unless ``0 <= index < size``."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    path: list[Range] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:  # PATH(m, D[0:k]) : MTH(D[k:n])
            path.append((lo + k, hi))
            hi = lo + k
        else:  # PATH(m - k, D[k:n]) : MTH(D[0:k])
            path.append((lo, lo + k))
            lo += k
    path.reverse()
    return path


def consistency_ranges(old_size: int, new_size: int) -> list[Range]:
    """RFC 9162 §2.1.4.1 PROOF(old_size, D[0:new_size]) as ranges, in proof order.

    Empty when ``old_size`` is 0 or equals ``new_size``. Raises ValueError when
    ``old_size > new_size`` or a size is negative.
    """
    if not 0 <= old_size <= new_size:
        raise ValueError(f"no consistency proof from size {old_size} to size {new_size}")
    if old_size in (0, new_size):
        return []
    proof: list[Range] = []
    m, lo, hi, whole = old_size, 0, new_size, True
    while True:
        if m == hi - lo:  # SUBPROOF(m, D[m], b): {} if b, else {MTH(D[m])}
            if not whole:
                proof.append((lo, hi))
            break
        k = _split(hi - lo)
        if m <= k:  # SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
            proof.append((lo + k, hi))
            hi = lo + k
        else:  # SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])
            proof.append((lo, lo + k))
            lo += k
            m -= k
            whole = False
    proof.reverse()
    return proof


def append_needs(index: int) -> list[Node]:
    """The stored nodes appending leaf ``index`` reads: the left sibling of each node the new
    leaf completes (one per trailing 1-bit of ``index``)."""
    needs: list[Node] = []
    level = 0
    while index & 1:
        needs.append((level, index - 1))
        index >>= 1
        level += 1
    return needs


def append_nodes(index: int, leaf: bytes, stored: Mapping[Node, bytes]) -> list[tuple[Node, bytes]]:
    """The nodes to store when leaf ``index`` (hash ``leaf``) is appended: the leaf and every
    perfect subtree it completes. ``stored`` holds ``append_needs(index)``; a missing one is a
    KeyError (the stored tree is incomplete)."""
    out: list[tuple[Node, bytes]] = [((0, index), leaf)]
    digest, level = leaf, 0
    while index & 1:
        digest = node_hash(stored[(level, index - 1)], digest)
        index >>= 1
        level += 1
        out.append(((level, index), digest))
    return out


class CompactRange:
    """The hashes of the perfect subtrees covering leaves ``[0, size)``: enough to extend the
    tree and compute its root, in ``O(log n)`` memory."""

    def __init__(self) -> None:
        self.size = 0
        self._peaks: list[bytes] = []  # left to right, one per 1-bit of size

    def append(self, leaf: bytes) -> None:
        digest, index = leaf, self.size
        while index & 1:
            digest = node_hash(self._peaks.pop(), digest)
            index >>= 1
        self._peaks.append(digest)
        self.size += 1

    def root(self) -> bytes:
        return fold(self._peaks)


def _is_hash(value: bytes) -> bool:
    return len(value) == HASH_SIZE


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162 §2.1.3.2: ``leaf`` is leaf ``index`` of the tree of ``size`` with ``root``.

    Raises InvalidProof.
    """

    def fail(reason: str) -> InvalidProof:
        return InvalidProof("inclusion", reason, index=index, tree_size=size)

    if not (_is_hash(leaf) and _is_hash(root) and all(_is_hash(p) for p in proof)):
        raise fail(f"every hash must be {HASH_SIZE} bytes")
    # (1): the leaf index is inside the tree.
    if not 0 <= index < size:
        raise fail("the leaf index is not inside the tree")
    # (2), (3): fn = leaf index, sn = tree size - 1, r = the leaf hash.
    fn, sn, r = index, size - 1, leaf
    # (4): fold the path in.
    for p in proof:
        if sn == 0:  # (4a): the path is longer than the tree is deep
            raise fail("the proof has more hashes than the tree has levels")
        if fn & 1 or fn == sn:  # (4b): p is a left sibling
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:  # p is a right sibling
            r = node_hash(r, p)
        fn >>= 1  # (4c)
        sn >>= 1
    # (5): the whole path was used and it led to the root.
    if sn != 0:
        raise fail("the proof has fewer hashes than the tree has levels")
    if r != root:
        raise fail("the path leads to another root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2: the tree of ``new_size`` with ``new_root`` extends the tree of
    ``old_size`` with ``old_root`` (it only grew). Raises InvalidProof.
    """

    def fail(reason: str) -> InvalidProof:
        return InvalidProof("consistency", reason, from_size=old_size, to_size=new_size)

    if not (_is_hash(old_root) and _is_hash(new_root) and all(_is_hash(p) for p in proof)):
        raise fail(f"every hash must be {HASH_SIZE} bytes")
    if not 0 <= old_size <= new_size:
        raise fail("the new tree is smaller than the old one")
    if old_size == new_size:  # the same tree: no proof, the same root
        if proof:
            raise fail("a proof between equal sizes must be empty")
        if old_root != new_root:
            raise fail("two roots for the same tree size")
        return
    if old_size == 0:  # every tree extends the empty one
        if proof:
            raise fail("a proof from the empty tree must be empty")
        return
    # (1): a non-trivial proof is never empty.
    if not proof:
        raise fail("the proof is empty")
    path = list(proof)
    # (2): when the old tree is a perfect subtree, its root is the first hash on the path.
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    # (3): fn = first - 1, sn = second - 1.
    fn, sn = old_size - 1, new_size - 1
    # (4): skip the levels where the old tree's last node is a right child.
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # (5): fr = sr = the first hash.
    fr = sr = path[0]
    # (6): fold the rest in.
    for c in path[1:]:
        if sn == 0:  # (6a)
            raise fail("the proof has more hashes than the tree has levels")
        if fn & 1 or fn == sn:  # (6b)
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1  # (6c)
        sn >>= 1
    # (7): both roots came out, and the whole path was used.
    if sn != 0:
        raise fail("the proof has fewer hashes than the tree has levels")
    if fr != old_root:
        raise fail(
            "the old tree's root does not come out: the log was rewritten or forked at or "
            "before the old size (or the proof is wrong)"
        )
    if sr != new_root:
        raise fail(
            "the new tree's root does not come out: the new tree does not extend the old one, "
            "the log was rewritten or forked at or before the old size (or the proof is wrong)"
        )
