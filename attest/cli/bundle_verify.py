"""``modelward bundle verify DIR --signature FILE ... (trust flags)``.

Builds the bundle (its digest) and hands the manifest, the signatures and the bundle's
files to attest.verifier, the one verifier the registry and the loader use too, under the
policy the trust flags mean (attest.policy.policy_from_flags). Exit 0 verified; 1 not
verified (every reason printed); 2 usage.

``--ignore-path`` excuses files from an OMS signature's file check only. A bundle file is
always scanned, and an OMS signature vouches for the bundle only if it signs every bundle
file, so an ignored bundle file makes the signature's binding fail, with that reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.attest.cli._apps import bundle_app
from modelward.attest.cli._common import console, err_console, fail
from modelward.attest.cli._trust_flags import (
    CertificateChainOpt,
    IdentityOpt,
    IssuerOpt,
    PolicyOpt,
    PublicKeyOpt,
    SigstoreTrustRootOpt,
    trust_flags,
)
from modelward.attest.errors import AttestError, PolicyError
from modelward.attest.policy import policy_from_flags
from modelward.attest.trust import VerifiedStatement
from modelward.attest.verifier import BundleVerdict, DirectoryReader, verify_bundle_result
from modelward.attest.verify import MAX_SIGNATURE_BYTES

_TRUST_HELP = (
    "give --policy, or one or more of --public-key, --certificate-chain, "
    "--identity/--issuer (docs/policy.md#trust-flags)"
)


def _read_file(path: Path, what: str, limit: int = MAX_SIGNATURE_BYTES) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        fail(f"{what} {path}: cannot read: {exc.strerror or exc}", code=2)
    if len(data) > limit:
        fail(f"{what} {path}: larger than {limit} bytes", code=2)
    return data


def _ignored(path: str, ignore_paths: list[str]) -> bool:
    return any(path == p.strip("/") or path.startswith(p.strip("/") + "/") for p in ignore_paths)


def _statement_json(name: str, stmt: VerifiedStatement) -> dict[str, Any]:
    return {
        "signature": name,
        "kind": stmt.kind,
        "predicate_type": stmt.predicate_type,
        "subjects": [{"name": s.name, "digest": dict(s.digest)} for s in stmt.subjects],
        "signers": [{"name": s.name, "kind": s.kind, "detail": s.detail} for s in stmt.signers],
        "notes": list(stmt.notes),
        "statement": stmt.statement,
    }


def _print_human(verdict: BundleVerdict, ignored_paths: list[str]) -> None:
    console.print(f"bundle {verdict.digest}", markup=False)
    for item in verdict.verified:
        stmt = item.statement
        signers = ", ".join(f"{s.name} ({s.kind} {s.detail})" for s in stmt.signers)
        console.print(
            f"signature {item.label}: {stmt.kind}, {stmt.predicate_type}, signed by {signers}",
            markup=False,
        )
        for note in stmt.notes:
            console.print(f"  note: {note}", markup=False)
    for aside in verdict.ignored:
        console.print(
            f"signature {aside.label}: ignored, no trusted signer: {aside.reason}", markup=False
        )
    for path in ignored_paths:
        console.print(
            f"ignore path: {path} is a bundle file: scanned, and an OMS signature must sign it",
            markup=False,
        )
    decision = verdict.decision
    for check in decision.checks:
        mark = "ok  " if check.passed else "FAIL"
        console.print(f"  {mark} {check.name}: {check.message}", markup=False)
    if decision.allowed:
        names = ", ".join(s.name for s in decision.signers)
        console.print(f"verified: signed by {names}", markup=False)
    else:
        err_console.print(f"NOT verified: {len(decision.reasons)} reason(s)", markup=False)
        for reason in decision.reasons:
            err_console.print(f"  {reason}", markup=False)


@bundle_app.command("verify")
def verify(
    directory: Annotated[Path, typer.Argument(help="the bundle directory")],
    *,
    signature: Annotated[
        list[Path], typer.Option("--signature", "-s", help="DSSE, Sigstore bundle or model.sig")
    ],
    policy_file: PolicyOpt = None,
    public_key: PublicKeyOpt = None,
    certificate_chain: CertificateChainOpt = None,
    identity: IdentityOpt = None,
    issuer: IssuerOpt = None,
    sigstore_trust_root: SigstoreTrustRootOpt = None,
    ignore_path: Annotated[
        list[str] | None, typer.Option("--ignore-path", help="path not covered (OMS)")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Verify signatures over a bundle directory against a policy or trusted signers."""
    from modelward.attest.manifest import build_bundle

    ignore_paths = ignore_path or []
    flags = trust_flags(
        policy_file,
        public_key=public_key,
        certificate_chain=certificate_chain,
        identity=identity,
        issuer=issuer,
        sigstore_trust_root=sigstore_trust_root,
    )
    if not directory.is_dir():
        fail(f"{directory}: not a directory", code=2)
    # (1): one source of trust: a policy file, or flags that stand for one.
    try:
        policy, trust = policy_from_flags(flags)
    except PolicyError as exc:
        fail(str(exc), code=2, hint=_TRUST_HELP)
    signatures = [_read_file(path, "signature") for path in signature]
    try:
        # (2): the bundle digest; (3): the one verifier over the manifest, the signatures
        # and the bundle's files.
        built = build_bundle(directory)
        verdict = verify_bundle_result(
            built.manifest.raw,
            signatures,
            policy=policy,
            trust=trust,
            reader=DirectoryReader(directory),
            labels=[path.name for path in signature],
            oms_ignore_paths=ignore_paths,
        )
    except AttestError as exc:
        fail(str(exc))
    bundle_paths = {layer.path for layer in built.manifest.layers}
    ignored_paths = sorted(p for p in bundle_paths if _ignored(p, ignore_paths))
    if json_output:
        doc = {
            "bundle": verdict.digest,
            "verified": verdict.allowed,
            "statements": [_statement_json(v.label, v.statement) for v in verdict.verified],
            "ignored_signatures": [
                {"signature": a.label, "sha256": a.sha256, "reason": a.reason}
                for a in verdict.ignored
            ],
            "rejected": [f"{a.label}: {a.reason}" for a in verdict.rejected],
            "ignored": ignored_paths,
            "decision": verdict.decision.as_dict(),
        }
        typer.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_human(verdict, ignored_paths)
    raise typer.Exit(0 if verdict.allowed else 1)
