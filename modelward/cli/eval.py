"""``modelward eval attach``: sign an evaluation of a bundle and attach it (docs/evaluation.md).

The results file holds per-case outcomes of the candidate and the baseline on the same cases;
the counts, paired differences and 95% intervals of the evaluation/v1 predicate are computed
here (attest.evaluation), never typed in. The statement is signed with ``--key`` (DSSE) and
attached through the registry, which decides who may attach evaluations (reviewers and admins)
and whose signature counts for a protected alias's gates (the policy's evidence signers).
A bad results file or key is refused before anything is sent. After attaching it says, for
each alias of the repository with release gates, the verdict before and after and every gate
verdict the evaluation changed (``GET .../bundles/{digest}/gates``, as if the bundle's
publisher moved the alias).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import err_console, fail
from modelward.cli.remote import (
    AnyRef,
    AsJson,
    PassphraseEnvOpt,
    registry_client,
    reported,
    valid_ref,
)
from modelward.client.errors import APIError

if TYPE_CHECKING:
    from modelward.client.api import RegistryClient

__all__ = ["attach", "describe_gate_changes", "describe_predicate", "eval_app", "gate_changes"]

eval_app = typer.Typer(
    name="eval",
    help="Evaluation statements: per-case results, signed and attached to a bundle.",
    no_args_is_help=True,
)


def _figure(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


def describe_predicate(predicate: dict[str, Any]) -> list[str]:
    """The gate-relevant figures of an evaluation predicate, one line each."""
    lines: list[str] = []
    det = predicate.get("deterministic")
    if det:
        lo, hi = det["interval"]
        lines.append(
            f"deterministic checks: {det['candidate_pass']}/{det['checks']} pass "
            f"({det['pass_rate'] * 100:.2f}%, 95% interval {lo * 100:.2f}% to {hi * 100:.2f}%); "
            f"baseline {det['baseline_pass_rate'] * 100:.2f}%"
        )
    rows = [("overall (human-rated)", predicate.get("overall"))]
    rows += [(f"slice {s['slice']}", s) for s in predicate.get("slices") or []]
    for label, stats in rows:
        if not stats:
            continue
        lo, hi = stats["interval_points"]
        lines.append(
            f"{label}: candidate {stats['candidate_pass']}/{stats['cases']}, baseline "
            f"{stats['baseline_pass']}/{stats['cases']}: {stats['difference_points']:+.2f} "
            f"points (95% interval {lo:+.2f} to {hi:+.2f})"
        )
    critical = predicate.get("critical_safety_failures") or {}
    ids = critical.get("candidate") or []
    shown = f" ({', '.join(ids[:10])}{', ...' if len(ids) > 10 else ''})" if ids else ""
    base_count = len(critical.get("baseline") or [])
    lines.append(f"critical safety failures: {len(ids)}{shown}; baseline {base_count}")
    for name, pair in (predicate.get("metrics") or {}).items():
        if pair.get("candidate") is None and pair.get("baseline") is None:
            continue
        lines.append(
            f"{name}: {_figure(pair.get('candidate'))} (baseline {_figure(pair.get('baseline'))})"
        )
    return lines


def _gates(client: RegistryClient, repo: str, digest: str) -> dict[str, Any] | None:
    """``client.bundle_gates``, or None (said on stderr) when the registry cannot answer:
    the gate verdicts are a report, never a reason to keep an evaluation from attaching."""
    try:
        answer: dict[str, Any] = client.bundle_gates(repo, digest)
    except APIError as exc:
        err_console.print(f"note: gate verdicts not shown: {exc}", markup=False)
        return None
    return answer


def gate_changes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Per gated alias (``client.bundle_gates`` before and after attaching): its verdict
    before and after, and each gate whose verdict changed (``label``, ``before``, ``after``)."""
    earlier = {a["alias"]: a for a in before.get("aliases") or []}
    changes = []
    for now in after.get("aliases") or []:
        was = earlier.get(now["alias"], {})
        old = {g["label"]: g["verdict"] for g in was.get("gates") or []}
        changed = [
            {"label": g["label"], "before": old.get(g["label"]), "after": g["verdict"]}
            for g in now.get("gates") or []
            if old.get(g["label"]) != g["verdict"]
        ]
        changes.append(
            {
                "alias": now["alias"],
                "before": was.get("verdict"),
                "after": now["verdict"],
                "changed": changed,
                "not_counted": now.get("not_counted") or [],
            }
        )
    return changes


