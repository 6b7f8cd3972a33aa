"""Rollouts: a signed plan, signed steps, and the cohort each worker computes for itself
(docs/rollouts.md). Pure: no I/O, no clock, no environment.

- ``parse_plan`` / ``make_plan``: the plan reviewers sign (canonical JSON, its sha256);
- ``parse_analysis``: the plan's thresholds and triggers, validated;
- ``parse_step`` / ``make_step``: the step the registry's online key signs;
- ``verify_step``: a step against its plan and the worker's memory (StepRefused); a worker
  that missed steps follows a later one; ``verify_next_step``: what the registry may sign
  next (no step skipped), checked before it signs and along a release record's chain;
- ``bucket`` / ``in_candidate_cohort`` / ``cohort_size`` / ``candidate_workers`` /
  ``resolve_digest``: which digest a worker runs (by the plan's fleet, else hash buckets);
- ``parse_report_predicate`` / ``open_report`` / ``verify_report``: a worker's signed
  fleet report (ReportInvalid naming the field, ReportUntrusted);
- ``judge_step`` / ``capacity_check``: a step's analysis over a window of reports
  (pass, fail, inconclusive) and the known-good pool's capacity before a step.
"""

from modelward.attest.rollout._analysis import METRICS, parse_analysis, parse_duration
from modelward.attest.rollout._cohort import (
    BUCKETS,
    MAX_FLEET,
    bucket,
    candidate_workers,
    cohort_size,
    fleet_order,
    in_candidate_cohort,
)
from modelward.attest.rollout._errors import PlanInvalid, RolloutError, StepRefused
from modelward.attest.rollout._judge import (
    DEFAULT_MIN_WORKERS,
    WORKER_CAP,
    Capacity,
    Judgement,
    WindowReport,
    capacity_check,
    inside_thresholds,
    judge_step,
    newcombe_difference,
)
from modelward.attest.rollout._plan import (
    DEFAULT_STEPS,
    PLAN_FORMAT,
    RolloutPlan,
    canonical_json,
    make_plan,
    parse_plan,
    parse_steps,
)
from modelward.attest.rollout._report import (
    MAX_REPORT_BYTES,
    REPORT_FORMAT,
    REPORT_PREDICATE,
    FleetReport,
    OpenedReport,
    ReportInvalid,
    ReportUntrusted,
    make_report_predicate,
    open_report,
    parse_report_predicate,
    verify_report,
)
from modelward.attest.rollout._step import (
    STATES,
    STEP_FORMAT,
    RolloutStep,
    SeenStep,
    make_step,
    parse_step,
    resolve_digest,
    verify_next_step,
    verify_step,
)

__all__ = [
    "BUCKETS",
    "DEFAULT_MIN_WORKERS",
    "DEFAULT_STEPS",
    "MAX_FLEET",
    "MAX_REPORT_BYTES",
    "METRICS",
    "PLAN_FORMAT",
    "REPORT_FORMAT",
    "REPORT_PREDICATE",
    "STATES",
    "STEP_FORMAT",
    "WORKER_CAP",
    "Capacity",
    "FleetReport",
    "Judgement",
    "OpenedReport",
    "PlanInvalid",
    "ReportInvalid",
    "ReportUntrusted",
    "RolloutError",
    "RolloutPlan",
    "RolloutStep",
    "SeenStep",
    "StepRefused",
    "WindowReport",
    "bucket",
    "candidate_workers",
    "canonical_json",
    "capacity_check",
    "cohort_size",
    "fleet_order",
    "in_candidate_cohort",
    "inside_thresholds",
    "judge_step",
    "make_plan",
    "make_report_predicate",
    "make_step",
    "newcombe_difference",
    "open_report",
    "parse_analysis",
    "parse_duration",
    "parse_plan",
    "parse_report_predicate",
    "parse_step",
    "parse_steps",
    "resolve_digest",
    "verify_next_step",
    "verify_report",
    "verify_step",
]
