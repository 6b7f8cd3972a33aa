"""What a serving worker does: boot a pulled bundle and replay requests through it.

``boot_bundle`` (docs/loader.md#boot), in order:

1. check extra engine arguments and the CPU KV-cache setting (refused before anything is
   fetched; the CLI checks them before vLLM is even imported);
2. record the registry's signed audit checkpoint (verified when the worker pins the
   registry's checkpoint key: a worker is a witness of the log), then pull and verify
   (loader.pull: digest, attestations, scanner, worker policy);
3. read the bundle's modelward.yaml: the serving configuration is pinned there;
4. check the running vLLM against the pinned engine (policy ``engine_version``);
5. re-hash the files on disk right before the engine opens them;
6. boot: the in-process engine, or with ``--serve`` the OpenAI server as a child; on a CPU
   with the KV-cache size chosen first (``engine.choose_kv_cache``, said on the log);
7. record the baseline on that engine (over HTTP on the server), compare it with a trusted
   baseline for the same (bundle, fingerprint) and, when none exists, attach the new one as
   a signed statement; an enforced divergence stops the engine (the server too). When the
   registry refuses the statement (e.g. the worker key is not registered), the boot still
   counts: the signed baseline is kept in the cache, the log says which key to register and
   how to attach it, and the report says ``baseline_attached: false`` with the reason;
8. report the boot (digest, fingerprint, outcome, the checkpoint seen) to the registry —
   refused boots too;
   with ``--serve``, then wait for the server to exit.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from modelward.attest.errors import AttestError
from modelward.attest.policy import TrustFlags
from modelward.loader.baseline import Baseline, Comparison, compare_baselines, record_baseline
from modelward.loader.cache import Cache
from modelward.loader.engine import boot_engine, check_engine_version, choose_kv_cache
from modelward.loader.errors import BaselineDivergence, InputError, LoaderError, RefusedError
from modelward.loader.fingerprint import Fingerprint, collect_fingerprint
from modelward.loader.hardening import (
    KvCacheChoice,
    ServingConfig,
    check_extra_args,
    cpu_kv_cache,
)
from modelward.loader.probes import resolve_probes
from modelward.loader.pull import PulledBundle, pull_bundle
from modelward.loader.server import ServedEngine
from modelward.loader.source import RegistrySource
from modelward.loader.statements import WorkerKey, find_baselines, sign_predicate

__all__ = [
    "BootOptions",
    "BootResult",
    "ServingLoop",
    "attach_or_keep",
    "baseline_state",
    "boot_bundle",
    "boot_report",
    "check_boot_input",
    "load_bundle_spec",
    "record_load",
]

Log = Callable[[str], None]
# --serve: what runs while the server serves, given the server, the bundle and its config;
# its return is the exit status (``loader.follow.serve_and_follow``)
ServingLoop = Callable[[ServedEngine, PulledBundle, ServingConfig], int]


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
    worker_key_path: Path | None = None  # where worker_key came from (named in hints)
    cpu_kvcache_gib: int | None = None  # --cpu-kvcache-space (None: env var, else default)
    # --serve: what runs while the server serves (its return is the exit status); None:
    # wait for the server to exit. ``boot --follow``/``--report-interval``:
    # ``loader.follow.serve_and_follow`` (docs/loader.md#following-a-rollout)
    serving_loop: ServingLoop | None = None


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
    outcome: str = "ok"  # as reported to the registry: ok, or serving (--serve)
    kv_cache: KvCacheChoice | None = None  # the CPU KV-cache size; None off a CPU
    baseline_attached: bool = False  # this boot's baseline is in the registry
    baseline_attach_error: str | None = None  # why not, when it is not
    baseline_file: Path | None = None  # the signed baseline kept locally when not attached


def load_bundle_spec(directory: Path) -> Any:
    """The bundle's ``modelward.yaml`` (``InputError`` when absent; ``SpecError`` if bad)."""
    from modelward.attest.spec import SPEC_FILENAME, load_spec

    path = directory / SPEC_FILENAME
    if not path.is_file():
        raise InputError(
            f"{directory}: the bundle has no {SPEC_FILENAME}; the serving "
            "configuration must be pinned in the bundle"
        )
    return load_spec(path.read_bytes(), f"{path}")


