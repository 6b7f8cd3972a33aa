"""The analysis of one rollout step: the candidate cohort against the stable cohort over the
same window (docs/rollouts.md#analysis). Pure: reports in, a ``Judgement`` out; no clock
(the caller passes ``now``), no I/O.

``judge_step`` first sets aside, as faults, the reports whose digest is not the one the
signed step assigned their worker key when they arrived (``assigned``): they are evidence
for no cohort. Each worker's weight is bounded: in any figure, a worker counts at most
``WORKER_CAP`` times the median worker's trials (the lower median of the per-worker totals
of both cohorts over the same reports; its events scaled alike), so one key reporting 10^9
requests weighs as two ordinary workers. Then, in order:

1. the triggers, over the candidate cohort's reports of each trigger's trailing ``for``
   span (the whole input when ``for`` is 0): one whose bound is crossed over a span the
   reports cover fails the step at once, whatever the sample count;
2. silence: every worker expected in the candidate cohort reported the candidate in the
   window, the cohort served at least ``min_samples`` (and at least one) requests as
   counted, and at least the analysis's ``min_workers`` (default 1) candidate workers
   reported; otherwise ``inconclusive``, never ``pass`` (missing evidence makes the gate
   unknowable);
3. every threshold, on the window's reports (``received_at >= now - window``):
   rates (``error_rate``, ``task_check_failure_rate``, ``device_fault_rate``) with the
   Wilson interval of the candidate's rate, and the candidate minus the stable rate with
   Newcombe's hybrid score interval for independent proportions (method 10, built from the
   two Wilson intervals of attest.evaluation); latencies (``ttft_p50_ms``, ...) as the
   request-weighted mean of the reports' percentiles. A threshold passes when the
   candidate's interval is inside the bound, is inconclusive while it crosses the bound,
   and fails when it is wholly outside, unless the stable cohort over the same window is
   as far out (the difference's interval reaches 0): then the window, not the candidate,
   is at fault and the threshold is inconclusive (matched cohorts).

The verdict: ``fail`` when a trigger fired or a threshold failed; else ``inconclusive``
when the cohort was silent, short of samples or a threshold is unresolved; else ``pass``.
``capacity_check`` is the check before each step (docs/rollouts.md#capacity).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from modelward.attest.evaluation import Z95, wilson_interval
from modelward.attest.rollout._plan import RolloutPlan
from modelward.attest.rollout._report import FleetReport

__all__ = [
    "DEFAULT_MIN_WORKERS",
    "LATENCY_METRICS",
    "RATE_METRICS",
    "WORKER_CAP",
    "Capacity",
    "Judgement",
    "WindowReport",
    "capacity_check",
    "inside_thresholds",
    "judge_step",
    "newcombe_difference",
    "worker_caps",
]

Verdict = Literal["pass", "fail", "inconclusive"]
RATE_METRICS = ("error_rate", "task_check_failure_rate", "device_fault_rate")
LATENCY_METRICS = ("ttft_p50_ms", "ttft_p95_ms", "itl_p95_ms", "queue_age_p95_ms")
WORKER_CAP = 2  # a worker counts at most this many times the median worker's trials
DEFAULT_MIN_WORKERS = 1  # candidate workers a step needs when the analysis names none


@dataclass(frozen=True)
class WindowReport:
    """The figures of one verified fleet report (docs/rollouts.md#fleet-reports), when the
    registry received it (its clock judges windows) and ``assigned``: the digest the signed
    step assigned the worker key then (None: not known, the report counts by its digest)."""

    worker_keyid: str
    digest: str
    received_at: datetime
    interval_seconds: float = 10.0
    requests: int = 0
    errors: int = 0
    retries: int = 0
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    queue_age_p95_ms: float | None = None
    task_checks_passed: int = 0
    task_checks_failed: int = 0
    device_faults: int = 0
    capacity: int = 0
    inflight_peak: int = 0
    stable_warm: bool = False
    assigned: str | None = None

    @classmethod
    def from_report(
        cls, report: FleetReport, received_at: datetime, assigned: str | None = None
    ) -> WindowReport:
        """A parsed (and, by the caller, verified) report with its time of receipt and the
        digest the signed step assigned its key then."""
        return cls(
            received_at=received_at,
            assigned=assigned,
            **{f: getattr(report, f) for f in _FIGURES},
        )

    @property
    def counted(self) -> bool:
        """Whether it is evidence: it reports the digest its key was assigned."""
        return self.assigned is None or self.assigned == self.digest

    def rate(self, metric: str) -> tuple[int, int]:
        """(events, trials) of a rate metric in this report."""
        if metric == "error_rate":
            return self.errors, self.requests
        if metric == "task_check_failure_rate":
            return self.task_checks_failed, self.task_checks_passed + self.task_checks_failed
        if metric == "device_fault_rate":  # faults per request (a fault with no request: 1)
            return self.device_faults, max(self.requests, self.device_faults)
        raise ValueError(f"{metric!r} is not a rate metric")

    def latency(self, metric: str) -> float | None:
        if metric not in LATENCY_METRICS:
            raise ValueError(f"{metric!r} is not a latency metric")
        value: float | None = getattr(self, metric)
        return value


_FIGURES = tuple(
    f for f in WindowReport.__dataclass_fields__ if f not in ("received_at", "assigned")
)


@dataclass(frozen=True)
class Judgement:
    """A step's verdict with its reasons (words for people), its figures (``metrics``), the
    trigger that fired, if any, and ``detected_at``: the received_at of the earliest report
    that made the verdict fail (None unless ``fail``)."""

    verdict: Verdict
    reasons: list[str]
    metrics: dict[str, Any]
    fired_trigger: str | None = None
    detected_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "metrics": self.metrics,
            "fired_trigger": self.fired_trigger,
            "detected_at": None if self.detected_at is None else self.detected_at.isoformat(),
        }


# -- statistics -------------------------------------------------------------------------------
def newcombe_difference(
    events_a: int, n_a: int, events_b: int, n_b: int, z: float = Z95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) for rate A minus rate B on
    independent samples (the two cohorts are different workers): the Wilson intervals of
    each side combined. ValueError when a side has no trials."""
    l1, u1 = wilson_interval(events_a, n_a, z)  # (ValueError when a side is empty)
    l2, u2 = wilson_interval(events_b, n_b, z)
    p1, p2 = events_a / n_a, events_b / n_b
    d = p1 - p2
    return (
        max(-1.0, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)),
        min(1.0, d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)),
    )


