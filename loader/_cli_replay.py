"""``modelward replay``: deterministic replay through one bundle (and another, or expected
outputs); the result is a signed statement attached to the bundle (docs/loader.md#replay).

Everything the command is given is checked before vLLM is imported: the requests file, the
expected outputs, the worker key and the CPU KV-cache setting.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.attest.cli._common import console, err_console, fail
from modelward.attest.cli._trust_flags import (
    CertificateChainOpt,
    IdentityOpt,
    IssuerOpt,
    OnlineAliasOpt,
    PolicyOpt,
    PublicKeyOpt,
    SigstoreTrustRootOpt,
    TrustRootOpt,
    UnsignedAliasesOpt,
    trust_flags,
)
from modelward.loader._cli_commands import (
    CacheOpt,
    JsonOpt,
    KvCacheOpt,
    emit_json,
    stdout_reserved,
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
    warning = check_engine_version(spec.engine.version,
                                   enforce=pulled.policy.engine_version == "enforce")
    if warning:
        err_console.print(warning, markup=False)
    verify_tree(pulled.directory, pulled.manifest)
    return pulled, spec, ServingConfig.from_spec(pulled.directory, spec)


def _print_report(digest: str, report: Any) -> None:
    console.print(f"bundle {digest}")
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


def _checked_input(requests_file: Path, expected: Path | None, *, against: str | None,
                   kvcache: int | None) -> tuple[list[Any], dict[str, tuple[int, ...]] | None]:
    """The requests and the expected outputs, parsed; exit 2 naming the file and line (or
    the flag) at fault. Imports no vLLM."""
    from modelward.loader.errors import InputError
    from modelward.loader.hardening import cpu_kv_cache
    from modelward.loader.replay import load_expected, load_requests

    if against is not None and expected is not None:
        fail("give at most one of --against and --expected", code=2)
    try:
        requests = load_requests(requests_file)
        reference = load_expected(expected) if expected is not None else None
        cpu_kv_cache(os.environ, option=kvcache, available_bytes=None)
    except InputError as exc:
        fail(str(exc), code=2)
    return requests, reference


def replay(
    requests_file: Annotated[Path, typer.Argument(
        metavar="REQUESTS.jsonl", help="Captured requests, JSONL (docs/loader.md#replay)")],
    *,
    bundle: Annotated[str, typer.Option("--bundle", metavar="REPO@REF",
                                        help="The bundle to replay through")],
    against: Annotated[str | None, typer.Option(
        "--against", metavar="REPO@REF",
        help="Compare with this bundle's outputs (verified under the same trust flags)")
    ] = None,
    expected: Annotated[Path | None, typer.Option(
        "--expected", metavar="OUT.jsonl",
        help="Compare with these outputs (JSONL, as --capture writes)")] = None,
    runs: Annotated[int, typer.Option(min=1, metavar="N", help="Replays of the whole file")]
    = 1,
    concurrency: Annotated[int, typer.Option(min=1, metavar="C",
                                             help="Requests per engine batch")] = 1,
    capture: Annotated[Path | None, typer.Option(
        "--capture", metavar="OUT.jsonl", help="Write the first run's outputs here (JSONL)")
    ] = None,
    policy: PolicyOpt = None,
    public_key: PublicKeyOpt = None,
    certificate_chain: CertificateChainOpt = None,
    identity: IdentityOpt = None,
    issuer: IssuerOpt = None,
    sigstore_trust_root: SigstoreTrustRootOpt = None,
    trust_root: TrustRootOpt = None,
    online_alias: OnlineAliasOpt = None,
    unsigned_aliases: UnsignedAliasesOpt = False,
    cache_dir: CacheOpt = None,
    worker_key: Annotated[Path | None, typer.Option(
        "--worker-key", metavar="KEY",
        help="Sign the result and attach it to the bundle (the key must be registered: "
        "`modelward key register KEY.pub`)")] = None,
    cpu_kvcache_space: KvCacheOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Replay requests N times: consecutive matches, divergences, unique completions.

    Trust flags (--policy, --public-key, --certificate-chain, --identity/--issuer,
    --sigstore-trust-root) are the worker's policy, as for pull and boot: both --bundle and
    --against are pulled and verified under it before anything runs, and without one the
    replay is refused (docs/policy.md#trust-flags).

    Exit 0 when every execution matches the reference (also when the registry refused the
    signed result: it is then kept locally and named), 1 when any diverges or on a refusal,
    2 usage (a malformed requests or outputs file is named with its line).
    """
    requests, reference = _checked_input(requests_file, expected, against=against,
                                         kvcache=cpu_kvcache_space)

    from modelward.attest.policy import policy_from_flags
    from modelward.attest.statement import PredicateType
    from modelward.loader._cli_commands import _cache, _client, _log
    from modelward.loader.engine import choose_kv_cache, require_vllm
    from modelward.loader.replay import summarize, write_capture
    from modelward.loader.statements import load_worker_key, sign_predicate
    from modelward.loader.worker import attach_or_keep, replay_outputs

    key = load_worker_key(worker_key) if worker_key else None
    trust = trust_flags(policy, public_key=public_key, certificate_chain=certificate_chain,
                        identity=identity, issuer=issuer, sigstore_trust_root=sigstore_trust_root,
                        trust_root=trust_root, online_alias=online_alias,
                        unsigned_aliases=unsigned_aliases)
    policy_from_flags(trust)  # unreadable or missing trust: refused before vLLM loads
    cache = _cache(cache_dir)
    attach_error: str | None = None
    kept: Path | None = None
    with stdout_reserved(json_output):
        require_vllm()
        with _client() as client:
            pulled, _spec, config = _pulled_config(client, bundle, cache, trust)
            other = _pulled_config(client, against, cache, trust) if against else None
            kv_cache = choose_kv_cache(cpu_kvcache_space)
            if kv_cache is not None:
                _log(kv_cache.describe())
            outputs, fingerprint = replay_outputs(config, requests, runs=runs,
                                                  concurrency=concurrency, kv_cache=kv_cache)
            if capture is not None:
                write_capture(capture, requests, outputs[0])
            name = str(expected) if expected else ""
            if other is not None:
                theirs, _ = replay_outputs(other[2], requests, runs=1, concurrency=concurrency,
                                           kv_cache=kv_cache)
                reference = {r.id: ids for r, ids in zip(requests, theirs[0], strict=True)}
                name = f"{other[0].repo}@{other[0].digest}"
            report = summarize(requests, outputs, reference, reference_name=name)
            requests_sha256 = "sha256:" + hashlib.sha256(requests_file.read_bytes()).hexdigest()
            predicate: dict[str, Any] = {
                "version": 1, "bundle_digest": pulled.digest,
                "against": other[0].digest if other is not None else None,
                "requests_sha256": requests_sha256,
                "concurrency": concurrency, "fingerprint_id": fingerprint.id,
                "fingerprint": dict(fingerprint.data), **report.to_predicate(),
            }
            if key is not None:
                envelope = sign_predicate(key, pulled.repo, pulled.digest,
                                          PredicateType.REPLAY, predicate)
                attach_error, kept = attach_or_keep(
                    client, pulled.repo, pulled.digest, envelope,
                    what="the signed replay result",
                    name=f"replay-{hashlib.sha256(envelope).hexdigest()[:16]}.dsse.json",
                    cache=cache, key=key, key_path=worker_key)
    if key is None:
        attach_error = "no --worker-key: the result was not signed"
        err_console.print("no --worker-key: result not signed or attached", markup=False)
    elif attach_error is not None:
        _log(f"warning: {attach_error}\n  the signed result is kept at {kept}; attach it "
             f"once the key is registered: modelward attestation add "
             f"{pulled.repo}@{pulled.digest} {kept}")
    if json_output:
        emit_json({"repo": pulled.repo, **predicate,
                   "attached": key is not None and attach_error is None,
                   "attach_error": attach_error,
                   "statement_file": str(kept) if kept else None,
                   "capture": str(capture) if capture else None,
                   "kv_cache": kv_cache.as_dict() if kv_cache else None})
    else:
        _print_report(pulled.digest, report)
    raise typer.Exit(1 if report.divergence_count else 0)
