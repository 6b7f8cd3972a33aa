"""What a serving worker does: boot a pulled bundle and replay requests through it.

``boot_bundle`` (docs/loader.md#boot), in order:

1. check extra engine arguments (refused before anything is fetched);
2. record the registry's signed audit checkpoint (verified when the worker pins the
   registry's checkpoint key: a worker is a witness of the log), then pull and verify
   (loader.pull: digest, attestations, scanner, worker policy);
3. read the bundle's modelward.yaml: the serving configuration is pinned there;
4. check the running vLLM against the pinned engine (policy ``engine_version``);
5. re-hash the files on disk right before the engine opens them;
6. boot: the in-process engine, or with ``--serve`` the OpenAI server as a child;
7. record the baseline on that engine (over HTTP on the server), compare it with a trusted
   baseline for the same (bundle, fingerprint) and, when none exists, store the new one as
   a signed statement; an enforced divergence stops the engine (the server too);
8. report the boot (digest, fingerprint, outcome, the checkpoint seen) to the registry —
   refused boots too;
   with ``--serve``, then wait for the server to exit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelward.attest.errors import AttestError
from modelward.attest.policy import TrustFlags
from modelward.loader.baseline import Baseline, Comparison, compare_baselines, record_baseline
from modelward.loader.cache import Cache
from modelward.loader.engine import boot_engine, check_engine_version
from modelward.loader.errors import BaselineDivergence, InputError, LoaderError, RefusedError
from modelward.loader.fingerprint import Fingerprint, collect_fingerprint
from modelward.loader.hardening import ServingConfig, check_extra_args
from modelward.loader.probes import resolve_probes
from modelward.loader.pull import PulledBundle, pull_bundle
from modelward.loader.server import ServedEngine
from modelward.loader.source import RegistrySource
from modelward.loader.statements import WorkerKey, find_baselines, sign_predicate

__all__ = ["BootOptions", "BootResult", "boot_bundle", "load_bundle_spec"]

Log = Callable[[str], None]


@dataclass(frozen=True)
class BootOptions:
    serve: bool = False
    host: str = "127.0.0.1"
    port: int = 8000
    extra_args: tuple[str, ...] = ()
    worker_key: WorkerKey | None = None
    max_tokens: int = 16
    workers: int = 4
    ready_timeout: float = 900.0  # --serve: seconds for the server to come up
    ready_file: Path | None = None  # --serve: written once serving, removed at exit
    audit_key: str | None = None  # the registry's checkpoint verifier key (NAME+ID+KEY)


@dataclass
class BootResult:
    pulled: PulledBundle
    fingerprint: Fingerprint | None = None
    baseline: Baseline | None = None
    comparison: Comparison | None = None
    recorded: bool = False
    exit_code: int = 0
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    audit_checkpoint: dict[str, Any] | None = None  # the registry's checkpoint at boot


def load_bundle_spec(directory: Path) -> Any:
    """The bundle's ``modelward.yaml`` (``InputError`` when absent; ``SpecError`` if bad)."""
    from modelward.attest.spec import SPEC_FILENAME, load_spec

    path = directory / SPEC_FILENAME
    if not path.is_file():
        raise InputError(f"{directory}: the bundle has no {SPEC_FILENAME}; the serving "
                         "configuration must be pinned in the bundle")
    return load_spec(path.read_bytes(), f"{path}")


def _report(client: Any, pulled: PulledBundle, fingerprint: Fingerprint | None, *,
            outcome: str, detail: Any, log: Log) -> None:
    from modelward.registry.client import RegistryClientError

    fp = fingerprint or collect_fingerprint(
        ServingConfig(pulled.directory, "unknown"), os.environ)
    try:
        client.report_boot(pulled.repo, pulled.digest, fingerprint_id=fp.id,
                           fingerprint=dict(fp.data), outcome=outcome, detail=detail)
    except RegistryClientError as exc:
        log(f"warning: could not record the boot in the registry: {exc}")


