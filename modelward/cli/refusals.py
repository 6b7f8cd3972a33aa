"""How the CLI words a registry refusal on stderr (without ``--json``).

Most refusals are one line: ``{status} {code}: {message}`` and the detail as compact JSON. A
``gates_failed`` refusal (docs/evaluation.md#gates) carries every gate of the blocking
evaluation, every counting evaluation and every one not counted: several KB of JSON that
reads as one line. It prints as the message and a table instead (gate, verdict, observed,
bound, more cases needed), then the evaluations not counted with their reasons. With
``--json`` the whole error, detail included, stays as it was (``str(exc)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modelward.client.errors import APIError

__all__ = ["describe_refusal", "gates_table"]

_HEADER = ("gate", "verdict", "observed", "bound", "more cases needed")


def _figure(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _text(value)
    return f"{value:g}"


def _text(value: Any) -> str:
    # Detail comes from the server: one line per cell, no control characters.
    return "".join(ch if ch.isprintable() else "?" for ch in str(value))


def _row(gate: Mapping[str, Any]) -> tuple[str, ...]:
    name = _text(gate.get("name"))
    if gate.get("slice"):
        name = f"{name}[{_text(gate['slice'])}]"
    verdict = _text(gate.get("verdict")).upper()
    return (name, verdict, _figure(gate.get("observed")), _figure(gate.get("bound")),
            _figure(gate.get("more_cases")))  # fmt: skip


def gates_table(gates: Sequence[Mapping[str, Any]]) -> list[str]:
    """``gates`` (``GateResult.to_json`` dicts) as aligned text rows, a header first."""
    rows = [_HEADER, *(_row(g) for g in gates if isinstance(g, Mapping))]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]  # fmt: skip


def describe_refusal(exc: APIError) -> str:
    """The text after ``error:`` for ``exc``: a table for ``gates_failed``, else ``str(exc)``."""
    detail = exc.detail
    if exc.code != "gates_failed" or not isinstance(detail, Mapping):
        return str(exc)
    gates = detail.get("gates")
    if not isinstance(gates, list):
        return str(exc)
    lines = [f"{exc.status} {exc.code}: {exc.message}", *gates_table(gates)]
    evaluations = detail.get("evaluations")
    if isinstance(evaluations, list):
        lines.append(f"evaluations counted: {len(evaluations)}")
    not_counted = detail.get("not_counted")
    for item in not_counted if isinstance(not_counted, list) else []:
        if isinstance(item, Mapping):
            lines.append(
                f"not counted: evaluation by {_text(item.get('signer'))}: "
                f"{_text(item.get('reason'))}"
            )
    lines.append("(the full detail: the same command with --json)")
    return "\n".join(lines)
