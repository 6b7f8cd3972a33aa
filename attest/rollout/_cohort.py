"""Which workers run the candidate at a step (docs/rollouts.md#cohorts). Pure.

``bucket = int(sha256(rollout_id || ":" || worker_keyid)[:8 hex], 16) mod 10000``; a worker
is in the candidate cohort at weight ``w`` percent iff ``bucket < w * 100``. A higher weight
only adds workers (monotone by construction), and a worker computes its own bucket from its
own key id: nobody assigns it.
"""

from __future__ import annotations

import hashlib

__all__ = ["BUCKETS", "bucket", "in_candidate_cohort"]

BUCKETS = 10_000  # basis points: a weight of w percent is w * 100 buckets


def bucket(rollout_id: str, worker_keyid: str) -> int:
    """The worker's bucket in ``[0, BUCKETS)`` for this rollout."""
    if not rollout_id or not worker_keyid:
        raise ValueError("a cohort needs a rollout id and a worker key id")
    h = hashlib.sha256(f"{rollout_id}:{worker_keyid}".encode()).hexdigest()
    return int(h[:8], 16) % BUCKETS


def in_candidate_cohort(rollout_id: str, worker_keyid: str, weight: int) -> bool:
    """Whether the worker runs the candidate at ``weight`` percent (0..100)."""
    if not 0 <= weight <= 100:
        raise ValueError(f"weight must be 0..100, not {weight}")
    return bucket(rollout_id, worker_keyid) < weight * 100