def describe_gate_changes(repo: str, digest: str, changes: list[dict[str, Any]]) -> list[str]:
    """Human lines for ``gate_changes``: one per gated alias, then each gate that changed."""
    lines = []
    for alias in changes:
        lines.append(
            f"gates of {repo}@{alias['alias']} for {digest}: {alias['before']} -> {alias['after']}"
        )
        lines.extend(
            f"  {c['label']}: {str(c['before']).upper()} -> {c['after'].upper()}"
            for c in alias["changed"]
        )
        if not alias["changed"]:
            lines.append("  no gate verdict changed")
        lines.extend(
            f"  not counted: evaluation by {n['signer']}: {n['reason']}"
            for n in alias["not_counted"]
        )
    return lines


@eval_app.command("attach")
def attach(
    ref: AnyRef,
    *,
    results: Annotated[
        Path,
        typer.Option(
            "--results",
            metavar="FILE",
            exists=True,
            dir_okay=False,
            help="Per-case results, JSONL or JSON (docs/evaluation.md#results)",
        ),
    ],
    key: Annotated[
        Path,
        typer.Option(
            "--key",
            metavar="FILE",
            exists=True,
            dir_okay=False,
            help="Private key that signs the statement (an evidence signer's)",
        ),
    ],
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            metavar="REPO@REF",
            callback=valid_ref,
            help="The baseline bundle the results compare against",
        ),
    ] = None,
    suite: Annotated[
        str | None, typer.Option("--suite", metavar="NAME", help="Suite name (else the file's)")
    ] = None,
    suite_version: Annotated[
        str | None,
        typer.Option("--suite-version", metavar="V", help="Suite version (with --suite)"),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Sign an evaluation of a bundle against its baseline from per-case results; attach it."""
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.evaluation import EvaluationError, build_predicate, load_results
    from modelward.attest.statement import PredicateType, make_statement
    from modelward.cli.trust import load_key
    from modelward.client.config import parse_reference

    if (suite is None) != (suite_version is None):
        fail("--suite and --suite-version go together", code=2)
    # the key and the results first: nothing is sent when either is bad
    private = load_key(key, passphrase_env)
    try:
        tally = load_results(results)
    except EvaluationError as exc:
        fail(str(exc), code=2)  # a malformed --results file is bad input (exit 2)
    target = parse_reference(ref)
    with reported(), registry_client() as client:
        digest = client.resolve(target)
        base: tuple[str, str] | None = None
        if baseline is not None:
            base_ref = parse_reference(baseline)
            base = (base_ref.repo, client.resolve(base_ref))
        try:
            predicate = build_predicate(
                tally,
                bundle=(target.repo, digest),
                baseline=base,
                suite=(suite, suite_version) if suite and suite_version else None,
            )
        except EvaluationError as exc:
            fail(str(exc))
        if base is not None and base[1] == digest:
            fail(f"--baseline {baseline} is the evaluated bundle itself ({digest})", code=2)
        statement = make_statement(target.repo, digest, PredicateType.EVALUATION, predicate)
        envelope = sign_envelope(statement, [private])
        before = _gates(client, target.repo, digest)
        summary = client.add_attestation(target.repo, digest, envelope)
        after = _gates(client, target.repo, digest) if before is not None else None
    changes = gate_changes(before, after) if before is not None and after is not None else None
    if as_json:
        answer = {
            "repository": target.repo,
            "digest": digest,
            "attestation": summary,
            "predicate": predicate,
            "gates": changes,
        }
        typer.echo(json.dumps(answer, indent=2, sort_keys=True))
        return
    against = f"against {base[0]}@{base[1]}" if base else "with no baseline bundle"
    typer.echo(
        f"attached evaluation #{summary.get('id')} to {target.repo}@{digest} "
        f"(suite {predicate['suite']['name']} {predicate['suite']['version']}, "
        f"{predicate['cases']} cases) {against}"
    )
    for line in describe_predicate(predicate):
        typer.echo(f"  {line}")
    for line in describe_gate_changes(target.repo, digest, changes or []):
        typer.echo(line)
