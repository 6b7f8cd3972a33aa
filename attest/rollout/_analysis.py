"""The analysis document of a rollout plan: thresholds and triggers (docs/rollouts.md#analysis).

Pure. ``parse_analysis`` reads YAML or JSON (the strict reader: no anchors, no duplicate
keys) and returns its canonical form, refusing anything it does not know with
``PlanInvalid`` naming the field. The registry stores the document verbatim; the plan
carries the canonical form and the sha256 of the verbatim bytes; ``judge_step``
(``_judge.py``) judges a step against them.

```yaml
thresholds:            # the candidate cohort must stay inside these over the window
  error_rate: {max: 0.01}
  ttft_p95_ms: {max: 800}
triggers:              # abort at once when one fires
  - name: sustained-errors
    metric: error_rate
    above: 0.05
    for: 2m
manual: [50]           # optional: the controller pauses before these steps (rollout advance)
min_workers: 2         # optional: candidate workers a step needs (default 1)
```
"""

from __future__ import annotations

import math
import re
from typing import Any

from modelward.attest._yaml import StrictYAMLError, load_strict_yaml
from modelward.attest.rollout._errors import PlanInvalid

__all__ = [
    "MAX_ANALYSIS_BYTES",
    "MAX_MIN_WORKERS",
    "METRICS",
    "min_workers",
    "parse_analysis",
    "parse_duration",
]

# what a serving worker will report (docs/rollouts.md#analysis); a name outside this set is
# refused rather than silently never judged
METRICS = frozenset(
    {
        "error_rate",
        "ttft_p50_ms",
        "ttft_p95_ms",
        "itl_p95_ms",
        "queue_age_p95_ms",
        "task_check_failure_rate",
        "device_fault_rate",
    }
)
MAX_ANALYSIS_BYTES = 64 * 1024
MAX_TRIGGERS = 32
MAX_MIN_WORKERS = 10_000  # one worker per bucket
MAX_DURATION_SECONDS = 7 * 24 * 3600
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_DURATION_RE = re.compile(r"(?:(\d{1,6})h)?(?:(\d{1,6})m)?(?:(\d{1,7})s)?")


def parse_duration(text: str, field: str) -> int:
    """Seconds in ``text``: ``90``, ``90s``, ``10m``, ``1h30m`` (PlanInvalid otherwise)."""
    text = text.strip()
    if text.isdigit():
        seconds = int(text)
    else:
        match = _DURATION_RE.fullmatch(text)
        if not text or match is None:
            raise PlanInvalid(field, f"{text!r} is not a duration (90s, 10m, 1h30m)")
        h, m, s = (int(g) if g else 0 for g in match.groups())
        seconds = h * 3600 + m * 60 + s
    if seconds > MAX_DURATION_SECONDS:
        raise PlanInvalid(field, f"{text!r} is longer than {MAX_DURATION_SECONDS}s (7 days)")
    return seconds