# -- bounded weight per worker ----------------------------------------------------------------
_WEIGHT = "requests"  # the latencies' weights: a report's requests (at least 1)
Caps = Mapping[str, int]  # metric (or "requests") -> the most trials one worker counts for


def _trials(r: WindowReport, metric: str) -> tuple[int, int]:
    return (0, max(r.requests, 1)) if metric == _WEIGHT else r.rate(metric)


def _per_worker(reports: Iterable[WindowReport], metric: str) -> dict[str, tuple[int, int]]:
    totals: dict[str, tuple[int, int]] = {}
    for r in reports:
        e, n = _trials(r, metric)
        events, trials = totals.get(r.worker_keyid, (0, 0))
        totals[r.worker_keyid] = (events + e, trials + n)
    return totals


def worker_caps(reports: Iterable[WindowReport]) -> dict[str, int]:
    """The most trials one worker counts for, per metric (and ``requests``, the latencies'
    weights), over ``reports`` (both cohorts): ``WORKER_CAP`` times the lower median of the
    workers' totals (workers with none left out). No trials at all: no cap."""
    reports = list(reports)
    caps: dict[str, int] = {}
    for metric in (*RATE_METRICS, _WEIGHT):
        totals = [n for _, n in _per_worker(reports, metric).values() if n > 0]
        if totals:
            caps[metric] = WORKER_CAP * int(statistics.median_low(totals))
    return caps