def _report(
    client: Any,
    pulled: PulledBundle,
    fingerprint: Fingerprint | None,
    *,
    outcome: str,
    detail: Any,
    log: Log,
) -> None:
    from modelward.client.api import RegistryClientError

    fp = fingerprint or collect_fingerprint(ServingConfig(pulled.directory, "unknown"), os.environ)
    try:
        client.report_boot(
            pulled.repo,
            pulled.digest,
            fingerprint_id=fp.id,
            fingerprint=dict(fp.data),
            outcome=outcome,
            detail=detail,
        )
    except RegistryClientError as exc:
        log(f"warning: could not record the boot in the registry: {exc}")


def boot_bundle(
    client: RegistrySource,
    reference: str,
    cache: Cache,
    trust: TrustFlags,
    options: BootOptions,
    *,
    log: Log,
    progress: Callable[[int], None] | None = None,
) -> BootResult:
    """Pull, verify, boot and baseline ``reference`` (see the module doc for the steps).

    Raises ``UnsafeArgument``, ``RefusedError`` subclasses, attest errors
    (``DigestMismatch``: bytes that do not match their digest) and registry client errors;
    a refused boot is reported before raising.
    """
    from modelward.attest.keys import keyid
    from modelward.attest.manifest import verify_tree

    # (1): extra engine arguments and the KV-cache setting.
    extra = check_boot_input(options)
    # (2): the audit checkpoint this boot saw, then pull and verify.
    seen = _witness(client, options, log=log)
    clock = time.monotonic()
    worker_keyid = (  # its identity in a rollout's cohorts (docs/rollouts.md#cohorts)
        keyid(options.worker_key.key.public_key()) if options.worker_key is not None else None
    )
    pulled = pull_bundle(
        client,
        reference,
        cache,
        trust,
        workers=options.workers,
        progress=progress,
        worker_keyid=worker_keyid,
    )
    result = BootResult(pulled=pulled, audit_checkpoint=seen)
    result.timings["pull"] = time.monotonic() - clock
    fingerprint: Fingerprint | None = None
    try:
        # (3): the pinned serving configuration.
        spec = load_bundle_spec(pulled.directory)
        config = ServingConfig.from_spec(pulled.directory, spec)
        # (4): the engine version.
        warning = check_engine_version(
            spec.engine.version, enforce=pulled.policy.engine_version == "enforce"
        )
        if warning:
            result.warnings.append(warning)
            log(warning)
        # (5): re-hash right before the engine opens the files.
        clock = time.monotonic()
        verify_tree(pulled.directory, pulled.manifest)
        result.timings["rehash"] = time.monotonic() - clock
        fingerprint = collect_fingerprint(config, os.environ)
        # (6): boot, on a CPU with the KV-cache size chosen and said first.
        result.kv_cache = choose_kv_cache(options.cpu_kvcache_gib)
        if result.kv_cache is not None:
            log(result.kv_cache.describe())
        if options.serve:
            return _serve(
                client, pulled, spec, config, options=options, result=result, cache=cache, log=log
            )
        clock = time.monotonic()
        engine = boot_engine(config, extra, kv_cache=result.kv_cache)
        result.timings["engine_boot"] = time.monotonic() - clock
        try:
            fingerprint = collect_fingerprint(config, os.environ, llm=engine.llm)
            # (7): baseline.
            baseline = _baseline(
                engine, fingerprint, pulled, spec, config, options=options, result=result
            )
        finally:
            engine.shutdown()
        clock = time.monotonic()
        _compare_and_record(
            client, pulled, baseline, options=options, result=result, cache=cache, log=log
        )
        result.timings["record"] = time.monotonic() - clock
    except (LoaderError, AttestError) as exc:
        _report(
            client,
            pulled,
            result.fingerprint or fingerprint,
            outcome="refused",
            detail={"reason": str(exc), "audit_checkpoint": seen},
            log=log,
        )
        raise
    # (8): the boot record.
    _report(client, pulled, fingerprint, outcome="ok", detail=_detail(result), log=log)
    return result