def boot_bundle(client: RegistrySource, reference: str, cache: Cache, trust: TrustFlags,
                options: BootOptions, *, log: Log,
                progress: Callable[[int], None] | None = None) -> BootResult:
    """Pull, verify, boot and baseline ``reference`` (see the module doc for the steps).

    Raises ``UnsafeArgument``, ``RefusedError`` subclasses, ``IntegrityError``, attest
    errors and registry client errors; a refused boot is reported before raising.
    """
    from modelward.attest.manifest import verify_tree

    # (1): extra engine arguments.
    extra = check_extra_args(options.extra_args, serve=options.serve)
    # (2): the audit checkpoint this boot saw, then pull and verify.
    seen = _witness(client, options, log=log)
    clock = time.monotonic()
    pulled = pull_bundle(client, reference, cache, trust, workers=options.workers,
                         progress=progress)
    result = BootResult(pulled=pulled, audit_checkpoint=seen)
    result.timings["pull"] = time.monotonic() - clock
    fingerprint: Fingerprint | None = None
    try:
        # (3): the pinned serving configuration.
        spec = load_bundle_spec(pulled.directory)
        config = ServingConfig.from_spec(pulled.directory, spec)
        # (4): the engine version.
        warning = check_engine_version(
            spec.engine.version, enforce=pulled.policy.engine_version == "enforce")
        if warning:
            result.warnings.append(warning)
            log(warning)
        # (5): re-hash right before the engine opens the files.
        clock = time.monotonic()
        verify_tree(pulled.directory, pulled.manifest)
        result.timings["rehash"] = time.monotonic() - clock
        fingerprint = collect_fingerprint(config, os.environ)
        # (6): boot.
        if options.serve:
            return _serve(client, pulled, spec, config, options=options, result=result,
                          log=log)
        clock = time.monotonic()
        engine = boot_engine(config, extra)
        result.timings["engine_boot"] = time.monotonic() - clock
        try:
            fingerprint = collect_fingerprint(config, os.environ, llm=engine.llm)
            # (7): baseline.
            baseline = _baseline(engine, fingerprint, pulled, spec, config, options=options,
                                 result=result)
        finally:
            engine.shutdown()
        clock = time.monotonic()
        _compare_and_record(client, pulled, baseline, options=options, result=result, log=log)
        result.timings["record"] = time.monotonic() - clock
    except (LoaderError, AttestError) as exc:
        _report(client, pulled, result.fingerprint or fingerprint, outcome="refused",
                detail={"reason": str(exc), "audit_checkpoint": seen}, log=log)
        raise
    # (8): the boot record.
    _report(client, pulled, fingerprint, outcome="ok", detail=_detail(result), log=log)
    return result


def _detail(result: BootResult) -> dict[str, Any]:
    return {
        "aggregate": result.baseline.aggregate if result.baseline else None,
        "batch_invariant": result.baseline.batch_invariant if result.baseline else None,
        "baseline": baseline_state(result),
        "warnings": result.warnings,
        "audit_checkpoint": result.audit_checkpoint,
    }


def _witness(client: RegistrySource, options: BootOptions, *, log: Log) -> dict[str, Any] | None:
    """The registry's current audit checkpoint for the boot record (docs/loader.md#boot).

    With ``options.audit_key`` it must verify with that key (else RefusedError: a registry
    that cannot show its signed checkpoint is not booted from); without one it is recorded
    unverified, and a failure to fetch it is only a warning.
    """
    from modelward.registry._client_audit import witness_checkpoint
    from modelward.registry.client import RegistryClientError
    from modelward.registry.errors import RegistryError

    try:
        return witness_checkpoint(client, options.audit_key)
    except (RegistryClientError, RegistryError, ValueError) as exc:
        if options.audit_key:
            raise RefusedError(f"the registry's audit checkpoint is refused: {exc}") from exc
        log(f"warning: no audit checkpoint recorded for this boot: {exc}")
        return None


def baseline_state(result: BootResult) -> str:
    """``recorded``, ``matched``, ``diverged`` (warned) or ``unrecorded``."""
    if result.recorded:
        return "recorded"
    if result.comparison is not None:
        return "matched" if result.comparison.matched else "diverged"
    return "unrecorded"


def _baseline(engine: Any, fingerprint: Fingerprint, pulled: PulledBundle, spec: Any,
              config: ServingConfig, *, options: BootOptions, result: BootResult) -> Baseline:
    clock = time.monotonic()
    baseline = record_baseline(
        engine, resolve_probes(spec.probes), bundle_digest=pulled.digest,
        fingerprint=fingerprint, max_tokens=options.max_tokens, seed=config.seed)
    result.fingerprint = fingerprint
    result.baseline = baseline
    result.timings["baseline"] = time.monotonic() - clock
    return baseline