def _bounded(
    reports: Iterable[WindowReport], metric: str, caps: Caps | None
) -> dict[str, tuple[int, int, float]]:
    """Per worker: (events, trials) as counted, and the scale its bound applied."""
    out: dict[str, tuple[int, int, float]] = {}
    cap = None if caps is None else caps.get(metric)
    for worker, (events, trials) in _per_worker(reports, metric).items():
        if cap is not None and trials > cap:
            out[worker] = (round(events * cap / trials), cap, cap / trials)
        else:
            out[worker] = (events, trials, 1.0)
    return out


def _rate(
    reports: Iterable[WindowReport], metric: str, caps: Caps | None = None
) -> tuple[int, int]:
    events = trials = 0
    for e, n, _ in _bounded(reports, metric, caps).values():
        events, trials = events + e, trials + n
    return events, trials


def _latency(
    reports: Iterable[WindowReport], metric: str, caps: Caps | None = None
) -> float | None:
    """The request-weighted mean of the reports' percentiles (reports with none skipped),
    each worker's weight bounded by ``caps``."""
    reports = list(reports)
    scale = {w: f for w, (_, _, f) in _bounded(reports, _WEIGHT, caps).items()}
    total = weight = 0.0
    for r in reports:
        value = r.latency(metric)
        if value is not None:
            w = max(r.requests, 1) * scale[r.worker_keyid]
            total, weight = total + value * w, weight + w
    return total / weight if weight else None


def _point(reports: Sequence[WindowReport], metric: str, caps: Caps | None = None) -> float | None:
    if metric in RATE_METRICS:
        events, trials = _rate(reports, metric, caps)
        return events / trials if trials else None
    return _latency(reports, metric, caps)


def _beyond(value: float, bounds: Mapping[str, float]) -> bool:
    return ("max" in bounds and value > bounds["max"]) or (
        "min" in bounds and value < bounds["min"]
    )


def _first_beyond(
    reports: Sequence[WindowReport], metric: str, bounds: Mapping[str, float]
) -> datetime | None:
    """When the first report whose own figure is out of ``bounds`` arrived (else the
    first report's time): the detection time of a failure."""
    ordered = sorted(reports, key=lambda r: r.received_at)
    for r in ordered:
        value = _point([r], metric)
        if value is not None and _beyond(value, bounds):
            return r.received_at
    return ordered[0].received_at if ordered else None


# -- (1): triggers ------------------------------------------------------------------------------
@dataclass
class _Fired:
    name: str
    reason: str
    detected_at: datetime | None


def _triggers(
    triggers: Sequence[Mapping[str, Any]],
    reports: Sequence[WindowReport],
    stable: Sequence[WindowReport],
    now: datetime,
) -> tuple[_Fired | None, dict[str, Any]]:
    seen: dict[str, Any] = {}
    for trigger in triggers:
        name, metric, held = trigger["name"], trigger["metric"], int(trigger["for_seconds"])
        side = "above" if "above" in trigger else "below"
        bound = float(trigger[side])
        since = now - timedelta(seconds=held)
        span = [r for r in reports if held == 0 or r.received_at >= since]
        caps = worker_caps([*span, *(r for r in stable if held == 0 or r.received_at >= since)])
        value = _point(span, metric, caps)
        covered = (
            max((now - r.received_at).total_seconds() + r.interval_seconds for r in span)
            if span
            else 0.0
        )
        crossed = value is not None and (value > bound if side == "above" else value < bound)
        fires = crossed and covered >= held
        seen[name] = {"metric": metric, side: bound, "for_seconds": held, "value": value}
        seen[name]["fired"] = fires
        if fires:
            bounds = {"max": bound} if side == "above" else {"min": bound}
            return _Fired(
                name,
                f"trigger {name!r} fired: {metric} {value:.6g} {side} {bound:g}"
                + (f" for {held}s" if held else ""),
                _first_beyond(span, metric, bounds),
            ), seen
    return None, seen


