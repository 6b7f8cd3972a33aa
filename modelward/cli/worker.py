"""The loader's commands: pull, verify, boot, baseline show (``replay``: modelward.cli.replay), and
``trust pin`` (the worker's pinned TUF root), as ``modelward.cli``'s command table names them
(docs/loader.md).

A malformed reference (the grammar of ``modelward.client.parse_reference``) and a root file that
is not TUF root metadata are usage errors (exit 2) in every one of them, named.

With ``--json`` each prints one JSON document on stdout (shapes in
docs/loader.md#json-output) and every message, warning and progress bar on stderr; ``boot``
and ``replay`` also point file descriptor 1 at stderr while vLLM runs, so its logs (and
those of its worker processes and of the ``--serve`` child) never reach stdout.

``boot`` and ``replay`` check their input (extra engine arguments, the CPU KV-cache setting,
request files, the worker key) before vLLM or torch is imported: a mistake is refused in a
fraction of a second.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import console, err_console, fail, show_progress
from modelward.cli.trust_options import CacheOpt, TrustOptions, with_trust_options

if TYPE_CHECKING:
    from modelward.client.api import RegistryClient
    from modelward.loader.cache import Cache
    from modelward.loader.pull import PulledBundle

__all__ = ["baseline_app", "boot", "pull", "trust_pin", "usage_errors", "valid_reference", "verify"]

baseline_app = typer.Typer(
    name="baseline", help="Determinism baselines recorded at boot.", no_args_is_help=True
)


def valid_reference(value: str | None) -> str | None:
    """Click callback: a reference as ``parse_reference`` reads it, else a usage error (exit
    2) naming the argument and the forms expected."""
    if value is not None:
        from modelward.client.api import InvalidReference, parse_reference

        try:
            parse_reference(value)
        except InvalidReference as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


@contextmanager
def usage_errors() -> Iterator[None]:
    """A root file that is not TUF root metadata (from --trust-root or the worker policy's
    tuf.root) or a malformed reference found while the command runs: exit 2, named."""
    from modelward.client.api import InvalidReference
    from modelward.loader.tuf_resolve import TrustRootInvalid

    try:
        yield
    except (TrustRootInvalid, InvalidReference) as exc:
        fail(str(exc), code=2)


RefArg = Annotated[
    str,
    typer.Argument(
        metavar="REPO@REF",
        help="REPO@ALIAS, REPO:TAG or REPO@sha256:...",
        callback=valid_reference,
    ),
]
WorkerKeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--worker-key",
        metavar="KEY",
        help="The worker's private key: signs baselines and replay results (register its .pub "
        "with `modelward key register` so the registry accepts them)",
    ),
]
KvCacheOpt = Annotated[
    int | None,
    typer.Option(
        "--cpu-kvcache-space",
        metavar="GIB",
        min=1,
        help="On a CPU: the KV cache in GiB (default: VLLM_CPU_KVCACHE_SPACE, else min(4, 25% "
        "of available memory))",
    ),
]


def _cache(cache_dir: Path | None) -> Cache:
    from modelward.loader.cache import Cache, default_cache_dir

    return Cache(cache_dir or default_cache_dir(os.environ))


def _client() -> RegistryClient:
    from modelward.client.api import RegistryClient
    from modelward.client.config import resolve_settings

    settings = resolve_settings()
    return RegistryClient(settings.url, settings.token)


@contextmanager
def _progress(
    label: str,
) -> Iterator[tuple[Callable[[int], None] | None, Callable[[int], None] | None]]:
    """(advance, set_total) callbacks drawing a progress bar on a terminal, else Nones."""
    if not show_progress():
        yield None, None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TransferSpeedColumn,
    )

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)
        yield (lambda n: bar.advance(task, n)), (lambda t: bar.update(task, total=t))


@contextmanager
def stdout_reserved(enabled: bool) -> Iterator[None]:
    """With ``--json``: while the block runs, file descriptor 1 is stderr, for this process
    and every process it starts (vLLM logs to stdout); stdout is restored afterwards for the
    one JSON document."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def emit_json(document: Any) -> None:
    """The one JSON document of a ``--json`` command, on stdout."""
    typer.echo(json.dumps(document, indent=2, sort_keys=True))


_REPAIR_HINT = (
    "a cached bundle that no longer matches its manifest is repaired by: "
    "modelward pull --repair REPO@REF [trust flags]"
)


def _log(message: str) -> None:
    err_console.print(message, markup=False)


