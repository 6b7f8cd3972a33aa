"""attest.audit.tree: RFC 6962 / RFC 9162 hashing and proofs against known vectors and an
independent recursive implementation; every corrupted proof is refused.

The vectors (leaves, roots, inclusion and consistency proofs) are the RFC 6962 test vectors
as published with github.com/transparency-dev/merkle (proof/verify_test.go, Apache-2.0).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from modelward.attest.audit.tree import (
    EMPTY_ROOT,
    CompactRange,
    InvalidProof,
    Node,
    append_needs,
    append_nodes,
    consistency_ranges,
    fold,
    inclusion_ranges,
    leaf_hash,
    node_hash,
    perfect_cover,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    bytes.fromhex(h)
    for h in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]


def _h(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(h) for h in hexes]


# (leaf index, tree size, audit path)
INCLUSION = [
    (0, 1, []),
    (
        0,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        5,
        8,
        _h(
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (2, 3, _h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (
        1,
        5,
        _h(
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
]
# (old size, new size, consistency proof)
CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        6,
        8,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (
        2,
        5,
        _h(
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
    (
        6,
        7,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
]
SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


# -- an independent implementation: RFC 9162 §2.1 read literally, recursive, O(n) ----------
def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(leaves: Sequence[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = _k(len(leaves))
    return hashlib.sha256(b"\x01" + ref_mth(leaves[:k]) + ref_mth(leaves[k:])).digest()


def ref_path(m: int, leaves: Sequence[bytes]) -> list[bytes]:
    if len(leaves) == 1:
        return []
    k = _k(len(leaves))
    if m < k:
        return [*ref_path(m, leaves[:k]), ref_mth(leaves[k:])]
    return [*ref_path(m - k, leaves[k:]), ref_mth(leaves[:k])]


def ref_subproof(m: int, leaves: Sequence[bytes], whole: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if whole else [ref_mth(leaves)]
    k = _k(n)
    if m <= k:
        return [*ref_subproof(m, leaves[:k], whole), ref_mth(leaves[k:])]
    return [*ref_subproof(m - k, leaves[k:], False), ref_mth(leaves[:k])]


# -- the stored-node model the registry uses -----------------------------------------------
class NodeStore:
    """The registry's storage model in memory: appends read only ``append_needs``."""

    def __init__(self) -> None:
        self.nodes: dict[Node, bytes] = {}
        self.size = 0
        self.reads = 0

    def append(self, entry: bytes) -> None:
        needs = append_needs(self.size)
        self.reads += len(needs)
        stored = {n: self.nodes[n] for n in needs}
        self.nodes.update(append_nodes(self.size, leaf_hash(entry), stored))
        self.size += 1

    def range_hash(self, start: int, end: int) -> bytes:
        return fold([self.nodes[n] for n in perfect_cover(start, end)])

    def root(self, size: int) -> bytes:
        return self.range_hash(0, size) if size else EMPTY_ROOT

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return [self.range_hash(a, b) for a, b in inclusion_ranges(index, size)]

    def consistency(self, old: int, new: int) -> list[bytes]:
        return [self.range_hash(a, b) for a, b in consistency_ranges(old, new)]


def _store(entries: Sequence[bytes]) -> NodeStore:
    store = NodeStore()
    for entry in entries:
        store.append(entry)
    return store


def test_roots_match_the_rfc6962_vectors() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    store = _store(LEAVES)
    compact = CompactRange()
    for n, leaf in enumerate(LEAVES, start=1):
        compact.append(leaf_hash(leaf))
        assert compact.root() == ROOTS[n - 1], n
        assert store.root(n) == ROOTS[n - 1], n
        assert ref_mth(LEAVES[:n]) == ROOTS[n - 1], n


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION)
def test_inclusion_proofs_match_the_vectors(index: int, size: int, proof: list[bytes]) -> None:
    store = _store(LEAVES)
    assert store.inclusion(index, size) == proof
    verify_inclusion(leaf_hash(LEAVES[index]), index, size, proof, ROOTS[size - 1])


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_consistency_proofs_match_the_vectors(old: int, new: int, proof: list[bytes]) -> None:
    store = _store(LEAVES)
    assert store.consistency(old, new) == proof
    verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], proof)


def test_every_root_and_proof_matches_the_independent_implementation() -> None:
    entries = [f"event {i}".encode() for i in range(40)]
    store = _store(entries)
    for n in range(41):
        root = ref_mth(entries[:n])
        assert store.root(n) == root, n
        for m in range(n):
            proof = store.inclusion(m, n)
            assert proof == ref_path(m, entries[:n]), (m, n)
            verify_inclusion(leaf_hash(entries[m]), m, n, proof, root)
        for m in range(1, n):
            proof = store.consistency(m, n)
            assert proof == ref_subproof(m, entries[:n], True), (m, n)
            verify_consistency(m, n, store.root(m), root, proof)


def test_appends_read_at_most_log2_n_stored_nodes() -> None:
    # a 100k-event log: appending never reads more than ~17 nodes, 1 on average
    assert len(append_needs(2**17 - 1)) == 17
    assert len(append_needs(100_000)) == 0
    total = sum(len(append_needs(i)) for i in range(100_000))
    assert total < 100_000
    store = _store([b"x"] * 1000)
    assert store.reads < 1000
    assert len(store.nodes) < 2 * 1000  # every complete perfect subtree once


