"""``modelward replay``: deterministic replay through one bundle (and another, or expected
outputs); the result is a signed statement attached to the bundle (docs/loader.md#replay).

Everything the command is given is checked before vLLM is imported: the requests file, the
expected outputs, the worker key and the CPU KV-cache setting.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.common import console, err_console, fail, show_progress
from modelward.cli.trust_options import TrustOptions, with_trust_options
from modelward.cli.worker import (
    KvCacheOpt,
    emit_json,
    stdout_reserved,
    usage_errors,
    valid_reference,
)

__all__ = ["replay"]


def _pulled_config(client: Any, reference: str, cache: Any, trust: Any) -> tuple[Any, Any, Any]:
    from modelward.attest.manifest import verify_tree
    from modelward.loader.engine import check_engine_version
    from modelward.loader.hardening import ServingConfig
    from modelward.loader.pull import pull_bundle
    from modelward.loader.worker import load_bundle_spec

    pulled = pull_bundle(client, reference, cache, trust)
    spec = load_bundle_spec(pulled.directory)
    warning = check_engine_version(
        spec.engine.version, enforce=pulled.policy.engine_version == "enforce"
    )
    if warning:
        err_console.print(warning, markup=False)
    verify_tree(pulled.directory, pulled.manifest)
    return pulled, spec, ServingConfig.from_spec(pulled.directory, spec)


def _print_report(digest: str, run: Any) -> None:
    report = run.report
    console.print(f"bundle {digest}")
    console.print(f"reference {report.reference}")
    console.print(f"mode {run.mode}" + (f" ({run.mode_reason})" if run.mode_reason else ""))
    console.print(f"runs {report.runs} requests {report.requests} executions {report.executions}")
    console.print(f"consecutive_matches {report.consecutive_matches}")
    console.print(f"divergences {report.divergence_count}")
    console.print(f"output_divergences {report.output_divergence_count}")
    for div in report.divergences[:20]:
        console.print(
            f"  run {div.run} request {div.request_id} first differing token index {div.index}"
        )
    console.print(
        f"side_effect_divergences {report.side_effect_divergence_count} "
        f"(of {report.side_effect_requests} requests with a side-effect log)"
    )
    for sdiv in report.side_effect_divergences[:20]:
        console.print(
            f"  run {sdiv.run} request {sdiv.request_id} side effects differ at "
            f"{sdiv.path or '(the whole log)'}"
        )
    if run.reference_report is not None:
        console.print(
            f"reference_divergences {run.reference_report.divergence_count} "
            "(the reference against its own first run)"
        )
    uniques = sorted(report.unique_completions.items(), key=lambda kv: (-kv[1], kv[0]))
    console.print(f"max_unique_completions {max(report.unique_completions.values())}")
    for rid, count in uniques[:10]:
        if count > 1:
            console.print(f"  {rid}: {count} unique completions")


def _checked_input(
    requests_file: Path,
    expected: Path | None,
    *,
    against: str | None,
    kvcache: int | None,
    extra_args: tuple[str, ...],
) -> tuple[list[Any], str, Any, dict[str, Any]]:
    """The requests, the expected outputs and the extra engine arguments, checked; exit 2
    naming the file and line (or the flag) at fault, 1 for an argument the allowlist
    refuses. Imports no vLLM."""
    from modelward.cli.worker import _allowed_hint
    from modelward.loader.errors import InputError, UnsafeArgument
    from modelward.loader.hardening import check_extra_args, cpu_kv_cache
    from modelward.loader.replay import load_expected, load_requests_file

    if against is not None and expected is not None:
        fail("give at most one of --against and --expected", code=2)
    try:
        extra = check_extra_args(extra_args, serve=False)
    except UnsafeArgument as exc:
        fail(str(exc), hint=_allowed_hint(False))
    try:
        requests, requests_sha256 = load_requests_file(requests_file)
        reference = load_expected(expected, requests) if expected is not None else None
        cpu_kv_cache(os.environ, option=kvcache, available_bytes=None)
    except InputError as exc:
        fail(str(exc), code=2)
    return requests, requests_sha256, reference, extra


def _predicate(
    digest: str,
    against: str | None,
    *,
    requests_sha256: str,
    concurrency: int,
    extra_args: tuple[str, ...],
    run: Any,
) -> dict[str, Any]:
    """The replay-result predicate (docs/loader.md#replay-result)."""
    return {
        "version": 1,
        "bundle_digest": digest,
        "against": against,
        "requests_sha256": requests_sha256,
        "concurrency": concurrency,
        "engine_args": list(extra_args),
        "mode": run.mode,
        "reference_divergence_count": (
            run.reference_report.divergence_count if run.reference_report else None
        ),
        "fingerprint_id": run.fingerprint.id,
        "fingerprint": dict(run.fingerprint.data),
        **run.report.to_predicate(),
    }


def _announce(
    bundle: str, attach_error: str | None, kept: Path | None, registry_url: str
) -> str | None:
    """Say on stderr whether the signed result was attached, and where; return where."""
    from modelward.cli.worker import _log

    if kept is None and attach_error is not None:
        err_console.print("no --worker-key: result not signed or attached", markup=False)
        return None
    if attach_error is not None:
        _log(
            f"warning: {attach_error}\n  the signed result is kept at {kept}; attach it "
            f"once the key is registered: modelward attestation add {bundle} {kept}"
        )
        return None
    _log(
        f"attached the signed replay result to {bundle} at {registry_url} "
        f"(modelward attestation list {bundle})"
    )
    return f"{registry_url} {bundle}"


@contextmanager
def _replay_progress(runs: int) -> Iterator[Callable[[Any], None]]:
    """After each run: a bar with the consecutive matches so far on a terminal, else a line
    on stderr every tenth of the runs."""
    if show_progress():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=err_console,
            transient=True,
        ) as bar:
            task = bar.add_task("replay", total=runs)

            def draw(tally: Any) -> None:
                bar.update(
                    task,
                    completed=tally.runs,
                    description=(
                        f"replay: {tally.consecutive_matches} consecutive matches, "
                        f"{tally.divergence_count} divergences"
                    ),
                )

            yield draw
        return
    step = max(1, runs // 10)

    def log(tally: Any) -> None:
        if tally.runs % step == 0 or tally.runs == runs:
            err_console.print(
                f"replay: run {tally.runs}/{runs}: {tally.consecutive_matches} "
                f"consecutive matches, {tally.divergence_count} divergences",
                markup=False,
                highlight=False,
            )

    yield log


@with_trust_options("signers", "aliases", "cache")
def replay(
    ctx: typer.Context,
    requests_file: Annotated[
        Path,
        typer.Argument(
            metavar="REQUESTS.jsonl", help="Captured requests, JSONL (docs/loader.md#replay)"
        ),
    ],
    *,
    bundle: Annotated[
        str,
        typer.Option(
            "--bundle",
            metavar="REPO@REF",
            help="The bundle to replay through",
            callback=valid_reference,
        ),
    ],
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            metavar="REPO@REF",
            help="Compare with this bundle's outputs (verified under the same trust flags)",
            callback=valid_reference,
        ),
    ] = None,
    expected: Annotated[
        Path | None,
        typer.Option(
            "--expected",
            metavar="OUT.jsonl",
            help="Compare with these outputs (JSONL, as --capture writes)",
        ),
    ] = None,
    runs: Annotated[int, typer.Option(min=1, metavar="N", help="Replays of the whole file")] = 1,
    concurrency: Annotated[
        int, typer.Option(min=1, metavar="C", help="Requests per engine batch")
    ] = 1,
    capture: Annotated[
        Path | None,
        typer.Option(
            "--capture", metavar="OUT.jsonl", help="Write the first run's outputs here (JSONL)"
        ),
    ] = None,
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential",
            help="With --against: boot one engine at a time (the reference runs once first), "
            "even when memory holds both for an interleaved replay",
        ),
    ] = False,
    trust: TrustOptions,
    worker_key: Annotated[
        Path | None,
        typer.Option(
            "--worker-key",
            metavar="KEY",
            help="Sign the result and attach it to the bundle (the key must be registered: "
            "`modelward key register KEY.pub`)",
        ),
    ] = None,
    cpu_kvcache_space: KvCacheOpt = None,
) -> None:
    """Replay requests N times: consecutive matches, divergences, unique completions.

    Extra vLLM arguments go after -- and pass the same allowlist as boot (e.g. -- --enforce-eager
    to skip graph compilation; docs/loader.md#hardening). Outputs (token ids) and side-effect
    logs (tool calls, structured outputs) are compared and reported apart. With --against,
    the two engines run interleaved when memory holds both, else one after the other.

    Trust flags (--policy, --public-key, --certificate-chain, --identity/--issuer,
    --sigstore-trust-root) are the worker's policy, as for pull and boot: both --bundle and
    --against are pulled and verified under it before anything runs, and without one the
    replay is refused (docs/policy.md#trust-flags).

    Exit 0 when every execution matches the reference (also when the registry refused the
    signed result: it is then kept locally and named), 1 when any diverges or on a refusal,
    2 usage (a malformed requests or outputs file is named with its line).
    """
    extra_args = tuple(ctx.args)
    requests, requests_sha256, reference, extra = _checked_input(
        requests_file, expected, against=against, kvcache=cpu_kvcache_space, extra_args=extra_args
    )
    if sequential and against is None:
        fail("--sequential needs --against", code=2)

    from modelward.attest.policy import policy_from_flags
    from modelward.attest.statement import PredicateType
    from modelward.cli.worker import _cache, _client, _log
    from modelward.loader.engine import choose_kv_cache, require_vllm
    from modelward.loader.replay import write_capture
    from modelward.loader.replay_run import replay_bundle
    from modelward.loader.statements import load_worker_key, sign_predicate
    from modelward.loader.worker import attach_or_keep

    key = load_worker_key(worker_key) if worker_key else None
    flags = trust.flags
    policy_from_flags(flags)  # unreadable or missing trust: refused before vLLM loads
    cache = _cache(trust.cache_dir)
    attach_error: str | None = None
    kept: Path | None = None
    registry_url = ""
    with stdout_reserved(trust.json_output):
        require_vllm()
        with usage_errors(), _client() as client:
            pulled, _spec, config = _pulled_config(client, bundle, cache, flags)
            other = _pulled_config(client, against, cache, flags) if against else None
            kv_cache = choose_kv_cache(cpu_kvcache_space)
            if kv_cache is not None:
                _log(kv_cache.describe())
            name = (
                f"{other[0].repo}@{other[0].digest}"
                if other is not None
                else str(expected)
                if expected
                else ""
            )
            with _replay_progress(runs) as progress:
                run = replay_bundle(
                    config,
                    requests,
                    runs=runs,
                    concurrency=concurrency,
                    extra=extra,
                    kv_cache=kv_cache,
                    reference=other[2] if other is not None else None,
                    reference_name=name,
                    expected=reference,
                    sequential=sequential,
                    progress=progress,
                )
            if capture is not None:
                write_capture(capture, requests, run.first_run)
            report = run.report
            predicate = _predicate(
                pulled.digest,
                other[0].digest if other else None,
                requests_sha256=requests_sha256,
                concurrency=concurrency,
                extra_args=extra_args,
                run=run,
            )
            if key is not None:
                envelope = sign_predicate(
                    key, pulled.repo, pulled.digest, PredicateType.REPLAY, predicate
                )
                statement_name = f"replay-{hashlib.sha256(envelope).hexdigest()[:16]}.dsse.json"
                attach_error, kept = attach_or_keep(
                    client,
                    pulled.repo,
                    pulled.digest,
                    envelope,
                    what="the signed replay result",
                    name=statement_name,
                    cache=cache,
                    key=key,
                    key_path=worker_key,
                )
                registry_url = client.base_url
    if key is None:
        attach_error = "no --worker-key: the result was not signed"
    attached_to = _announce(f"{pulled.repo}@{pulled.digest}", attach_error, kept, registry_url)
    if trust.json_output:
        emit_json(
            {
                "repo": pulled.repo,
                **predicate,
                "mode_reason": run.mode_reason,
                "attached": key is not None and attach_error is None,
                "attached_to": attached_to,
                "attach_error": attach_error,
                "statement_file": str(kept) if kept else None,
                "capture": str(capture) if capture else None,
                "kv_cache": kv_cache.as_dict() if kv_cache else None,
            }
        )
    else:
        _print_report(pulled.digest, run)
    raise typer.Exit(1 if report.divergence_count else 0)