def pull_report(reference: str, pulled: PulledBundle) -> dict[str, Any]:
    """``pull --json`` (docs/loader.md#json-output)."""
    return {
        "reference": reference,
        "repo": pulled.repo,
        "digest": pulled.digest,
        "directory": str(pulled.directory),
        "decision": pulled.decision.as_dict(),
        "statements": [
            {
                "kind": str(s.kind),
                "predicate_type": s.predicate_type,
                "signers": [signer.name for signer in s.signers],
            }
            for s in pulled.statements
        ],
        "ignored": [
            {"label": a.label, "sha256": a.sha256, "reason": a.reason} for a in pulled.ignored
        ],
        "repaired": list(pulled.repaired),
    }


@with_trust_options("signers", "aliases", "cache")
def pull(
    reference: RefArg,
    *,
    trust: TrustOptions,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Re-hash the cached blobs first, download again any that do not "
            "match, and rebuild the materialized directory",
        ),
    ] = False,
) -> None:
    """Pull, verify locally and materialize a bundle read-only; print digest and directory.

    The trust flags are the worker's policy: without one the pull is refused (exit 1).
    """
    from modelward.loader.pull import pull_bundle

    with usage_errors(), _client() as client, _progress("pull") as (advance, total):
        pulled = pull_bundle(
            client,
            reference,
            _cache(trust.cache_dir),
            trust.flags,
            progress=advance,
            on_total=total,
            repair=repair,
        )
    for digest in pulled.repaired:
        _log(f"repaired: cached blob {digest} did not match its digest; downloaded again")
    for aside in pulled.ignored:
        _log(f"note: {aside.label} ignored: {aside.reason.splitlines()[0]}")
    if trust.json_output:
        emit_json(pull_report(reference, pulled))
        return
    console.print(pulled.digest)
    console.print(str(pulled.directory))


@with_trust_options("cache", "aliases")
def verify(
    target: Annotated[
        str, typer.Argument(metavar="DIR|REPO@REF", help="A materialized bundle DIR, or REPO@REF")
    ],
    *,
    trust: TrustOptions,
) -> None:
    """Re-hash a materialized bundle against its manifest (catches a flipped byte).

    Exit 0 when every file matches, 1 when one does not (named, with the repair hint).
    """
    from modelward.attest.errors import DigestMismatch, TreeRuleError
    from modelward.attest.manifest import verify_tree
    from modelward.loader.materialize import read_local_manifest

    path = Path(target)
    if path.is_dir():
        manifest = read_local_manifest(path)
    else:
        from modelward.client.api import InvalidReference, parse_reference
        from modelward.loader.tuf_resolve import resolve_reference

        try:
            ref = parse_reference(target)
        except InvalidReference as exc:
            fail(f"{target}: not a directory, and {exc}", code=2)
        with usage_errors(), _client() as client:
            digest = resolve_reference(
                client,
                ref,
                _cache(trust.cache_dir).root,
                trust.alias_trust(),
            )
        path = _cache(trust.cache_dir).bundle_dir(digest)
        if not path.is_dir():
            fail(
                f"{target} ({digest}) is not materialized in {path.parent}",
                hint=f"run: modelward pull {target} ...",
            )
        manifest = read_local_manifest(path, digest)
    error: str | None = None
    try:
        verify_tree(path, manifest)
    except (DigestMismatch, TreeRuleError) as exc:
        error = str(exc)
    if trust.json_output:
        emit_json(
            {
                "target": target,
                "digest": manifest.digest,
                "directory": str(path),
                "files": len(manifest.layers),
                "verified": error is None,
                "error": error,
            }
        )
    if error is not None:
        fail(error, hint=_REPAIR_HINT)
    if not trust.json_output:
        console.print(f"ok {manifest.digest} {path}")


def _allowed_hint(serve: bool) -> str:
    from modelward.loader.hardening import allowed_extra_args

    allowed = allowed_extra_args(serve=serve)
    text = "allowed extra engine arguments: " + " ".join(allowed)
    if not serve:
        more = [a for a in allowed_extra_args(serve=True) if a not in allowed]
        text += "; with --serve also: " + " ".join(more)
    return text + " (docs/loader.md#hardening)"


