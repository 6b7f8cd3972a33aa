"""The verdicts of a rollout as its signed steps say them (docs/release.md#rollouts).

The analysis's verdicts are recorded on the registry's rows (unsigned), but each verdict
the registry acted on is also in the reason of the step it signed for it: the rollout
controller advances with ``analysis passed: ...`` and aborts with ``analysis failed at step
N (W%): ...`` (``registry/domains/rollouts/analysis.py``, with the prefixes below), and a
quarantined candidate aborts with ``the candidate ... is quarantined``. ``signed_verdicts``
reads them from the steps' verified bytes; ``check_verdicts`` holds the record's
``verdicts`` and the verdicts on the registry's rows of those steps to them. A hold
(inconclusive) signs nothing: it stays the registry's word.

Pure: no network, no database, no environment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from modelward.attest.release._model import ReleaseRecordInvalid
from modelward.attest.rollout import RolloutStep

__all__ = ["FAILED", "PASSED", "check_verdicts", "signed_verdicts"]

PASSED: Final = "analysis passed: "  # the controller's advance (or pause) after a pass
FAILED: Final = "analysis failed at "  # the controller's abort after a fail
QUARANTINED: Final = ("the candidate ", " is quarantined")
CHECK: Final = 6


def _verdict(step: RolloutStep) -> str | None:
    if step.reason.startswith(PASSED) and step.state in ("running", "paused", "completed"):
        return "pass"
    if step.state == "aborted" and (
        step.reason.startswith(FAILED)
        or (step.reason.startswith(QUARANTINED[0]) and step.reason.endswith(QUARANTINED[1]))
    ):
        return "fail"
    return None


def signed_verdicts(steps: Sequence[tuple[RolloutStep, int]]) -> list[dict[str, Any]]:
    """Each verdict a signed step acted on: ``step`` (position in ``steps``, each a step
    and the version of ``ORG:NAME@=rollout`` that signed it) and ``tuf_version`` of the
    judged step, ``index`` its index, ``verdict``, and ``reason``: the acting step's signed
    reason. A quarantine abort before any step judges nothing: ``step`` and ``index`` are
    None."""
    out: list[dict[str, Any]] = []
    for j, (step, _version) in enumerate(steps):
        verdict = _verdict(step)
        if verdict is None:
            continue
        judged = steps[j - 1] if j > 0 else None
        out.append(
            {
                "step": j - 1 if judged else None,
                "index": judged[0].index if judged else None,
                "tuf_version": judged[1] if judged else None,
                "verdict": verdict,
                "reason": step.reason,
            }
        )
    return out


def _fail(field_name: str, message: str) -> ReleaseRecordInvalid:
    return ReleaseRecordInvalid(CHECK, field_name, message)


def check_verdicts(
    entry: Mapping[str, Any],
    where: str,
    steps: Sequence[tuple[RolloutStep, int]],
    registry: Mapping[str, Any],
) -> None:
    """Check (6e): ``entry["verdicts"]`` are exactly the signed ones (``signed_verdicts``),
    and no row of the registry's history for a judged step (matched by its TUF version)
    says another verdict."""
    expected = signed_verdicts(steps)
    claimed = entry.get("verdicts")
    if not isinstance(claimed, list):
        raise _fail(f"{where}.verdicts", "must be a list")
    for k, want in enumerate(expected):
        if k >= len(claimed) or claimed[k] != want:
            raise _fail(
                f"{where}.verdicts[{k}]",
                f"the signed steps say {want['verdict']} at step {want['index']} "
                f"({want['reason']!r}); the record says "
                + (repr(claimed[k]) if k < len(claimed) else "nothing"),
            )
    if len(claimed) != len(expected):
        raise _fail(
            f"{where}.verdicts[{len(expected)}]",
            f"claims {len(claimed)} verdict(s); the signed steps act on {len(expected)}",
        )
    judged = {v["tuf_version"]: v for v in expected if v["tuf_version"] is not None}
    for k, row in enumerate(registry.get("history") or []):
        acted = judged.get(row.get("tuf_version")) if isinstance(row, Mapping) else None
        if acted is not None and row.get("verdict") != acted["verdict"]:
            raise _fail(
                f"{where}.registry.history[{k}].verdict",
                f"{row.get('verdict')!r}, but the signed step that acted on it says "
                f"{acted['verdict']} ({acted['reason']!r})",
            )