def test_perfect_cover_refuses_ranges_rfc9162_never_asks_for() -> None:
    assert perfect_cover(0, 7) == [(2, 0), (1, 2), (0, 6)]
    assert perfect_cover(8, 11) == [(1, 4), (0, 10)]
    for bad in ((1, 3), (2, 6), (0, 0), (-1, 1)):
        with pytest.raises(ValueError, match="not a subtree range"):
            perfect_cover(*bad)


def _refused(check: Callable[..., None], *args: Any) -> bool:
    try:
        check(*args)
    except InvalidProof:
        return True
    return False


def _inclusion_corruptions(
    index: int, size: int, proof: list[bytes], root: bytes, leaf: bytes
) -> list[tuple[str, int, int, list[bytes], bytes, bytes]]:
    probes = [
        ("index - 1", index - 1, size, proof, root, leaf),
        ("index + 1", index + 1, size, proof, root, leaf),
        ("index ^ 2", index ^ 2, size, proof, root, leaf),
        ("size * 2", index, size * 2, proof, root, leaf),
        ("size // 2", index, size // 2, proof, root, leaf),
        ("wrong leaf", index, size, proof, root, SOME_HASH),
        ("empty root", index, size, proof, EMPTY_ROOT, leaf),
        ("random root", index, size, proof, SOME_HASH, leaf),
        ("trailing root", index, size, [*proof, root], root, leaf),
        ("preceding root", index, size, [root, *proof], root, leaf),
        ("short hash", index, size, [*proof, b""], root, leaf),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 8]) + flipped[i][1:]
        probes.append((f"bit flipped in proof[{i}]", index, size, flipped, root, leaf))
    if proof:
        probes.append(("removed component", index, size, proof[:-1], root, leaf))
    if len(proof) > 1:
        probes.append(
            ("inserted component", index, size, [proof[0], SOME_HASH, *proof[1:]], root, leaf)
        )
    return probes


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION[1:])
def test_a_corrupted_inclusion_proof_is_refused(index: int, size: int, proof: list[bytes]) -> None:
    leaf = leaf_hash(LEAVES[index])
    accepted = [
        name
        for name, i, n, p, root, lf in _inclusion_corruptions(
            index, size, proof, ROOTS[size - 1], leaf
        )
        if not _refused(verify_inclusion, lf, i, n, p, root)
    ]
    assert not accepted


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY[1:])
def test_a_corrupted_consistency_proof_is_refused(old: int, new: int, proof: list[bytes]) -> None:
    r1, r2 = ROOTS[old - 1], ROOTS[new - 1]
    probes = [
        ("old - 1", old - 1, new, r1, r2, proof),
        ("old + 1", old + 1, new, r1, r2, proof),
        ("old ^ 2", old ^ 2, new, r1, r2, proof),
        ("new * 2", old, new * 2, r1, r2, proof),
        ("new // 2", old, new // 2, r1, r2, proof),
        ("wrong old root", old, new, SOME_HASH, r2, proof),
        ("wrong new root", old, new, r1, SOME_HASH, proof),
        ("swapped roots", old, new, r2, r1, proof),
        ("empty proof", old, new, r1, r2, []),
        ("trailing old root", old, new, r1, r2, [*proof, r1]),
        ("trailing new root", old, new, r1, r2, [*proof, r2]),
        ("preceding old root", old, new, r1, r2, [r1, *proof]),
        ("preceding new root", old, new, r1, r2, [r2, *proof]),
        ("preceding proof[0]", old, new, r1, r2, [proof[0], *proof]),
        ("truncated proof", old, new, r1, r2, proof[:-1]),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 16]) + flipped[i][1:]
        probes.append((f"bit flipped in proof[{i}]", old, new, r1, r2, flipped))
    accepted = [
        name for name, m, n, a, b, p in probes if not _refused(verify_consistency, m, n, a, b, p)
    ]
    assert not accepted


def test_trivial_consistency_cases() -> None:
    root1, root2 = ROOTS[0], ROOTS[1]
    verify_consistency(0, 0, root1, root1, [])
    verify_consistency(0, 1, root1, root2, [])  # every tree extends the empty one
    verify_consistency(1, 1, root2, root2, [])
    for m, n, a, b, p in (
        (0, 0, root1, root2, []),
        (1, 1, root1, root2, []),
        (1, 0, root1, root2, []),  # time travel to the past
        (2, 1, root1, root2, []),
        (1, 2, root1, root2, []),  # a non-trivial proof is never empty
        (0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT]),
        (0, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT]),
        (1, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT]),
    ):
        with pytest.raises(InvalidProof):
            verify_consistency(m, n, a, b, p)


def test_invalid_inclusion_inputs_are_refused() -> None:
    leaf = leaf_hash(b"data")
    verify_inclusion(leaf, 0, 1, [], leaf)  # a one-leaf tree's root is its leaf
    for index, size in ((0, 0), (1, 0), (2, 1), (1, 1)):
        with pytest.raises(InvalidProof):
            verify_inclusion(leaf, index, size, [], leaf)
    with pytest.raises(InvalidProof):
        verify_inclusion(b"", 0, 1, [], leaf)
    assert node_hash(leaf, leaf) != leaf