def _check_boot_input(extra_args: tuple[str, ...], *, serve: bool, kvcache: int | None) -> None:
    """Refuse bad engine arguments and KV-cache settings before vLLM is imported."""
    from modelward.loader.errors import InputError, UnsafeArgument
    from modelward.loader.hardening import check_extra_args, cpu_kv_cache

    try:
        check_extra_args(extra_args, serve=serve)
    except UnsafeArgument as exc:
        fail(str(exc), hint=_allowed_hint(serve))
    try:
        cpu_kv_cache(os.environ, option=kvcache, available_bytes=None)
    except InputError as exc:
        fail(str(exc), code=2)


def _print_boot(result: Any, timings: bool) -> None:
    from modelward.loader.worker import baseline_state

    console.print(f"digest {result.pulled.digest}")
    console.print(f"directory {result.pulled.directory}")
    if result.fingerprint is not None:
        console.print(f"fingerprint {result.fingerprint.id}")
    if result.baseline is not None:
        state = {
            "recorded": "recorded",
            "matched": "matches",
            "diverged": "diverges (warn)",
            "attach_refused": "not attached (kept locally)",
        }.get(baseline_state(result), "not recorded")
        console.print(f"baseline {result.baseline.aggregate} {state}")
        console.print(
            "batch-invariant" if result.baseline.batch_invariant else "not batch-invariant"
        )
    if result.kv_cache is not None:
        console.print(f"cpu_kvcache {result.kv_cache.gib} GiB ({result.kv_cache.source})")
    if timings:
        for phase, seconds in result.timings.items():
            console.print(f"timing {phase} {seconds:.3f}")


@with_trust_options("signers", "aliases", "cache")
def boot(
    ctx: typer.Context,
    reference: RefArg,
    *,
    trust: TrustOptions,
    worker_key: WorkerKeyOpt = None,
    serve: Annotated[
        bool, typer.Option("--serve", help="Run the OpenAI-compatible server")
    ] = False,
    host: Annotated[
        str, typer.Option(metavar="ADDR", help="--serve: listen address")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", help="--serve: port")] = 8000,
    ready_file: Annotated[
        Path | None,
        typer.Option(
            "--ready-file",
            metavar="PATH",
            help="--serve: written once the baseline passed and the "
            "server is serving; removed when it exits (for readiness probes)",
        ),
    ] = None,
    timings: Annotated[bool, typer.Option("--timings", help="Print per-phase wall times")] = False,
    audit_key: Annotated[
        str | None,
        typer.Option(
            "--audit-key",
            metavar="VERIFIER",
            help="The registry's audit checkpoint verifier key (`modelward audit key`): the "
            "checkpoint recorded in the boot record must verify with it",
        ),
    ] = None,
    cpu_kvcache_space: KvCacheOpt = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="--serve: follow the alias's assignment for this --worker-key (rollout "
            "cohorts), switching bundles safely (docs/loader.md#following-a-rollout)",
        ),
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            metavar="SECONDS",
            min=0.1,
            max=3600,
            help="--follow: seconds between assignment checks (default 10)",
        ),
    ] = None,
    report_interval: Annotated[
        float | None,
        typer.Option(
            "--report-interval",
            metavar="SECONDS",
            min=0.1,
            max=3600,
            help="--serve: send a signed fleet report of the engine's metrics every SECONDS",
        ),
    ] = None,
    drain_seconds: Annotated[
        float | None,
        typer.Option(
            "--drain-seconds",
            metavar="SECONDS",
            min=0,
            max=86400,
            help="--follow: on a switch, seconds the old server may finish requests in "
            "flight before they are cancelled (default 30)",
        ),
    ] = None,
) -> None:
    """Pull, verify and boot a bundle with its pinned, hardened vLLM configuration.

    Extra vLLM arguments go after --; any not on the allowlist, or that would weaken the
    pinning, are refused before vLLM is loaded (docs/loader.md#hardening). The trust flags
    are the worker's policy. With --serve and --worker-key: --report-interval sends signed
    fleet reports of the server's metrics, and --follow switches the served bundle as the
    alias's rollout assigns this worker (docs/loader.md#following-a-rollout). Exit 0 when the
    boot counts (also when the registry refused the
    signed baseline: it is then kept locally and the report says baseline_attached false),
    1 refused or failed, 2 usage; with --serve, the server's exit status.
    """
    if ready_file is not None and not serve:
        fail("--ready-file needs --serve", code=2)
    if ready_file is not None and not ready_file.parent.is_dir():
        fail(f"--ready-file {ready_file}: {ready_file.parent} is not a directory", code=2)
    _check_follow_flags(
        reference,
        serve=serve,
        worker_key=worker_key,
        follow=follow,
        poll=poll,
        report_interval=report_interval,
        drain_seconds=drain_seconds,
        unsigned_aliases=trust.flags.unsigned_aliases,
    )
    extra_args = tuple(ctx.args)
    if follow and not any(a.split("=")[0] == "--shutdown-timeout" for a in extra_args):
        # vLLM drains on SIGTERM only this long (docs/loader.md#following-a-rollout)
        drain = 30 if drain_seconds is None else math.ceil(drain_seconds)
        extra_args = (*extra_args, "--shutdown-timeout", str(drain))
    _check_boot_input(extra_args, serve=serve, kvcache=cpu_kvcache_space)

    from modelward.attest.errors import DigestMismatch, TreeRuleError
    from modelward.attest.policy import policy_from_flags
    from modelward.loader.engine import require_vllm
    from modelward.loader.follow import FollowOptions, serve_and_follow
    from modelward.loader.statements import load_worker_key
    from modelward.loader.worker import BootOptions, boot_bundle, boot_report

    key = load_worker_key(worker_key) if worker_key else None
    flags = trust.flags
    policy_from_flags(flags)  # unreadable or missing trust: refused before vLLM loads
    options = BootOptions(
        serve=serve,
        host=host,
        port=port,
        extra_args=extra_args,
        ready_file=ready_file,
        worker_key=key,
        worker_key_path=worker_key,
        audit_key=audit_key,
        cpu_kvcache_gib=cpu_kvcache_space,
    )
    with stdout_reserved(trust.json_output):
        require_vllm()
        with usage_errors(), _client() as client, _progress("pull") as (advance, _total):
            if key is not None and (follow or report_interval is not None):
                serving_loop = serve_and_follow(
                    client,
                    reference,
                    cache=_cache(trust.cache_dir),
                    flags=flags,
                    worker_key=key,
                    boot=options,
                    options=FollowOptions(
                        follow=follow,
                        poll_seconds=FollowOptions.poll_seconds if poll is None else poll,
                        report_interval=report_interval,
                        drain_seconds=FollowOptions.drain_seconds
                        if drain_seconds is None
                        else drain_seconds,
                        ready_file=ready_file,
                    ),
                    log=_log,
                )
                options = dataclasses.replace(options, serving_loop=serving_loop)
            try:
                result = boot_bundle(
                    client,
                    reference,
                    _cache(trust.cache_dir),
                    flags,
                    options,
                    log=_log,
                    progress=advance,
                )
            except (DigestMismatch, TreeRuleError) as exc:
                fail(str(exc), hint=_REPAIR_HINT)
    if trust.json_output:
        emit_json(boot_report(result))
    else:
        _print_boot(result, timings)
    raise typer.Exit(result.exit_code)


