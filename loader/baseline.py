"""Determinism baselines (docs/loader.md#baselines).

At every boot the probe set runs with greedy decoding and a fixed seed, once one request
at a time and once as a single batch. Each probe's output token ids are hashed
(``token_hash``: sha256 over the RFC 8785 JSON array of the ids); ``aggregate`` hashes the
list of ``[probe id, hash]`` pairs. The serial outputs are the baseline; a batched output
that differs makes the runtime "not batch-invariant". ``compare_baselines`` reports, for
each differing probe, the first differing token index.

A baseline travels as the predicate of a signed statement (``to_predicate`` /
``from_predicate``), keyed by (bundle digest, fingerprint id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import rfc8785

from modelward.loader.engine import GenerationRequest
from modelward.loader.fingerprint import Fingerprint
from modelward.loader.probes import Probe

__all__ = [
    "Baseline",
    "Comparison",
    "Divergence",
    "ProbeResult",
    "aggregate_hash",
    "compare_baselines",
    "first_difference",
    "record_baseline",
    "token_hash",
]

PREDICATE_VERSION = 1


class Generator(Protocol):
    def generate(self, requests: Sequence[GenerationRequest]) -> list[tuple[int, ...]]: ...


def token_hash(token_ids: Sequence[int]) -> str:
    """``sha256:<hex>`` over the canonical JSON array of ``token_ids``."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps([int(t) for t in token_ids])).hexdigest()


@dataclass(frozen=True)
class ProbeResult:
    probe_id: str
    prompt: str
    token_ids: tuple[int, ...]
    sha256: str


def aggregate_hash(results: Sequence[ProbeResult]) -> str:
    """``sha256:<hex>`` over the canonical JSON list of ``[probe_id, sha256]`` pairs."""
    pairs = [[r.probe_id, r.sha256] for r in results]
    return "sha256:" + hashlib.sha256(rfc8785.dumps(pairs)).hexdigest()


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, the shorter length when one is a prefix of the
    other, or None when equal."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(frozen=True)
class Divergence:
    """A probe (or replay request) whose outputs differ, and where they first differ."""

    probe_id: str
    index: int
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.probe_id}: first differing token index {self.index}"


@dataclass(frozen=True)
class Baseline:
    bundle_digest: str
    fingerprint: Fingerprint
    probes: tuple[ProbeResult, ...]
    aggregate: str
    batch_invariant: bool
    batch_divergences: tuple[Divergence, ...]
    max_tokens: int
    seed: int

    def to_predicate(self) -> dict[str, Any]:
        return {
            "version": PREDICATE_VERSION,
            "bundle_digest": self.bundle_digest,
            "fingerprint_id": self.fingerprint.id,
            "fingerprint": dict(self.fingerprint.data),
            "sampling": {"temperature": 0, "max_tokens": self.max_tokens, "seed": self.seed},
            "aggregate": self.aggregate,
            "batch_invariant": self.batch_invariant,
            "batch_divergences": [
                {"probe": d.probe_id, "index": d.index} for d in self.batch_divergences
            ],
            "probes": [
                {
                    "id": r.probe_id,
                    "prompt": r.prompt,
                    "token_ids": list(r.token_ids),
                    "sha256": r.sha256,
                }
                for r in self.probes
            ],
        }

    @classmethod
    def from_predicate(cls, predicate: Mapping[str, Any]) -> Baseline:
        """Parse a baseline predicate; ``ValueError`` names what is malformed. Each probe's
        hash and the aggregate are recomputed from the token ids and must match."""
        try:
            if predicate["version"] != PREDICATE_VERSION:
                raise ValueError(f"unsupported baseline version {predicate['version']!r}")
            probes = tuple(
                ProbeResult(
                    str(p["id"]),
                    str(p["prompt"]),
                    tuple(int(t) for t in p["token_ids"]),
                    str(p["sha256"]),
                )
                for p in predicate["probes"]
            )
            fp = Fingerprint(dict(predicate["fingerprint"]), str(predicate["fingerprint_id"]))
            sampling = predicate["sampling"]
            baseline = cls(
                bundle_digest=str(predicate["bundle_digest"]),
                fingerprint=fp,
                probes=probes,
                aggregate=str(predicate["aggregate"]),
                batch_invariant=bool(predicate["batch_invariant"]),
                batch_divergences=tuple(
                    Divergence(str(d["probe"]), int(d["index"]), "", "")
                    for d in predicate["batch_divergences"]
                ),
                max_tokens=int(sampling["max_tokens"]),
                seed=int(sampling["seed"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed baseline predicate: missing or bad {exc}") from None
        for r in probes:
            if token_hash(r.token_ids) != r.sha256:
                raise ValueError(f"baseline probe {r.probe_id}: hash does not match its tokens")
        if aggregate_hash(probes) != baseline.aggregate:
            raise ValueError("baseline aggregate hash does not match its probes")
        return baseline


@dataclass(frozen=True)
class Comparison:
    """The result of comparing a new baseline with a recorded one."""

    matched: bool
    divergences: tuple[Divergence, ...]
    missing: tuple[str, ...]

    def describe(self) -> str:
        if self.matched:
            return "baseline matches"
        parts = [str(d) for d in self.divergences]
        parts += [f"{p}: probe missing from one side" for p in self.missing]
        return "baseline diverges: " + "; ".join(parts)


def _requests(probes: Sequence[Probe], max_tokens: int, seed: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(prompt=p.prompt, max_tokens=max_tokens, temperature=0.0, seed=seed)
        for p in probes
    ]


def record_baseline(
    engine: Generator,
    probes: Sequence[Probe],
    *,
    bundle_digest: str,
    fingerprint: Fingerprint,
    max_tokens: int = 16,
    seed: int = 0,
) -> Baseline:
    """Run ``probes`` one at a time, then as one batch; return the baseline."""
    if not probes:
        raise ValueError("a baseline needs at least one probe")
    requests = _requests(probes, max_tokens, seed)
    serial = [engine.generate([req])[0] for req in requests]
    batched = engine.generate(requests)
    results = tuple(
        ProbeResult(p.id, p.prompt, ids, token_hash(ids))
        for p, ids in zip(probes, serial, strict=True)
    )
    batch_div: list[Divergence] = []
    for result, ids in zip(results, batched, strict=True):
        index = first_difference(result.token_ids, ids)
        if index is not None:
            batch_div.append(Divergence(result.probe_id, index, result.sha256, token_hash(ids)))
    return Baseline(
        bundle_digest=bundle_digest,
        fingerprint=fingerprint,
        probes=results,
        aggregate=aggregate_hash(results),
        batch_invariant=not batch_div,
        batch_divergences=tuple(batch_div),
        max_tokens=max_tokens,
        seed=seed,
    )


def compare_baselines(recorded: Baseline, current: Baseline) -> Comparison:
    """Compare probe by probe; ``matched`` only when every probe's tokens are identical."""
    ours = {r.probe_id: r for r in current.probes}
    theirs = {r.probe_id: r for r in recorded.probes}
    divergences: list[Divergence] = []
    for probe_id, old in theirs.items():
        new = ours.get(probe_id)
        if new is None or new.prompt != old.prompt:
            continue
        index = first_difference(old.token_ids, new.token_ids)
        if index is not None:
            divergences.append(Divergence(probe_id, index, old.sha256, new.sha256))
    missing = tuple(
        sorted(set(ours) ^ set(theirs))
        + sorted(p for p in set(ours) & set(theirs) if ours[p].prompt != theirs[p].prompt)
    )
    matched = not divergences and not missing
    return Comparison(matched=matched, divergences=tuple(divergences), missing=missing)
