"""Rollouts: a signed plan, signed steps, and the cohort each worker computes for itself
(docs/rollouts.md). Pure: no I/O, no clock, no environment.

- ``parse_plan`` / ``make_plan``: the plan reviewers sign (canonical JSON, its sha256);
- ``parse_analysis``: the plan's thresholds and triggers, validated;
- ``parse_step`` / ``make_step``: the step the registry's online key signs;
- ``verify_step``: a step against its plan and the worker's memory (StepRefused);
- ``bucket`` / ``in_candidate_cohort`` / ``resolve_digest``: which digest a worker runs.
"""

from modelward.attest.rollout._analysis import METRICS, parse_analysis, parse_duration
from modelward.attest.rollout._cohort import BUCKETS, bucket, in_candidate_cohort
from modelward.attest.rollout._errors import PlanInvalid, RolloutError, StepRefused
from modelward.attest.rollout._plan import (
    DEFAULT_STEPS,
    PLAN_FORMAT,
    RolloutPlan,
    canonical_json,
    make_plan,
    parse_plan,
    parse_steps,
)
from modelward.attest.rollout._step import (
    STATES,
    STEP_FORMAT,
    RolloutStep,
    SeenStep,
    make_step,
    parse_step,
    resolve_digest,
    verify_step,
)

__all__ = [
    "BUCKETS",
    "DEFAULT_STEPS",
    "METRICS",
    "PLAN_FORMAT",
    "STATES",
    "STEP_FORMAT",
    "PlanInvalid",
    "RolloutError",
    "RolloutPlan",
    "RolloutStep",
    "SeenStep",
    "StepRefused",
    "bucket",
    "canonical_json",
    "in_candidate_cohort",
    "make_plan",
    "make_step",
    "parse_analysis",
    "parse_duration",
    "parse_plan",
    "parse_step",
    "parse_steps",
    "resolve_digest",
    "verify_step",
]