# -- (3): thresholds ----------------------------------------------------------------------------
def _threshold(
    metric: str,
    bounds: Mapping[str, float],
    cand: Sequence[WindowReport],
    stable: Sequence[WindowReport],
    caps: Caps,
) -> tuple[Verdict, str, dict[str, Any]]:
    shown = " ".join(f"{k} {v:g}" for k, v in sorted(bounds.items()))
    shown += (
        f" ({len({r.worker_keyid for r in cand})} candidate, "
        f"{len({r.worker_keyid for r in stable})} stable worker(s))"
    )
    out: dict[str, Any] = {"bound": dict(bounds)}
    if metric in RATE_METRICS:
        events, trials = _rate(cand, metric, caps)
        s_events, s_trials = _rate(stable, metric, caps)
        out.update(candidate=[events, trials], stable=[s_events, s_trials])
        if not trials:
            return "inconclusive", f"{metric}: no candidate evidence", out
        low, high = wilson_interval(events, trials)
        out["interval"] = [low, high]
        out["observed"] = events / trials
        above = "max" in bounds and low > bounds["max"]
        below = "min" in bounds and high < bounds["min"]
        inside = ("max" not in bounds or high <= bounds["max"]) and (
            "min" not in bounds or low >= bounds["min"]
        )
        text = f"{metric} {events}/{trials} = {events / trials:.4g} (95% {low:.4g}..{high:.4g})"
        if inside:
            return "pass", f"{text} inside {shown}", out
        if not (above or below):
            return "inconclusive", f"{text} crosses {shown}: more requests resolve it", out
        if s_trials:
            d_low, d_high = newcombe_difference(events, trials, s_events, s_trials)
            out["difference_interval"] = [d_low, d_high]
            worse = d_low > 0 if above else d_high < 0
            if not worse:
                return (
                    "inconclusive",
                    f"{text} outside {shown}, but the stable cohort is as far out "
                    f"({s_events}/{s_trials}; difference {d_low:.4g}..{d_high:.4g})",
                    out,
                )
        return "fail", f"{text} outside {shown}", out
    value, s_value = _latency(cand, metric, caps), _latency(stable, metric, caps)
    out.update(observed=value, stable=s_value)
    if value is None:
        return "inconclusive", f"{metric}: no candidate request finished", out
    text = f"{metric} {value:.4g} (stable {s_value if s_value is None else f'{s_value:.4g}'})"
    if not _beyond(value, bounds):
        return "pass", f"{text} inside {shown}", out
    as_bad = s_value is not None and (
        s_value >= value if "max" in bounds and value > bounds["max"] else s_value <= value
    )
    if as_bad:
        return "inconclusive", f"{text} outside {shown}, but the stable cohort is as far out", out
    return "fail", f"{text} outside {shown}", out


def _cohort(reports: Sequence[WindowReport], caps: Caps) -> dict[str, Any]:
    """A cohort's figures: ``requests``/``errors`` as reported, ``counted_requests`` and
    ``counted_errors`` within each worker's bound, ``capped`` the workers it bounded."""
    counted = _bounded(reports, "error_rate", caps)
    workers = sorted({r.worker_keyid for r in reports})
    return {
        "workers": workers,
        "worker_count": len(workers),
        "reports": len(reports),
        "requests": sum(r.requests for r in reports),
        "errors": sum(r.errors for r in reports),
        "counted_requests": sum(n for _, n, _ in counted.values()),
        "counted_errors": sum(e for e, _, _ in counted.values()),
        "capped": sorted(w for w, (_, _, f) in counted.items() if f < 1),
        "retries": sum(r.retries for r in reports),
        **{m: _point(reports, m, caps) for m in (*RATE_METRICS, *LATENCY_METRICS)},
    }