def check_boot_input(options: BootOptions) -> dict[str, Any]:
    """Step (1): the extra engine arguments (their engine keywords are returned) and the
    CPU KV-cache option or variable. Needs no vLLM and no registry: ``UnsafeArgument``,
    ``InputError``."""
    extra = check_extra_args(options.extra_args, serve=options.serve)
    cpu_kv_cache(os.environ, option=options.cpu_kvcache_gib, available_bytes=None)
    return extra


def _detail(result: BootResult) -> dict[str, Any]:
    return {
        "aggregate": result.baseline.aggregate if result.baseline else None,
        "batch_invariant": result.baseline.batch_invariant if result.baseline else None,
        "baseline": baseline_state(result),
        "baseline_attached": result.baseline_attached,
        "baseline_attach_error": result.baseline_attach_error,
        "warnings": result.warnings,
        "audit_checkpoint": result.audit_checkpoint,
        "kv_cache": result.kv_cache.as_dict() if result.kv_cache else None,
    }


def boot_report(result: BootResult) -> dict[str, Any]:
    """The boot report (``boot --json``; docs/loader.md#json-output): the detail sent to the
    registry, plus where the bundle is, the fingerprint, timings and the exit status."""
    return {
        "repo": result.pulled.repo,
        "digest": result.pulled.digest,
        "directory": str(result.pulled.directory),
        "outcome": result.outcome,
        "fingerprint_id": result.fingerprint.id if result.fingerprint else None,
        **_detail(result),
        "baseline_file": str(result.baseline_file) if result.baseline_file else None,
        "timings": {phase: round(seconds, 6) for phase, seconds in result.timings.items()},
        "exit_code": result.exit_code,
    }


def _witness(client: RegistrySource, options: BootOptions, *, log: Log) -> dict[str, Any] | None:
    """The registry's current audit checkpoint for the boot record (docs/loader.md#boot).

    With ``options.audit_key`` it must verify with that key (else RefusedError: a registry
    that cannot show its signed checkpoint is not booted from); without one it is recorded
    unverified, and a failure to fetch it is only a warning.
    """
    from modelward.attest.errors import AuditVerificationError
    from modelward.client.api import RegistryClientError
    from modelward.client.audit import witness_checkpoint

    try:
        return witness_checkpoint(client, options.audit_key)
    except (RegistryClientError, AuditVerificationError, ValueError) as exc:
        if options.audit_key:
            raise RefusedError(f"the registry's audit checkpoint is refused: {exc}") from exc
        log(f"warning: no audit checkpoint recorded for this boot: {exc}")
        return None


def baseline_state(result: BootResult) -> str:
    """``recorded``, ``matched``, ``diverged`` (warned), ``attach_refused`` (signed, kept
    locally, the registry did not take it) or ``unrecorded`` (no worker key)."""
    if result.recorded:
        return "recorded"
    if result.comparison is not None:
        return "matched" if result.comparison.matched else "diverged"
    if result.baseline_file is not None:
        return "attach_refused"
    return "unrecorded"


def _baseline(
    engine: Any,
    fingerprint: Fingerprint,
    pulled: PulledBundle,
    spec: Any,
    config: ServingConfig,
    *,
    options: BootOptions,
    result: BootResult,
) -> Baseline:
    clock = time.monotonic()
    baseline = record_baseline(
        engine,
        resolve_probes(spec.probes),
        bundle_digest=pulled.digest,
        fingerprint=fingerprint,
        max_tokens=options.max_tokens,
        seed=config.seed,
    )
    result.fingerprint = fingerprint
    result.baseline = baseline
    result.timings["baseline"] = time.monotonic() - clock
    return baseline


