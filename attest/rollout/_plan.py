"""A rollout plan: the signed decision of a rollout (docs/rollouts.md#the-plan). Pure.

The plan's bytes are its canonical JSON (sorted keys, no spaces, ASCII); its sha256 is the
plan's identity everywhere (the step names it, the TUF target hashes it). ``parse_plan``
accepts only canonical bytes and keeps them: a plan is never re-serialized to be hashed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from modelward.attest._json import DuplicateKeyError, reject_duplicates
from modelward.attest.rollout._analysis import min_workers
from modelward.attest.rollout._cohort import MAX_FLEET
from modelward.attest.rollout._errors import PlanInvalid

__all__ = [
    "DEFAULT_STEPS",
    "MAX_PLAN_BYTES",
    "PLAN_FORMAT",
    "RolloutPlan",
    "canonical_json",
    "make_plan",
    "parse_plan",
    "parse_steps",
]

PLAN_FORMAT = "modelward.rollout-plan/v1"
DEFAULT_STEPS = (5, 20, 50, 100)
MAX_STEPS = 10
MAX_PLAN_BYTES = 128 * 1024
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_ID_RE = re.compile(r"[0-9a-f]{32}")
_SHA_RE = re.compile(r"[0-9a-f]{64}")
_KEYID_RE = _SHA_RE  # a worker key id: the sha256 of its public key


def canonical_json(doc: object) -> bytes:
    """The one encoding of plans and steps: sorted keys, no spaces, ASCII."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def parse_steps(text: str) -> tuple[int, ...]:
    """``5,20,50,100`` as weights (PlanInvalid naming ``steps``)."""
    try:
        steps = tuple(int(part) for part in text.split(","))
    except ValueError as exc:
        raise PlanInvalid("steps", f"{text!r} is not a comma-separated list of percents") from exc
    _check_steps(steps)
    return steps


def _check_steps(steps: tuple[int, ...]) -> None:
    if not 1 <= len(steps) <= MAX_STEPS:
        raise PlanInvalid("steps", f"1 to {MAX_STEPS} steps, not {len(steps)}")
    if any(isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 100 for w in steps):
        raise PlanInvalid("steps", f"each step is a percent from 1 to 100: {list(steps)}")
    if any(b <= a for a, b in itertools.pairwise(steps)):
        raise PlanInvalid("steps", f"steps must increase: {list(steps)}")
    if steps[-1] != 100:
        raise PlanInvalid("steps", f"the last step must be 100, not {steps[-1]}")


@dataclass(frozen=True)
class RolloutPlan:
    """A parsed plan and the bytes it was parsed from (``raw``, canonical)."""

    rollout_id: str
    repository: str
    alias: str
    stable: str
    candidate: str
    steps: tuple[int, ...]
    window_seconds: int
    min_samples: int
    analysis: dict[str, Any]
    analysis_sha256: str | None
    raw: bytes = field(repr=False)
    fleet: tuple[str, ...] | None = None  # the workers cohorts are drawn from (_cohort)

    @property
    def sha256(self) -> str:
        """The plan's identity: the sha256 (hex) of its canonical bytes."""
        return hashlib.sha256(self.raw).hexdigest()


def _doc(
    *,
    rollout_id: str,
    repository: str,
    alias: str,
    stable: str,
    candidate: str,
    steps: tuple[int, ...],
    window_seconds: int,
    min_samples: int,
    analysis: dict[str, Any],
    analysis_sha256: str | None,
    fleet: tuple[str, ...] | None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "rollout_id": rollout_id,
        "repository": repository,
        "alias": alias,
        "stable": stable,
        "candidate": candidate,
        "steps": list(steps),
        "window_seconds": window_seconds,
        "min_samples": min_samples,
        "analysis": analysis,
        "analysis_sha256": analysis_sha256,
    }
    if fleet is not None:  # plan bytes unchanged when there is none
        doc["fleet"] = sorted(fleet)
    return doc


def make_plan(
    *,
    rollout_id: str,
    repository: str,
    alias: str,
    stable: str,
    candidate: str,
    steps: tuple[int, ...] = DEFAULT_STEPS,
    window_seconds: int = 0,
    min_samples: int = 0,
    analysis: dict[str, Any] | None = None,
    analysis_sha256: str | None = None,
    fleet: tuple[str, ...] | None = None,
) -> RolloutPlan:
    """A plan checked field by field (PlanInvalid), with its canonical bytes."""
    doc = _doc(
        rollout_id=rollout_id,
        repository=repository,
        alias=alias,
        stable=stable,
        candidate=candidate,
        steps=tuple(steps),
        window_seconds=window_seconds,
        min_samples=min_samples,
        analysis=analysis or {"thresholds": {}, "triggers": []},
        analysis_sha256=analysis_sha256,
        fleet=fleet,
    )
    return parse_plan(canonical_json(doc))


