"""Which workers run the candidate at a step (docs/rollouts.md#cohorts). Pure.

Every worker computes its own cohort; nobody assigns it. Two rules, chosen by the signed
plan:

- **the plan's fleet** (a plan with ``fleet``: the key ids of the workers the registry
  knew when the plan was made, signed with the plan by the alias's signers): the fleet is
  ordered by each key's bucket (below, then the key id), and the first
  ``cohort_size(weight, len(fleet))`` run the candidate. The share follows the weight as
  closely as the fleet's size allows (the nearest whole number of workers, halves up), the
  first step has at least one worker, and a higher weight only adds workers: the order is
  fixed by the rollout id, so a worker checks its own place from the plan and the step's
  weight alone, whichever steps it missed. A worker outside the fleet runs the stable
  digest until 100%.
- **hash buckets** (a plan without ``fleet``: large fleets, and plans made before):
  ``bucket = int(sha256(rollout_id || ":" || worker_keyid)[:8 hex], 16) mod 10000``; a
  worker is in the candidate cohort at weight ``w`` percent iff ``bucket < w * 100``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = [
    "BUCKETS",
    "MAX_FLEET",
    "bucket",
    "candidate_workers",
    "cohort_size",
    "fleet_order",
    "in_candidate_cohort",
]

BUCKETS = 10_000  # basis points: a weight of w percent is w * 100 buckets
MAX_FLEET = 500  # key ids a plan lists (about 34 KB); a larger fleet uses hash buckets


def bucket(rollout_id: str, worker_keyid: str) -> int:
    """The worker's bucket in ``[0, BUCKETS)`` for this rollout."""
    if not rollout_id or not worker_keyid:
        raise ValueError("a cohort needs a rollout id and a worker key id")
    h = hashlib.sha256(f"{rollout_id}:{worker_keyid}".encode()).hexdigest()
    return int(h[:8], 16) % BUCKETS


def in_candidate_cohort(rollout_id: str, worker_keyid: str, weight: int) -> bool:
    """Whether the worker runs the candidate at ``weight`` percent (0..100), by bucket."""
    if not 0 <= weight <= 100:
        raise ValueError(f"weight must be 0..100, not {weight}")
    return bucket(rollout_id, worker_keyid) < weight * 100


def cohort_size(weight: int, fleet_size: int) -> int:
    """How many of ``fleet_size`` workers run the candidate at ``weight`` percent: the
    nearest whole number (halves up), at least one when both are above 0, at most all."""
    if not 0 <= weight <= 100:
        raise ValueError(f"weight must be 0..100, not {weight}")
    if weight == 0 or fleet_size <= 0:
        return 0
    return min(fleet_size, max(1, (2 * weight * fleet_size + 100) // 200))


def fleet_order(rollout_id: str, fleet: Iterable[str]) -> tuple[str, ...]:
    """The fleet in the order its workers join the candidate cohort in this rollout."""
    return tuple(sorted(fleet, key=lambda k: (bucket(rollout_id, k), k)))


def candidate_workers(rollout_id: str, fleet: Iterable[str], weight: int) -> frozenset[str]:
    """The key ids of ``fleet`` that run the candidate at ``weight`` percent."""
    order = fleet_order(rollout_id, fleet)
    return frozenset(order[: cohort_size(weight, len(order))])
