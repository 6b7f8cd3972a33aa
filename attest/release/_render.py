"""A readable Markdown rendering of a release-record predicate (docs/release.md; the HTML
page is ``_page``).

It shows sections of plain-text lines: names, digests, verdicts and figures only, never
embedded bytes, policy keys or payloads.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from modelward.attest.release._model import ATTESTATION_SECTIONS

__all__ = ["render_markdown", "rollout_lines"]


def _pinned_inputs(bundle: Mapping[str, Any]) -> list[str]:
    """What the bundle pins; a value ``modelward.yaml`` would pin says why it is absent."""
    inputs = bundle["inputs"]
    lines = [f"manifest {bundle['manifest']['sha256']} ({bundle['manifest']['size']} bytes)"]
    for name in ("weights", "tokenizer", "chat_template", "adapters"):
        lines.append(f"{name}: {', '.join(inputs[name]) or '(none)'}")
    quant = inputs["quantization"]
    lines.append(
        f"quantization: {quant['method'] or '(none)'}"
        + (f" ({', '.join(quant['files'])})" if quant["files"] else "")
    )
    spec = bundle.get("spec")
    for name in ("runtime_image", "engine", "drivers", "serving_args"):
        value = inputs[name]
        if value is not None:
            shown = json.dumps(value, sort_keys=True)
        elif spec is None:
            shown = "(not pinned: the bundle has no modelward.yaml)"
        elif spec.get("parsed") is None:
            shown = "(unknown: the bundle's modelward.yaml is invalid)"
        else:
            shown = "(not pinned: null in the bundle's modelward.yaml)"
        lines.append(f"{name}: {shown}")
    lines += [
        f"file {f['path']} ({f['input']}): {f['digest']} {f['size']} bytes" for f in bundle["files"]
    ]
    return lines


def _summary(predicate: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """Sections of plain-text lines, shared by the Markdown and HTML renderings. Only names,
    digests, verdicts and figures: no embedded bytes, no policy keys, no payloads."""
    record = predicate["record"]
    bundle = predicate["bundle"]
    role = predicate["tuf"]["role"]
    out: list[tuple[str, list[str]]] = []
    out.append(
        (
            "Release",
            [
                f"{record['repository']}@{record['alias']} version {record['version']}: the "
                f"alias's signed move {record['version']}, TUF role {role['name']} version "
                f"{role['version']}",
                f"bundle {record['digest']}",
                f"recorded {record['made_at']} from {record['registry']}",
            ],
        )
    )
    out.append(("Pinned inputs", _pinned_inputs(bundle)))
    gates = predicate["gates"]
    lines = [f"policy sha256 {predicate['policy']['sha256']}"]
    rule = gates.get("rule")
    if rule:
        lines.append(
            f"alias rule {rule.get('pattern')}: protected {rule.get('protected')}, "
            f"approvals {rule.get('approvals')}"
        )
    if gates.get("error"):
        lines.append(f"policy error: {gates['error']}")
    out.append(("Policy in force", lines))
    lines = []
    for section in ATTESTATION_SECTIONS:
        for item in predicate[section]:
            lines.append(
                f"{section[:-1]} #{item.get('id')} by {item.get('attached_by')} "
                f"at {item.get('attached_at')}: {item['sha256']}"
            )
    for decision in gates["decisions"]:
        lines.append(f"gates for evaluation #{decision['attestation']}: {decision['verdict']}")
        lines += [
            f"  {g['name']}{'[' + g['slice'] + ']' if g.get('slice') else ''}: "
            f"{g['verdict'].upper()}: {g['message']}"
            for g in decision["gates"]
        ]
    out.append(("Evidence", lines or ["(no evaluation, baseline or replay statements)"]))
    approvals = predicate["approvals"]
    lines = [f"TUF role {approvals['role']} version {approvals['role_version']}"]
    lines += [
        f"signed by key {s['keyid']} ({s['principal'] or 'principal unknown'})"
        for s in approvals["signatures"]
    ]
    lines += [
        f"approved by {a.get('principal')} at {a.get('at')} (audit #{a.get('seq')})"
        for a in approvals["registry"]
    ]
    out.append(("Approvals", lines))
    lines = [
        f"signed move {m['move']} (TUF role {role['name']} version {m['role_version']}): "
        f"{m['from_digest']} -> {m['to_digest']}"
        for m in predicate["history"]
    ]
    lines += [
        f"registry row v{h['version']} (unsigned): {h.get('from_digest')} -> "
        f"{h.get('to_digest')} by {h.get('actor')} at {h.get('at')}"
        + (" (rollback)" if h.get("rollback") else "")
        + (f": {h['reason']}" if h.get("reason") else "")
        for h in predicate["registry_history"]["entries"]
    ]
    rollback = predicate.get("rollback")
    if rollback:
        lines.append(
            f"rolled back at registry row v{rollback['version']} (unsigned): "
            f"{rollback.get('reason')}"
        )
    out.append(("Alias history", lines))
    out.append(("Rollouts", rollout_lines(predicate)))
    audit = predicate["audit"]
    lines = [
        f"#{e['seq']} {e['at']} {e['actor']} {e['action']} {e['subject']} {e['hash']}"
        for e in audit["events"]
    ]
    checkpoint = audit.get("checkpoint")
    if checkpoint:
        lines.append(
            f"signed checkpoint: tree size {checkpoint.get('tree_size')}, root "
            f"{checkpoint.get('root_hash')}"
        )
    out.append(("Audit events", lines or ["(none)"]))
    return out


def rollout_lines(predicate: Mapping[str, Any]) -> list[str]:
    """The rollouts of the release as plain-text lines: those that led to this move, then
    those run from its digest since (``later_rollouts``): each plan's digests and steps, each
    signed step with its version, the signed abort reason and verdicts; then the registry's
    times, verdicts and rollback figures, labelled unsigned."""
    lines: list[str] = []
    for item in predicate.get("rollouts") or []:
        lines += _rollout(item)
    if not lines:
        lines.append("(no rollout of the alias between the previous move and this one)")
    later = predicate.get("later_rollouts") or []
    if later:
        lines.append("run from this release since its move:")
    for item in later:
        lines += _rollout(item)
    return lines


def _rollout(item: Mapping[str, Any]) -> list[str]:
    plan = json.loads(base64.b64decode(item["plan"]["data"]))
    role = item["rollout_role"]["name"]
    lines = [
        f"rollout {item['rollout_id']} ({item['outcome']}): {plan['stable']} -> "
        f"{plan['candidate']}, steps {','.join(str(w) for w in plan['steps'])}, plan "
        f"{item['plan']['sha256']} signed by the alias's role version "
        f"{item['plan']['role_version']}"
    ]
    for entry in item["steps"]:
        step = json.loads(base64.b64decode(entry["data"]))
        lines.append(
            f"  step {step['index']} at {step['weight']}% {step['state']} ({role} version "
            f"{entry['tuf_version']})" + (f": {step['reason']}" if step["reason"] else "")
        )
    if item.get("abort_reason") is not None:
        lines.append(f"  abort reason (signed): {item['abort_reason']}")
    for verdict in item.get("verdicts") or []:
        lines.append(
            f"  verdict (signed): {verdict['verdict']} at step {verdict['index']}: "
            f"{verdict['reason']}"
        )
    registry = item.get("registry") or {}
    for row in registry.get("history") or []:
        lines.append(
            f"  registry (unsigned): {row.get('state')} at {row.get('weight')}% by "
            f"{row.get('actor')} at {row.get('at')}, verdict {row.get('verdict') or '-'}"
        )
    rollback = registry.get("rollback")
    if rollback:
        lines.append(
            "  rollback figures (the registry's measurements, unsigned): "
            + json.dumps(rollback, sort_keys=True)
        )
    return lines


def render_markdown(predicate: Mapping[str, Any]) -> str:
    """A readable Markdown rendering of a release-record predicate."""
    record = predicate["record"]
    parts = [f"# Release record: {record['repository']}@{record['alias']} v{record['version']}", ""]
    for title, lines in _summary(predicate):
        parts += [f"## {title}", ""] + [f"- `{_md(line)}`" for line in lines] + [""]
    return "\n".join(parts)


def _md(text: str) -> str:
    return text.replace("`", "'").replace("\n", " ")
