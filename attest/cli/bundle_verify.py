"""``modelward bundle verify DIR --signature FILE ... (trust options)``.

Builds the bundle (its digest), scans it, verifies every signature with attest.verify and
decides with attest.policy.evaluate — the same evaluator the registry and the loader use.
Exit 0 verified; 1 not verified (every reason printed); 2 usage.

``--ignore-path`` excuses files from an OMS signature's file check only. A bundle file is
always scanned, and an OMS signature vouches for the bundle only if it signs every bundle
file, so an ignored bundle file makes the signature's binding fail, with that reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from cryptography import x509

from modelward.attest.cli._apps import bundle_app
from modelward.attest.cli._common import console, err_console, fail
from modelward.attest.errors import AttestError
from modelward.attest.policy import (
    Decision,
    Policy,
    evaluate,
    load_policy,
    policy_scan_limits,
    policy_trust_set,
    trusted_public_key,
)
from modelward.attest.trust import TrustedCA, TrustedIdentity, TrustSet, VerifiedStatement
from modelward.attest.verify import MAX_SIGNATURE_BYTES, verify_attestation

_TRUST_HELP = "give --policy, or one or more of --public-key, --certificate-chain, --identity"


def _read_file(path: Path, what: str, limit: int = MAX_SIGNATURE_BYTES) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        fail(f"{what} {path}: cannot read: {exc.strerror or exc}", code=2)
    if len(data) > limit:
        fail(f"{what} {path}: larger than {limit} bytes", code=2)
    return data


def _flag_trust(
    public_keys: list[Path],
    chains: list[Path],
    identity: str | None,
    issuer: str | None,
    trust_root: Path | None,
) -> TrustSet:
    """A TrustSet from command-line flags; each signer is named after its flag value."""
    keys = [
        trusted_public_key(path.name, _read_file(path, "public key"), str(path))
        for path in public_keys
    ]
    cas: list[TrustedCA] = []
    if chains:
        certs: list[x509.Certificate] = []
        for path in chains:
            try:
                certs.extend(x509.load_pem_x509_certificates(_read_file(path, "certificate")))
            except ValueError as exc:
                fail(f"certificate chain {path}: not PEM certificates: {exc}", code=2)
        roots = tuple(c for c in certs if c.subject == c.issuer) or tuple(certs)
        rest = tuple(c for c in certs if c not in roots)
        cas.append(TrustedCA(chains[0].name, roots, rest))
    identities: list[TrustedIdentity] = []
    if identity is not None:
        if issuer is None:
            fail("--identity needs --issuer (the OIDC issuer URL)", code=2)
        if trust_root is not None and not trust_root.is_file():
            fail(f"--trust-root {trust_root}: file not found", code=2)
        identities.append(TrustedIdentity(identity, identity, issuer, trust_root))
    elif issuer is not None or trust_root is not None:
        fail("--issuer and --trust-root need --identity", code=2)
    return TrustSet(keys=tuple(keys), cas=tuple(cas), identities=tuple(identities))


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


def _print_human(
    digest: str,
    verified: list[tuple[str, VerifiedStatement]],
    ignored: list[str],
    decision: Decision,
) -> None:
    console.print(f"bundle {digest}", markup=False)
    for name, stmt in verified:
        signers = ", ".join(f"{s.name} ({s.kind} {s.detail})" for s in stmt.signers)
        console.print(
            f"signature {name}: {stmt.kind}, {stmt.predicate_type}, signed by {signers}",
            markup=False,
        )
        for note in stmt.notes:
            console.print(f"  note: {note}", markup=False)
    for path in ignored:
        console.print(
            f"ignore path: {path} is a bundle file: scanned, and an OMS signature must sign it",
            markup=False,
        )
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
    policy_file: Annotated[Path | None, typer.Option("--policy", help="policy YAML")] = None,
    public_key: Annotated[
        list[Path] | None, typer.Option("--public-key", help="trusted PEM public key")
    ] = None,
    certificate_chain: Annotated[
        list[Path] | None, typer.Option("--certificate-chain", help="trusted CA certificates")
    ] = None,
    identity: Annotated[str | None, typer.Option(help="Sigstore certificate identity")] = None,
    issuer: Annotated[str | None, typer.Option(help="Sigstore OIDC issuer URL")] = None,
    trust_root: Annotated[
        Path | None, typer.Option(help="Sigstore trusted_root.json (default: public good)")
    ] = None,
    ignore_path: Annotated[
        list[str] | None, typer.Option("--ignore-path", help="path not covered (OMS)")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Verify signatures over a bundle directory against a policy or trusted signers."""
    from modelward.attest.manifest import build_bundle
    from modelward.attest.scanner import scan_tree

    public_key, certificate_chain = public_key or [], certificate_chain or []
    ignore_paths = ignore_path or []
    flags = bool(public_key or certificate_chain or identity or issuer or trust_root)
    # (1): one source of trust: a policy file, or flags that make an ad-hoc policy.
    if policy_file is not None and flags:
        fail("--policy cannot be combined with other trust options", code=2, hint=_TRUST_HELP)
    if policy_file is None and not flags:
        fail("no trust option given", code=2, hint=_TRUST_HELP)
    if not directory.is_dir():
        fail(f"{directory}: not a directory", code=2)
    try:
        if policy_file is not None:
            policy = load_policy(policy_file)
            trust, extra = policy_trust_set(policy, policy_file.parent), TrustSet()
        else:
            extra = _flag_trust(public_key, certificate_chain, identity, issuer, trust_root)
            policy = Policy(version=1, trust_registered_signers=True, required_predicate_types=[])
            trust = TrustSet()
        # (2): the bundle digest, and (3) the content scan of every bundle file.
        built = build_bundle(directory)
        report = scan_tree(directory, policy_scan_limits(policy))
    except AttestError as exc:
        fail(str(exc))
    digest = built.manifest.digest
    bundle_paths = {layer.path for layer in built.manifest.layers}
    # an ignore path excuses only what is outside the bundle; a bundle file's findings count
    findings = [
        f for f in report.findings if f.path in bundle_paths or not _ignored(f.path, ignore_paths)
    ]
    ignored = sorted(p for p in bundle_paths if _ignored(p, ignore_paths))
    # (4): every signature verified and bound to this bundle, or rejected with its reason.
    verified: list[tuple[str, VerifiedStatement]] = []
    rejected: list[str] = []
    for path in signature:
        data = _read_file(path, "signature")
        try:
            stmt = verify_attestation(
                data,
                trust.merged(extra),
                bundle_digest=digest,
                root=directory,
                ignore_paths=ignore_paths,
            )
        except AttestError as exc:
            rejected.append(f"{path.name}: {exc}")
        else:
            verified.append((path.name, stmt))
    # (5): the one evaluator decides.
    decision = evaluate(
        policy,
        manifest=built.manifest,
        statements=[stmt for _, stmt in verified],
        rejected=rejected,
        findings=findings,
        extra_trust=extra,
    )
    if json_output:
        doc = {
            "bundle": digest,
            "verified": decision.allowed,
            "statements": [_statement_json(name, stmt) for name, stmt in verified],
            "rejected": rejected,
            "ignored": ignored,
            "decision": decision.as_dict(),
        }
        typer.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_human(digest, verified, ignored, decision)
    raise typer.Exit(0 if decision.allowed else 1)