def _unassigned(reports: Sequence[WindowReport]) -> dict[str, Any]:
    """The reports set aside: of a digest their key was not assigned (faults)."""
    return {
        "reports": len(reports),
        "workers": sorted({r.worker_keyid for r in reports}),
        "digests": sorted({r.digest for r in reports}),
    }


def judge_step(
    plan: RolloutPlan,
    candidate: Sequence[WindowReport],
    stable: Sequence[WindowReport],
    *,
    expected_candidate_keyids: Iterable[str],
    window_seconds: int,
    now: datetime,
    step_started_at: datetime | None = None,
) -> Judgement:
    """Judge the step under way from the reports of the candidate cohort (reporting the
    plan's candidate digest) and of the stable cohort (the stable digest): the steps in
    the module docstring. ``candidate``/``stable`` may reach back further than the window
    (for the triggers' ``for``); ``now`` ends the window. ``step_started_at``: when the
    step was signed; the window starts no earlier, and a step younger than one window is
    not yet judged ``pass`` (a fail or a trigger still acts at once). A report whose
    ``assigned`` digest is not its own is a fault (``metrics["unassigned"]``), counted in
    neither cohort."""
    since = now - timedelta(seconds=window_seconds)
    young = step_started_at is not None and step_started_at > since
    if step_started_at is not None:
        since = max(since, step_started_at)
    unassigned = [r for r in (*candidate, *stable) if not r.counted and r.received_at <= now]
    candidate = [r for r in candidate if r.counted and r.received_at <= now]
    stable = [r for r in stable if r.counted and r.received_at <= now]
    cand_window = [r for r in candidate if since <= r.received_at]
    stable_window = [r for r in stable if since <= r.received_at]
    caps = worker_caps([*cand_window, *stable_window])
    metrics: dict[str, Any] = {
        "window_seconds": window_seconds,
        "since": since.isoformat(),
        "until": now.isoformat(),
        "candidate": _cohort(cand_window, caps),
        "stable": _cohort(stable_window, caps),
        "worker_caps": caps,
        "unassigned": _unassigned([r for r in unassigned if since <= r.received_at]),
    }
    # (1): triggers, at once
    fired, seen = _triggers(plan.analysis.get("triggers", []), candidate, stable, now)
    metrics["triggers"] = seen
    # (3) computed for the record even when (2) holds the verdict
    results: dict[str, Any] = {}
    verdicts: list[tuple[Verdict, str]] = []
    failing: list[tuple[str, Mapping[str, float]]] = []
    for metric, bounds in sorted(plan.analysis.get("thresholds", {}).items()):
        verdict, text, figures = _threshold(metric, bounds, cand_window, stable_window, caps)
        results[metric] = {"verdict": verdict, **figures}
        verdicts.append((verdict, text))
        if verdict == "fail":
            failing.append((metric, bounds))
    metrics["thresholds"] = results
    if fired is not None:
        return Judgement("fail", [fired.reason], metrics, fired.name, fired.detected_at)
    # (2): silence and samples
    reasons: list[str] = []
    reported = {r.worker_keyid for r in cand_window}
    silent = sorted(set(expected_candidate_keyids) - reported)
    metrics["silent"] = silent
    if silent:
        reasons.append(
            f"{len(silent)} candidate-cohort worker(s) sent no candidate report in the last "
            f"{window_seconds}s: {', '.join(k[:12] for k in silent[:10])}"
        )
    requests = metrics["candidate"]["counted_requests"]
    if requests < max(plan.min_samples, 1):
        reasons.append(
            f"{requests} candidate request(s) counted in the window, fewer than the "
            f"{max(plan.min_samples, 1)} the plan needs"
        )
    workers = metrics["candidate"]["worker_count"]
    min_workers = int(plan.analysis.get("min_workers", DEFAULT_MIN_WORKERS))
    if workers < min_workers:
        reasons.append(
            f"{workers} candidate worker(s) reported in the window, fewer than the "
            f"{min_workers} the plan needs (min_workers)"
        )
    if reasons:
        return Judgement("inconclusive", reasons, metrics)
    # (3): thresholds
    if failing:
        detected = [
            t for t in (_first_beyond(cand_window, m, b) for m, b in failing) if t is not None
        ]
        return Judgement(
            "fail",
            [text for v, text in verdicts if v == "fail"],
            metrics,
            None,
            min(detected) if detected else None,
        )
    if young:
        assert step_started_at is not None  # noqa: S101 - young says so
        left = window_seconds - (now - step_started_at).total_seconds()
        return Judgement(
            "inconclusive",
            [f"the step's first {window_seconds}s window is not over ({left:.0f}s left)"],
            metrics,
        )
    if any(v == "inconclusive" for v, _ in verdicts):
        return Judgement("inconclusive", [t for v, t in verdicts if v == "inconclusive"], metrics)
    return Judgement("pass", [t for _, t in verdicts] or ["no threshold crossed"], metrics)


