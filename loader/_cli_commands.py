"""The loader's commands: pull, verify, boot, baseline show, replay (docs/loader.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from modelward.attest.cli._common import console, err_console, fail, show_progress
from modelward.attest.cli._trust_flags import (
    CertificateChainOpt,
    IdentityOpt,
    IssuerOpt,
    PolicyOpt,
    PublicKeyOpt,
    SigstoreTrustRootOpt,
    trust_flags,
)
from modelward.attest.policy import TrustFlags
from modelward.loader.cache import Cache, default_cache_dir
from modelward.registry.client import RegistryClient

__all__ = ["register_commands"]

baseline_app = typer.Typer(name="baseline", help="Determinism baselines recorded at boot.",
                           no_args_is_help=True)

CacheOpt = Annotated[Path | None, typer.Option(
    "--cache-dir", help="Cache root (default $XDG_CACHE_HOME/modelward or ~/.cache/modelward)")]
WorkerKeyOpt = Annotated[Path | None, typer.Option(
    "--worker-key", help="The worker's private key: signs baselines and replay results")]




def _cache(cache_dir: Path | None) -> Cache:
    return Cache(cache_dir or default_cache_dir(os.environ))


def _client() -> RegistryClient:
    from modelward.registry._client_config import resolve_settings

    settings = resolve_settings()
    return RegistryClient(settings.url, settings.token)


@contextmanager
def _progress(label: str) -> Iterator[tuple[Callable[[int], None] | None,
                                            Callable[[int], None] | None]]:
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

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield (lambda n: bar.advance(task, n)), (lambda t: bar.update(task, total=t))


_REPAIR_HINT = ("a cached bundle that no longer matches its manifest is repaired by: "
                "modelward pull --repair REPO@REF [trust flags]")


def _log(message: str) -> None:
    err_console.print(message, markup=False)


def pull(
    reference: Annotated[str, typer.Argument(help="REPO@ALIAS or REPO@sha256:...")],
    *,
    policy: PolicyOpt = None, public_key: PublicKeyOpt = None,
    certificate_chain: CertificateChainOpt = None, identity: IdentityOpt = None,
    issuer: IssuerOpt = None, sigstore_trust_root: SigstoreTrustRootOpt = None,
    cache_dir: CacheOpt = None,
    repair: Annotated[bool, typer.Option(
        "--repair", help="Re-hash the cached blobs first, download again any that do not "
        "match, and rebuild the materialized directory")] = False,
) -> None:
    """Pull, verify locally and materialize a bundle read-only; print digest and directory."""
    from modelward.loader.pull import pull_bundle

    with _client() as client, _progress("pull") as (advance, total):
        flags = trust_flags(policy, public_key=public_key, certificate_chain=certificate_chain,
                            identity=identity, issuer=issuer,
                            sigstore_trust_root=sigstore_trust_root)
        pulled = pull_bundle(client, reference, _cache(cache_dir), flags,
                             progress=advance, on_total=total, repair=repair)
    for digest in pulled.repaired:
        _log(f"repaired: cached blob {digest} did not match its digest; downloaded again")
    for aside in pulled.ignored:
        _log(f"note: {aside.label} ignored: {aside.reason.splitlines()[0]}")
    console.print(pulled.digest)
    console.print(str(pulled.directory))


def verify(
    target: Annotated[str, typer.Argument(help="A materialized bundle DIR, or REPO@REF")],
    cache_dir: CacheOpt = None,
) -> None:
    """Re-hash a materialized bundle against its manifest (catches a flipped byte)."""
    from modelward.attest.errors import DigestMismatch, TreeRuleError
    from modelward.attest.manifest import verify_tree
    from modelward.loader.materialize import read_local_manifest

    path = Path(target)
    if path.is_dir():
        manifest = read_local_manifest(path)
    else:
        from modelward.registry.client import parse_reference

        ref = parse_reference(target)
        with _client() as client:
            digest = client.resolve(ref)
        path = _cache(cache_dir).bundle_dir(digest)
        if not path.is_dir():
            fail(f"{target} ({digest}) is not materialized in {path.parent}",
                 hint=f"run: modelward pull {target} ...")
        manifest = read_local_manifest(path, digest)
    try:
        verify_tree(path, manifest)
    except (DigestMismatch, TreeRuleError) as exc:
        fail(str(exc), hint=_REPAIR_HINT)
    console.print(f"ok {manifest.digest} {path}")


def boot(
    ctx: typer.Context,
    reference: Annotated[str, typer.Argument(help="REPO@ALIAS or REPO@sha256:...")],
    *,
    policy: PolicyOpt = None, public_key: PublicKeyOpt = None,
    certificate_chain: CertificateChainOpt = None, identity: IdentityOpt = None,
    issuer: IssuerOpt = None, sigstore_trust_root: SigstoreTrustRootOpt = None,
    cache_dir: CacheOpt = None, worker_key: WorkerKeyOpt = None,
    serve: Annotated[bool, typer.Option("--serve", help="Run the OpenAI-compatible server")]
    = False,
    host: Annotated[str, typer.Option(help="--serve: listen address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="--serve: port")] = 8000,
    ready_file: Annotated[
        Path | None,
        typer.Option("--ready-file", help="--serve: written once the baseline passed and the "
                     "server is serving; removed when it exits (for readiness probes)"),
    ] = None,
    timings: Annotated[bool, typer.Option("--timings", help="Print per-phase wall times")]
    = False,
    audit_key: Annotated[str | None, typer.Option(
        "--audit-key", metavar="VERIFIER",
        help="The registry's audit checkpoint verifier key (`modelward audit key`): the "
        "checkpoint recorded in the boot record must verify with it")] = None,
) -> None:
    """Pull, verify and boot a bundle with its pinned, hardened vLLM configuration.

    Extra vLLM arguments go after ``--``; any that would weaken the pinning are refused.
    """
    from modelward.attest.errors import DigestMismatch, TreeRuleError
    from modelward.loader.engine import require_vllm
    from modelward.loader.statements import load_worker_key
    from modelward.loader.worker import BootOptions, boot_bundle

    if ready_file is not None and not serve:
        fail("--ready-file needs --serve", code=2)
    if ready_file is not None and not ready_file.parent.is_dir():
        fail(f"--ready-file {ready_file}: {ready_file.parent} is not a directory", code=2)
    require_vllm()
    options = BootOptions(
        serve=serve, host=host, port=port, extra_args=tuple(ctx.args), ready_file=ready_file,
        worker_key=load_worker_key(worker_key) if worker_key else None, audit_key=audit_key,
    )
    with _client() as client, _progress("pull") as (advance, _total):
        try:
            flags = trust_flags(policy, public_key=public_key,
                                certificate_chain=certificate_chain, identity=identity,
                                issuer=issuer, sigstore_trust_root=sigstore_trust_root)
            result = boot_bundle(client, reference, _cache(cache_dir), flags, options,
                                 log=_log, progress=advance)
        except (DigestMismatch, TreeRuleError) as exc:
            fail(str(exc), hint=_REPAIR_HINT)
    console.print(f"digest {result.pulled.digest}")
    console.print(f"directory {result.pulled.directory}")
    if result.fingerprint is not None:
        console.print(f"fingerprint {result.fingerprint.id}")
    if result.baseline is not None:
        state = ("recorded" if result.recorded else
                 "matches" if result.comparison and result.comparison.matched else
                 "diverges (warn)" if result.comparison else "not recorded")
        console.print(f"baseline {result.baseline.aggregate} {state}")
        console.print("batch-invariant" if result.baseline.batch_invariant
                      else "not batch-invariant")
    if timings:
        for phase, seconds in result.timings.items():
            console.print(f"timing {phase} {seconds:.3f}")
    raise typer.Exit(result.exit_code)


@baseline_app.command("show")
def baseline_show(
    reference: Annotated[str, typer.Argument(help="REPO@ALIAS or REPO@sha256:...")],
    *,
    policy: PolicyOpt = None, public_key: PublicKeyOpt = None,
    certificate_chain: CertificateChainOpt = None, identity: IdentityOpt = None,
    issuer: IssuerOpt = None, sigstore_trust_root: SigstoreTrustRootOpt = None,
    worker_key: WorkerKeyOpt = None,
    worker_public_key: Annotated[list[Path] | None, typer.Option(
        "--worker-public-key", help="Trust baselines signed by this worker key (PEM)")] = None,
) -> None:
    """List the trusted baselines of a bundle, one per runtime fingerprint."""
    from modelward.attest.policy import policy_from_flags
    from modelward.attest.trust import TrustSet
    from modelward.loader.statements import find_baselines, load_worker_key
    from modelward.registry.client import parse_reference

    trust = TrustSet()
    flags = trust_flags(policy, public_key=public_key, certificate_chain=certificate_chain,
                identity=identity, issuer=issuer, sigstore_trust_root=sigstore_trust_root)
    if flags.given():
        trust = policy_from_flags(flags)[1]
    if worker_key:
        trust = trust.merged(load_worker_key(worker_key).trust)
    if worker_public_key:
        trust = trust.merged(policy_from_flags(TrustFlags(public_keys=tuple(worker_public_key)))[1])
    if trust.is_empty():
        fail("no trust given: pass --worker-public-key, --worker-key or trust flags", code=2)
    ref = parse_reference(reference)
    with _client() as client:
        digest = client.resolve(ref)
        found, skipped = find_baselines(client.list_attestations(ref.repo, digest), trust,
                                        digest)
    for note in skipped:
        _log(f"note: {note}")
    console.print(f"bundle {digest}: {len(found)} baseline(s)")
    for item in found:
        b = item.baseline
        fp = b.fingerprint.data
        device = fp.get("device", {})
        console.print(
            f"{b.fingerprint.id} aggregate={b.aggregate} probes={len(b.probes)} "
            f"batch_invariant={str(b.batch_invariant).lower()} "
            f"engine={fp.get('engine', {}).get('version')} dtype={fp.get('dtype')} "
            f"device={device.get('type')}:{device.get('name')} signed_by={','.join(item.signers)}"
        )


def register_commands(app: typer.Typer) -> None:
    """Add the loader's commands to the root app."""
    from modelward.loader._cli_replay import replay

    app.command("pull")(pull)
    app.command("verify")(verify)
    app.command("boot", context_settings={"allow_extra_args": True,
                                          "ignore_unknown_options": True})(boot)
    app.command("replay")(replay)
    app.add_typer(baseline_app)