def _check_follow_flags(
    reference: str,
    *,
    serve: bool,
    worker_key: Path | None,
    follow: bool,
    poll: float | None,
    report_interval: float | None,
    drain_seconds: float | None,
    unsigned_aliases: bool,
) -> None:
    """Refuse a misused --follow, --poll, --report-interval or --drain-seconds (exit 2)."""
    from modelward.client.api import parse_reference
    from modelward.loader.follow import follow_flags_problem

    problem = follow_flags_problem(
        serve=serve,
        worker_key=worker_key is not None,
        follow=follow,
        given=[
            ("--follow", follow),
            ("--poll", poll is not None),
            ("--report-interval", report_interval is not None),
            ("--drain-seconds", drain_seconds is not None),
        ],
        reference_is_alias=parse_reference(reference).alias is not None,
        unsigned_aliases=unsigned_aliases,
    )
    if problem is not None:
        fail(problem, code=2)


def baseline_entry(item: Any) -> dict[str, Any]:
    """One trusted baseline in ``baseline show --json``."""
    b = item.baseline
    fp = dict(b.fingerprint.data)
    device = fp.get("device") or {}
    return {
        "fingerprint_id": b.fingerprint.id,
        "aggregate": b.aggregate,
        "probes": len(b.probes),
        "batch_invariant": b.batch_invariant,
        "batch_divergences": [{"probe": d.probe_id, "index": d.index} for d in b.batch_divergences],
        "engine": (fp.get("engine") or {}).get("version"),
        "dtype": fp.get("dtype"),
        "device": {"type": device.get("type"), "name": device.get("name")},
        "entrypoint": fp.get("entrypoint"),
        "fingerprint": fp,
        "signed_by": list(item.signers),
    }