def inside_thresholds(plan: RolloutPlan, reports: Sequence[WindowReport]) -> bool:
    """Whether these reports (the stable cohort after an abort) are back inside every
    threshold of the plan, by point estimate: some request served and each metric known
    and inside its bounds (the recovery of docs/rollouts.md#rollback-figures)."""
    reports = [r for r in reports if r.counted]
    if sum(r.requests for r in reports) == 0:
        return False
    caps = worker_caps(reports)
    for metric, bounds in plan.analysis.get("thresholds", {}).items():
        value = _point(reports, metric, caps)
        if value is None or _beyond(value, bounds):
            return False
    return True


# -- capacity -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Capacity:
    """The check before a step (docs/rollouts.md#capacity): ``known_good`` is the capacity
    that could serve the stable digest without a cold start, ``demand`` the fleet's peak
    in-flight requests, per worker's latest report in the window."""

    ok: bool
    known_good: int
    demand: int
    stable: int
    candidate: int
    cold: list[str] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "known_good": self.known_good,
            "demand": self.demand,
            "stable": self.stable,
            "candidate": self.candidate,
            "cold": self.cold,
            "reason": self.reason,
        }


def capacity_check(plan: RolloutPlan, reports: Sequence[WindowReport]) -> Capacity:
    """Could the known-good pool take all traffic back now? Each worker counts by its latest
    report: on the stable digest its ``capacity`` counts; on the candidate it counts only
    when it holds the stable bundle verified in its cache (``stable_warm``: it rolls back
    warm). The sum must cover the sum of every worker's peak in-flight requests; no report
    at all is no proof (``ok`` False)."""
    latest: dict[str, WindowReport] = {}
    peak: dict[str, int] = {}
    for r in sorted(reports, key=lambda r: r.received_at):
        latest[r.worker_keyid] = r
        peak[r.worker_keyid] = max(peak.get(r.worker_keyid, 0), r.inflight_peak)
    stable = sum(r.capacity for r in latest.values() if r.digest == plan.stable)
    candidate = sum(r.capacity for r in latest.values() if r.digest == plan.candidate)
    warm = sum(r.capacity for r in latest.values() if r.digest == plan.candidate and r.stable_warm)
    cold = sorted(k for k, r in latest.items() if r.digest == plan.candidate and not r.stable_warm)
    demand = sum(peak.values())
    known_good = stable + warm
    if not latest:
        reason = "no worker reported in the window: the known-good pool's capacity is unknown"
    elif known_good < demand or known_good == 0:
        reason = (
            f"the known-good pool admits {known_good} concurrent requests (stable {stable}, "
            f"warm candidate workers {warm}), less than the fleet's peak {demand}"
        )
    else:
        reason = ""
    return Capacity(not reason, known_good, demand, stable, candidate, cold, reason)