def _serve(client: Any, pulled: PulledBundle, spec: Any, config: ServingConfig, *,
           options: BootOptions, result: BootResult, log: Log) -> BootResult:
    """Steps 6-8 with ``--serve``: the baseline runs on the server itself before the boot is
    reported ``serving``; any failure or enforced divergence stops the server."""
    clock = time.monotonic()
    served = ServedEngine.start(config, host=options.host, port=options.port,
                                extra_args=options.extra_args)
    try:
        served.wait_ready(options.ready_timeout)
        result.timings["engine_boot"] = time.monotonic() - clock
        fingerprint = collect_fingerprint(config, os.environ, entrypoint="openai-server")
        baseline = _baseline(served, fingerprint, pulled, spec, config, options=options,
                             result=result)
        _compare_and_record(client, pulled, baseline, options=options, result=result,
                            log=log)
    except BaseException:
        served.stop()
        raise
    _report(client, pulled, fingerprint, outcome="serving", detail=_detail(result), log=log)
    log(f"baseline {baseline.aggregate} {baseline_state(result)}; serving "
        f"{pulled.repo}@{pulled.digest} at {served.base_url}")
    try:
        if options.ready_file is not None:
            _write_ready_file(options.ready_file, pulled, result)
        result.exit_code = served.wait()
    except BaseException:
        served.stop()
        raise
    finally:
        if options.ready_file is not None:
            options.ready_file.unlink(missing_ok=True)
    return result


def _write_ready_file(path: Path, pulled: PulledBundle, result: BootResult) -> None:
    """Atomically write the readiness marker (a readiness probe checks that it exists)."""
    import json

    detail = {"repo": pulled.repo, "digest": pulled.digest, **_detail(result)}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(detail, sort_keys=True) + "\n")
        temporary.replace(path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise InputError(f"--ready-file {path}: cannot write it: {exc.strerror}") from exc


def _compare_and_record(client: Any, pulled: PulledBundle, baseline: Baseline, *,
                        options: BootOptions, result: BootResult, log: Log) -> None:
    from modelward.attest.statement import PredicateType

    if not baseline.batch_invariant:
        where = ", ".join(str(d) for d in baseline.batch_divergences)
        result.warnings.append(f"not batch-invariant: {where}")
        log(result.warnings[-1])
    trust = pulled.trust
    if options.worker_key is not None:
        trust = trust.merged(options.worker_key.trust)
    attestations = client.list_attestations(pulled.repo, pulled.digest)
    found, skipped = find_baselines(attestations, trust, pulled.digest)
    for note in skipped:
        log(f"note: {note}")
    same = [b for b in found if b.baseline.fingerprint.id == baseline.fingerprint.id]
    if same:
        # every trusted baseline for this (bundle, fingerprint) must agree with this boot
        comparisons = [compare_baselines(b.baseline, baseline) for b in same]
        comparison = next((c for c in comparisons if not c.matched), comparisons[0])
        result.comparison = comparison
        if not comparison.matched:
            message = (f"{pulled.repo}@{pulled.digest}: {comparison.describe()} "
                       f"(fingerprint {baseline.fingerprint.id})")
            if pulled.policy.baseline == "enforce":
                raise BaselineDivergence(message)
            result.warnings.append("warning: " + message)
            log(result.warnings[-1])
        return
    if options.worker_key is None:
        result.warnings.append("no --worker-key: baseline computed but not recorded")
        log(result.warnings[-1])
        return
    envelope = sign_predicate(options.worker_key, pulled.repo, pulled.digest,
                              PredicateType.BASELINE, baseline.to_predicate())
    client.add_attestation(pulled.repo, pulled.digest, envelope)
    result.recorded = True


def replay_outputs(config: ServingConfig, requests: Sequence[Any], *, runs: int,
                   concurrency: int) -> tuple[list[list[tuple[int, ...]]], Fingerprint]:
    """Boot ``config`` in-process, replay, shut down; return outputs and the fingerprint."""
    from modelward.loader.replay import run_replay

    engine = boot_engine(config)
    try:
        fingerprint = collect_fingerprint(config, os.environ, llm=engine.llm)
        outputs = run_replay(engine, requests, runs=runs, concurrency=concurrency)
    finally:
        engine.shutdown()
    return outputs, fingerprint