@baseline_app.command("show")
@with_trust_options("signers", "aliases")
def baseline_show(
    reference: RefArg,
    *,
    trust: TrustOptions,
    worker_key: WorkerKeyOpt = None,
    worker_public_key: Annotated[
        list[Path] | None,
        typer.Option(
            "--worker-public-key",
            metavar="PEM",
            help="Trust baselines signed by this worker key (PEM; repeatable)",
        ),
    ] = None,
) -> None:
    """List the trusted baselines of a bundle, one per runtime fingerprint.

    Only baselines signed by a key given here count: --worker-public-key, --worker-key (its
    public half) or the trust flags; without any, exit 2.
    """
    from modelward.attest.policy import TrustFlags, policy_from_flags
    from modelward.attest.trust import TrustSet
    from modelward.client.api import parse_reference
    from modelward.loader.statements import find_baselines, load_worker_key
    from modelward.loader.tuf_resolve import resolve_reference

    trusted = TrustSet()
    flags = trust.flags
    if flags.given():
        trusted = policy_from_flags(flags)[1]
    if worker_key:
        trusted = trusted.merged(load_worker_key(worker_key).trust)
    if worker_public_key:
        given = TrustFlags(public_keys=tuple(worker_public_key))
        trusted = trusted.merged(policy_from_flags(given)[1])
    if trusted.is_empty():
        fail("no trust given: pass --worker-public-key, --worker-key or trust flags", code=2)
    ref = parse_reference(reference)
    with usage_errors(), _client() as client:
        digest = resolve_reference(
            client,
            ref,
            _cache(None).root,
            trust.alias_trust(),
        )
        found, skipped = find_baselines(client.list_attestations(ref.repo, digest), trusted, digest)
    for note in skipped:
        _log(f"note: {note}")
    if trust.json_output:
        emit_json(
            {
                "reference": reference,
                "repo": ref.repo,
                "digest": digest,
                "baselines": [baseline_entry(item) for item in found],
                "skipped": list(skipped),
            }
        )
        return
    console.print(f"bundle {digest}: {len(found)} baseline(s)")
    for item in found:
        entry = baseline_entry(item)
        device = entry["device"]
        console.print(
            f"{entry['fingerprint_id']} aggregate={entry['aggregate']} "
            f"probes={entry['probes']} batch_invariant={str(entry['batch_invariant']).lower()} "
            f"engine={entry['engine']} dtype={entry['dtype']} "
            f"device={device['type']}:{device['name']} signed_by={','.join(item.signers)}"
        )


def trust_pin(
    trust_root: Annotated[
        Path,
        typer.Option(
            "--trust-root",
            metavar="FILE",
            help="The registry's TUF root.json to pin (checked out of band: `modelward trust "
            "root --out FILE` on a machine you trust)",
        ),
    ],
    *,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="Replace a root pinned earlier that is not this one nor one it rotated to",
        ),
    ] = False,
    cache_dir: CacheOpt = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON document on stdout (docs/cli.md#trust-commands); "
            "messages go to stderr",
        ),
    ] = False,
) -> None:
    """Pin the registry's TUF root in this worker's cache (pull, boot, verify, replay and
    baseline show resolve aliases from it).

    The registry is the one `modelward login` (or MODELWARD_URL) names. The root must verify
    the registry's current metadata before it is kept; a cache that pinned another root is
    refused (exit 1) unless --replace. Exit 2: the file is not a TUF root.
    """
    from modelward.loader.tuf_resolve import load_root, pin_root

    with usage_errors():
        given = load_root(trust_root)
    cache = _cache(cache_dir)
    with _client() as client:
        result = pin_root(client, cache.root, given, replace=replace)
        url = client.base_url
    if json_output:
        emit_json(
            {
                "registry": url,
                "trust_root": str(trust_root),
                "sha256": given.sha256,
                "pinned_version": result.pinned_version,
                "trusted_version": result.trusted_version,
                "directory": str(result.directory),
                "replaced": result.replaced,
                "unchanged": result.unchanged,
            }
        )
        return
    verb = (
        "already pinned"
        if result.unchanged
        else "replaced the pin with"
        if result.replaced
        else "pinned"
    )
    console.print(
        f"{verb} {trust_root} (root v{result.pinned_version}, sha256 {given.sha256}) for "
        f"{url}; the cache trusts root v{result.trusted_version} in {result.directory}",
        markup=False,
    )