def _number(value: object, field: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlanInvalid(field, f"must be a finite number, not {value!r}")
    return value


def _metric(value: object, field: str) -> str:
    if not isinstance(value, str) or value not in METRICS:
        raise PlanInvalid(field, f"unknown metric {value!r} (one of {sorted(METRICS)})")
    return value


def _keys(doc: dict[str, Any], allowed: set[str], field: str) -> None:
    unknown = sorted(str(k) for k in doc if k not in allowed)
    if unknown:
        raise PlanInvalid(field, f"unknown key(s) {unknown} (allowed: {sorted(allowed)})")


def _thresholds(doc: object) -> dict[str, dict[str, float | int]]:
    if not isinstance(doc, dict):
        raise PlanInvalid("thresholds", "must be a mapping of metric to {max: N} or {min: N}")
    out: dict[str, dict[str, float | int]] = {}
    for name, bounds in doc.items():
        field = f"thresholds.{name}"
        _metric(name, field)
        if not isinstance(bounds, dict) or not bounds:
            raise PlanInvalid(field, "must be a mapping with max and/or min")
        _keys(bounds, {"max", "min"}, field)
        out[name] = {k: _number(v, f"{field}.{k}") for k, v in bounds.items()}
        low, high = out[name].get("min"), out[name].get("max")
        if low is not None and high is not None and low > high:
            raise PlanInvalid(field, f"min {low} is above max {high}")
    return out


def _triggers(doc: object) -> list[dict[str, Any]]:
    if not isinstance(doc, list):
        raise PlanInvalid("triggers", "must be a list")
    if len(doc) > MAX_TRIGGERS:
        raise PlanInvalid("triggers", f"at most {MAX_TRIGGERS}, not {len(doc)}")
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, trigger in enumerate(doc):
        field = f"triggers[{i}]"
        if not isinstance(trigger, dict):
            raise PlanInvalid(field, "must be a mapping (name, metric, above|below, for)")
        _keys(trigger, {"name", "metric", "above", "below", "for"}, field)
        name = trigger.get("name")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise PlanInvalid(f"{field}.name", f"{name!r} is not a name ([a-z0-9_-], 1-64)")
        if name in names:
            raise PlanInvalid(f"{field}.name", f"{name!r} is named twice")
        names.add(name)
        if ("above" in trigger) == ("below" in trigger):
            raise PlanInvalid(field, "needs exactly one of above and below")
        side = "above" if "above" in trigger else "below"
        one: dict[str, Any] = {
            "name": name,
            "metric": _metric(trigger.get("metric"), f"{field}.metric"),
            side: _number(trigger[side], f"{field}.{side}"),
        }
        held = trigger.get("for", 0)
        one["for_seconds"] = (
            parse_duration(str(held), f"{field}.for")
            if not isinstance(held, bool) and isinstance(held, int | str)
            else _bad_for(held, f"{field}.for")
        )
        out.append(one)
    return out


def _bad_for(value: object, field: str) -> int:
    raise PlanInvalid(field, f"{value!r} is not a duration (90s, 10m, 1h30m)")


def _manual(doc: object) -> list[int]:
    if not isinstance(doc, list) or not doc:
        raise PlanInvalid("manual", "must be a non-empty list of step weights")
    for i, weight in enumerate(doc):
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise PlanInvalid(f"manual[{i}]", f"{weight!r} is not a step weight (1..100)")
    if len(set(doc)) != len(doc):
        raise PlanInvalid("manual", f"a weight is named twice: {doc}")
    return sorted(doc)


def min_workers(value: object, field: str = "min_workers") -> int:
    """The candidate workers a step needs: a whole number in 1..MAX_MIN_WORKERS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MIN_WORKERS:
        raise PlanInvalid(field, f"{value!r} is not a number of workers (1..{MAX_MIN_WORKERS})")
    return value


def parse_analysis(raw: bytes) -> dict[str, Any]:
    """The canonical form of an analysis document: ``{"thresholds": {...}, "triggers":
    [...]}``, plus ``"manual": [weights]`` when the document names any (the steps the
    controller pauses before, for ``rollout advance``; each must be a step of the plan,
    which ``parse_plan`` checks) and ``"min_workers": N`` when it names one (the candidate
    workers a step's analysis needs; absent: 1, and the plan's bytes are as before).
    Raises PlanInvalid (``analysis``, or the field at fault)."""
    if len(raw) > MAX_ANALYSIS_BYTES:
        raise PlanInvalid("analysis", f"{len(raw)} bytes, more than {MAX_ANALYSIS_BYTES}")
    try:
        doc = load_strict_yaml(raw)  # JSON is YAML
    except (StrictYAMLError, UnicodeDecodeError) as exc:
        raise PlanInvalid("analysis", f"not YAML or JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise PlanInvalid("analysis", "must be a mapping with thresholds and/or triggers")
    _keys(doc, {"thresholds", "triggers", "manual", "min_workers"}, "analysis")
    if not doc:
        raise PlanInvalid("analysis", "is empty: give thresholds and/or triggers")
    out: dict[str, Any] = {
        "thresholds": _thresholds(doc.get("thresholds", {})),
        "triggers": _triggers(doc.get("triggers", [])),
    }
    if "manual" in doc:
        out["manual"] = _manual(doc["manual"])
    if "min_workers" in doc:
        out["min_workers"] = min_workers(doc["min_workers"])
    return out