def _str(doc: dict[str, Any], key: str, pattern: re.Pattern[str] | None = None) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value or (pattern and not pattern.fullmatch(value)):
        raise PlanInvalid(key, f"{value!r} is not valid")
    return value


def _count(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**9:
        raise PlanInvalid(key, f"{value!r} is not a count from 0 to 10^9")
    return value


def _fleet(doc: dict[str, Any]) -> tuple[str, ...] | None:
    if "fleet" not in doc:
        return None
    fleet = doc["fleet"]
    if not isinstance(fleet, list) or not 1 <= len(fleet) <= MAX_FLEET:
        raise PlanInvalid("fleet", f"a list of 1 to {MAX_FLEET} worker key ids")
    if any(not isinstance(k, str) or not _KEYID_RE.fullmatch(k) for k in fleet):
        raise PlanInvalid("fleet", "each worker key id is 64 lowercase hex digits")
    if fleet != sorted(set(fleet)):
        raise PlanInvalid("fleet", "worker key ids sorted, each once (a worker counts once)")
    return tuple(fleet)


def parse_plan(raw: bytes) -> RolloutPlan:
    """The plan in ``raw``, which must be its canonical JSON (PlanInvalid otherwise).

    1. at most MAX_PLAN_BYTES, JSON with no key named twice, of format PLAN_FORMAT;
    2. every field present and valid (digests ``sha256:<hex>``, a 32-hex rollout id,
       steps increasing to 100, the candidate not the stable; a ``fleet``, when present, of
       1 to MAX_FLEET distinct worker key ids, sorted);
    3. ``raw`` is the canonical encoding of what it says (one plan, one byte string).
    """
    # (1): size, JSON, format
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanInvalid("plan", f"{len(raw)} bytes, more than {MAX_PLAN_BYTES}")
    try:
        doc = json.loads(raw, object_pairs_hook=reject_duplicates)
    except (ValueError, DuplicateKeyError) as exc:
        raise PlanInvalid("plan", f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise PlanInvalid("format", f"not a {PLAN_FORMAT} document")
    expected = {
        "format", "rollout_id", "repository", "alias", "stable", "candidate", "steps",
        "window_seconds", "min_samples", "analysis", "analysis_sha256",
    }  # fmt: skip
    if set(doc) - {"fleet"} != expected:
        raise PlanInvalid("plan", f"fields {sorted(doc)}, expected {sorted(expected)}")
    # (2): the fields
    steps = doc["steps"]
    if not isinstance(steps, list):
        raise PlanInvalid("steps", "must be a list")
    _check_steps(tuple(steps))
    stable, candidate = _str(doc, "stable", _DIGEST_RE), _str(doc, "candidate", _DIGEST_RE)
    if stable == candidate:
        raise PlanInvalid("candidate", f"is the stable digest {stable}: nothing to roll out")
    analysis = doc["analysis"]
    optional = {"manual", "min_workers"}
    if not isinstance(analysis, dict) or set(analysis) - optional != {"thresholds", "triggers"}:
        raise PlanInvalid("analysis", "must hold thresholds and triggers (and manual, min_workers)")
    if "min_workers" in analysis:
        min_workers(analysis["min_workers"], "analysis.min_workers")
    manual = analysis.get("manual", [])
    if not isinstance(manual, list) or any(w not in steps[1:] for w in manual):
        raise PlanInvalid("analysis.manual", f"{manual!r}: each must be a later step of {steps}")
    analysis_sha = doc["analysis_sha256"]
    if analysis_sha is not None and not (
        isinstance(analysis_sha, str) and _SHA_RE.fullmatch(analysis_sha)
    ):
        raise PlanInvalid("analysis_sha256", f"{analysis_sha!r} is not a sha256")
    plan = RolloutPlan(
        rollout_id=_str(doc, "rollout_id", _ID_RE),
        repository=_str(doc, "repository"),
        alias=_str(doc, "alias"),
        stable=stable,
        candidate=candidate,
        steps=tuple(steps),
        window_seconds=_count(doc, "window_seconds"),
        min_samples=_count(doc, "min_samples"),
        analysis=analysis,
        analysis_sha256=analysis_sha,
        raw=bytes(raw),
        fleet=_fleet(doc),
    )
    # (3): one plan, one byte string
    if canonical_json(doc) != raw:
        raise PlanInvalid("plan", "not in canonical form (sorted keys, no spaces, ASCII)")
    return plan
