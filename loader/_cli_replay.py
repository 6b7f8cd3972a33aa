"""``modelward replay``: deterministic replay through one bundle (and another, or expected
outputs); the result is a signed statement attached to the bundle (docs/loader.md#replay)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.attest.cli._common import console, err_console
from modelward.attest.cli._trust_flags import (
    CertificateChainOpt,
    IdentityOpt,
    IssuerOpt,
    PolicyOpt,
    PublicKeyOpt,
    SigstoreTrustRootOpt,
    trust_flags,
)
from modelward.loader.errors import InputError

__all__ = ["replay"]


def _pulled_config(client: Any, reference: str, cache: Any, trust: Any) -> tuple[Any, Any, Any]:
    from modelward.attest.manifest import verify_tree
    from modelward.loader.engine import check_engine_version
    from modelward.loader.hardening import ServingConfig
    from modelward.loader.pull import pull_bundle
    from modelward.loader.worker import load_bundle_spec

    pulled = pull_bundle(client, reference, cache, trust)
    spec = load_bundle_spec(pulled.directory)
    warning = check_engine_version(spec.engine.version,
                                   enforce=pulled.policy.engine_version == "enforce")
    if warning:
        err_console.print(warning, markup=False)
    verify_tree(pulled.directory, pulled.manifest)
    return pulled, spec, ServingConfig.from_spec(pulled.directory, spec)


def replay(
    requests_file: Annotated[Path, typer.Argument(help="Captured requests, JSONL")],
    *,
    bundle: Annotated[str, typer.Option("--bundle", help="REPO@REF to replay through")],
    against: Annotated[str | None, typer.Option(
        "--against", help="Compare with this bundle's outputs (REPO@REF)")] = None,
    expected: Annotated[Path | None, typer.Option(
        "--expected", help="Compare with these outputs (JSONL, as --capture writes)")] = None,
    runs: Annotated[int, typer.Option(min=1, help="Replays of the whole file")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests per engine batch")] = 1,
    capture: Annotated[Path | None, typer.Option(
        "--capture", help="Write the first run's outputs here (JSONL)")] = None,
    policy: PolicyOpt = None,
    public_key: PublicKeyOpt = None,
    certificate_chain: CertificateChainOpt = None,
    identity: IdentityOpt = None,
    issuer: IssuerOpt = None,
    sigstore_trust_root: SigstoreTrustRootOpt = None,
    cache_dir: Annotated[Path | None, typer.Option(
        "--cache-dir", help="Cache root (default $XDG_CACHE_HOME/modelward)")] = None,
    worker_key: Annotated[Path | None, typer.Option(
        "--worker-key", help="Sign the result and attach it to the bundle")] = None,
) -> None:
    """Replay requests N times: consecutive matches, divergences, unique completions.

    Exit 1 when any execution diverges from the reference.
    """
    from modelward.attest.statement import PredicateType
    from modelward.loader._cli_commands import _cache, _client
    from modelward.loader.engine import require_vllm
    from modelward.loader.replay import load_expected, load_requests, summarize, write_capture
    from modelward.loader.statements import load_worker_key, sign_predicate
    from modelward.loader.worker import replay_outputs

    if against is not None and expected is not None:
        raise InputError("give at most one of --against and --expected")
    require_vllm()
    requests = load_requests(requests_file)
    reference = load_expected(expected) if expected is not None else None
    key = load_worker_key(worker_key) if worker_key else None
    trust = trust_flags(policy, public_key=public_key, certificate_chain=certificate_chain,
                identity=identity, issuer=issuer, sigstore_trust_root=sigstore_trust_root)
    cache = _cache(cache_dir)
    with _client() as client:
        pulled, _spec, config = _pulled_config(client, bundle, cache, trust)
        other = _pulled_config(client, against, cache, trust) if against else None
        outputs, fingerprint = replay_outputs(config, requests, runs=runs,
                                              concurrency=concurrency)
        if capture is not None:
            write_capture(capture, requests, outputs[0])
        name = str(expected) if expected else ""
        if other is not None:
            theirs, _ = replay_outputs(other[2], requests, runs=1, concurrency=concurrency)
            reference = {r.id: ids for r, ids in zip(requests, theirs[0], strict=True)}
            name = f"{other[0].repo}@{other[0].digest}"
        report = summarize(requests, outputs, reference, reference_name=name)
        predicate: dict[str, Any] = {
            "version": 1, "bundle_digest": pulled.digest,
            "against": other[0].digest if other is not None else None,
            "requests_sha256": "sha256:" + hashlib.sha256(requests_file.read_bytes()).hexdigest(),
            "concurrency": concurrency, "fingerprint_id": fingerprint.id,
            "fingerprint": dict(fingerprint.data), **report.to_predicate(),
        }
        if key is not None:
            envelope = sign_predicate(key, pulled.repo, pulled.digest, PredicateType.REPLAY,
                                      predicate)
            client.add_attestation(pulled.repo, pulled.digest, envelope)
    console.print(f"bundle {pulled.digest}")
    console.print(f"reference {report.reference}")
    console.print(f"runs {report.runs} requests {report.requests} executions {report.executions}")
    console.print(f"consecutive_matches {report.consecutive_matches}")
    console.print(f"divergences {report.divergence_count}")
    for div in report.divergences[:20]:
        console.print(f"  run {div.run} request {div.request_id} first differing token "
                      f"index {div.index}")
    uniques = sorted(report.unique_completions.items(), key=lambda kv: (-kv[1], kv[0]))
    console.print(f"max_unique_completions {max(report.unique_completions.values())}")
    for rid, count in uniques[:10]:
        if count > 1:
            console.print(f"  {rid}: {count} unique completions")
    if key is None:
        err_console.print("no --worker-key: result not signed or attached", markup=False)
    raise typer.Exit(1 if report.divergence_count else 0)