def _serve(
    client: Any,
    pulled: PulledBundle,
    spec: Any,
    config: ServingConfig,
    *,
    options: BootOptions,
    result: BootResult,
    cache: Cache,
    log: Log,
) -> BootResult:
    """Steps 6-8 with ``--serve``: the baseline runs on the server itself before the boot is
    reported ``serving``; any failure or enforced divergence stops the server."""
    clock = time.monotonic()
    served = ServedEngine.start(
        config,
        host=options.host,
        port=options.port,
        extra_args=options.extra_args,
        kv_cache=result.kv_cache,
    )
    try:
        served.wait_ready(options.ready_timeout)
        result.timings["engine_boot"] = time.monotonic() - clock
        baseline = _baseline_on_server(
            client,
            served,
            pulled,
            spec,
            config,
            options=options,
            result=result,
            cache=cache,
            log=log,
        )
    except BaseException:
        served.stop()
        raise
    result.outcome = "serving"
    _report(client, pulled, result.fingerprint, outcome="serving", detail=_detail(result), log=log)
    log(
        f"baseline {baseline.aggregate} {baseline_state(result)}; serving "
        f"{pulled.repo}@{pulled.digest} at {served.base_url}"
    )
    try:
        if options.ready_file is not None:
            _write_ready_file(options.ready_file, pulled, result)
        if options.serving_loop is not None:
            result.exit_code = options.serving_loop(served, pulled, config)
        else:
            result.exit_code = served.wait()
    except BaseException:
        served.stop()
        raise
    finally:
        if options.ready_file is not None:
            options.ready_file.unlink(missing_ok=True)
    return result


def _baseline_on_server(
    client: Any,
    served: ServedEngine,
    pulled: PulledBundle,
    spec: Any,
    config: ServingConfig,
    *,
    options: BootOptions,
    result: BootResult,
    cache: Cache,
    log: Log,
) -> Baseline:
    """Step 7 on a ready server: record the baseline over HTTP, compare and attach it."""
    fingerprint = collect_fingerprint(config, os.environ, entrypoint="openai-server")
    baseline = _baseline(served, fingerprint, pulled, spec, config, options=options, result=result)
    _compare_and_record(
        client, pulled, baseline, options=options, result=result, cache=cache, log=log
    )
    return baseline


def record_load(
    client: Any,
    served: ServedEngine,
    pulled: PulledBundle,
    config: ServingConfig,
    *,
    options: BootOptions,
    cache: Cache,
    log: Log,
) -> BootResult:
    """Steps 7 and 8 for a bundle a following worker switched to (``boot --follow``): every
    load records a baseline on the server now serving ``pulled`` (verified by the caller),
    compares it with the trusted ones and reports the boot, ``serving`` or ``refused``. An
    enforced divergence raises ``BaselineDivergence``: the caller stops that server."""
    result = BootResult(pulled=pulled, outcome="serving")
    spec = load_bundle_spec(pulled.directory)
    try:
        baseline = _baseline_on_server(
            client,
            served,
            pulled,
            spec,
            config,
            options=options,
            result=result,
            cache=cache,
            log=log,
        )
    except (LoaderError, AttestError) as exc:
        _report(
            client,
            pulled,
            result.fingerprint,
            outcome="refused",
            detail={"reason": str(exc)},
            log=log,
        )
        raise
    _report(client, pulled, result.fingerprint, outcome="serving", detail=_detail(result), log=log)
    log(f"baseline {baseline.aggregate} {baseline_state(result)} for {pulled.repo}@{pulled.digest}")
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


def _compare_and_record(
    client: Any,
    pulled: PulledBundle,
    baseline: Baseline,
    *,
    options: BootOptions,
    result: BootResult,
    cache: Cache,
    log: Log,
) -> None:
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
            message = (
                f"{pulled.repo}@{pulled.digest}: {comparison.describe()} "
                f"(fingerprint {baseline.fingerprint.id})"
            )
            if pulled.policy.baseline == "enforce":
                raise BaselineDivergence(message)
            result.warnings.append("warning: " + message)
            result.baseline_attach_error = "diverges from the trusted baseline attached before"
            log(result.warnings[-1])
        else:
            result.baseline_attached = True
        return
    if options.worker_key is None:
        result.warnings.append("no --worker-key: baseline computed but not recorded")
        result.baseline_attach_error = "no --worker-key: the baseline was not signed"
        log(result.warnings[-1])
        return
    envelope = sign_predicate(
        options.worker_key,
        pulled.repo,
        pulled.digest,
        PredicateType.BASELINE,
        baseline.to_predicate(),
    )
    name = f"baseline-{baseline.fingerprint.id.removeprefix('sha256:')[:16]}.dsse.json"
    error, kept = attach_or_keep(
        client,
        pulled.repo,
        pulled.digest,
        envelope,
        what="this boot's signed baseline",
        name=name,
        cache=cache,
        key=options.worker_key,
        key_path=options.worker_key_path,
    )
    if error is None:
        result.recorded = result.baseline_attached = True
        return
    result.baseline_attach_error = error
    result.baseline_file = kept
    result.warnings.append(f"warning: the baseline is not attached: {error}")
    log(
        f"warning: {error}\n  the boot counts: the bundle was verified and booted; the "
        f"signed baseline is kept at {kept}\n  {_attach_hint(client, pulled, kept, options)}"
    )


def _attach_hint(client: Any, pulled: PulledBundle, kept: Path | None, options: BootOptions) -> str:
    """What to run to attach a kept statement: register the key, then attach the file."""
    principal = "<this worker's principal>"
    whoami = getattr(client, "whoami", None)
    if callable(whoami):
        from modelward.client.api import RegistryClientError

        with contextlib.suppress(RegistryClientError, KeyError, TypeError):
            principal = str(whoami()["principal"])
    pub = f"{options.worker_key_path}.pub" if options.worker_key_path else "WORKER_KEY.pub"
    return (
        f"to attach it: an admin registers the worker key (modelward key register {pub} "
        f"--principal {principal}), then: modelward attestation add "
        f"{pulled.repo}@{pulled.digest} {kept}"
    )


def attach_or_keep(
    client: Any,
    repo: str,
    digest: str,
    envelope: bytes,
    *,
    what: str,
    name: str,
    cache: Cache,
    key: WorkerKey,
    key_path: Path | None,
) -> tuple[str | None, Path | None]:
    """Attach a worker statement; when the registry refuses it (or cannot be reached), keep
    the signed envelope under ``<cache>/statements/sha256/<hex>/name`` instead.

    Returns ``(None, None)`` when attached, else ``(why, where it is kept)``; ``why`` names
    the worker key and its keyid when the registry did not trust or accept the signature.
    """
    from modelward.client.api import APIError, RegistryClientError

    try:
        client.add_attestation(repo, digest, envelope)
    except RegistryClientError as exc:
        reason = f"the registry refused {what}: {exc}"
        if isinstance(exc, APIError) and exc.code in {
            "attestation_untrusted",
            "attestation_rejected",
        }:
            signer = key.trust.keys[0] if key.trust.keys else None
            label = str(key_path) if key_path else "--worker-key"
            keyid = f" (keyid {signer.keyid[:16]})" if signer is not None else ""
            reason += (
                f"; the worker key {label}{keyid} is not registered to this worker's "
                "principal (or not trusted by the repository): register it with "
                "modelward key register"
            )
        elif not isinstance(exc, APIError):
            reason = f"could not attach {what}: {exc}"
        return reason, _keep(cache, digest, name, envelope)
    return None, None


def _keep(cache: Cache, digest: str, name: str, envelope: bytes) -> Path:
    """Write ``envelope`` atomically under the cache's statements directory."""
    folder = cache.root / "statements" / "sha256" / digest.removeprefix("sha256:")
    path = folder / name
    temporary = folder / f".{name}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(envelope)
        temporary.replace(path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise InputError(f"{path}: cannot keep the signed statement: {exc.strerror}") from exc
    return path
