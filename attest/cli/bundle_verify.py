"""``modelward bundle verify DIR --signature FILE ... (trust flags) [--ignore-path P] [--json]``.

Builds the bundle (its digest) and hands the manifest, the signatures and the bundle's
files to attest.verifier, the one verifier the registry and the loader use too, under the
policy the trust flags mean (attest.policy.policy_from_flags). Exit 0 verified; 1 not
verified (every reason printed); 2 usage.

``--ignore-path P`` EXCLUDES P (a file, or a directory and everything under it) from the
bundle, as ``model_signing verify --ignore-paths`` leaves it out of the model: it is in
no manifest, never scanned, never materialized by a worker, and the verdict is about the
bundle without it. An OMS signature that signs a file under P is refused (the file is
missing), as model_signing refuses it. ``--json`` prints one document on stdout
(docs/attestations.md#json-output); messages go to stderr.

Heavy modules (the policy models, the verifier, cryptography) are imported inside the
command: ``modelward --help`` does not pay for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from modelward.attest.cli._apps import bundle_app
from modelward.attest.cli._common import console, err_console, fail, read_bounded
from modelward.attest.cli._trust_flags import (
    CertificateChainOpt,
    IdentityOpt,
    IssuerOpt,
    PolicyOpt,
    PublicKeyOpt,
    SigstoreTrustRootOpt,
    trust_flags,
)

if TYPE_CHECKING:
    from modelward.attest.trust import VerifiedStatement
    from modelward.attest.verifier import BundleVerdict

_TRUST_HELP = (
    "give --policy, or one or more of --public-key, --certificate-chain, "
    "--identity/--issuer (docs/policy.md#trust-flags)"
)


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


def verdict_json(
    verdict: BundleVerdict | None, excluded: list[str], error: str | None = None
) -> dict[str, Any]:
    """The ``--json`` document (docs/attestations.md#json-output); ``verdict`` is None when
    the bundle could not be built or its signatures judged (``error`` says why)."""
    if verdict is None:
        return {
            "bundle": None,
            "verified": False,
            "error": error,
            "statements": [],
            "ignored_signatures": [],
            "rejected": [],
            "excluded": excluded,
            "decision": None,
        }
    return {
        "bundle": verdict.digest,
        "verified": verdict.allowed,
        "error": None,
        "statements": [_statement_json(v.label, v.statement) for v in verdict.verified],
        "ignored_signatures": [
            {"signature": a.label, "sha256": a.sha256, "reason": a.reason} for a in verdict.ignored
        ],
        "rejected": [f"{a.label}: {a.reason}" for a in verdict.rejected],
        "excluded": excluded,
        "decision": verdict.decision.as_dict(),
    }


def _print_human(verdict: BundleVerdict, excluded: list[str]) -> None:
    console.print(f"bundle {verdict.digest}", markup=False)
    for path in excluded:
        console.print(
            f"excluded: {path} (--ignore-path: not in the bundle, not verified)", markup=False
        )
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


def _excluded_present(directory: Path, ignores: tuple[str, ...]) -> list[str]:
    """The ignore paths that exist in ``directory``: what the bundle leaves out."""
    return [p for p in ignores if (directory / p).exists() or (directory / p).is_symlink()]


@bundle_app.command("verify")
def verify(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="The bundle directory.", show_default=False)
    ],
    *,
    signature: Annotated[
        list[Path],
        typer.Option(
            "--signature",
            "-s",
            metavar="FILE",
            help="DSSE envelope, Sigstore bundle or OMS model.sig (repeatable).",
        ),
    ],
    policy_file: PolicyOpt = None,
    public_key: PublicKeyOpt = None,
    certificate_chain: CertificateChainOpt = None,
    identity: IdentityOpt = None,
    issuer: IssuerOpt = None,
    sigstore_trust_root: SigstoreTrustRootOpt = None,
    ignore_path: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore-path",
            metavar="PATH",
            help="Leave PATH (relative to DIR) out of the bundle, as model_signing's "
            "--ignore-paths does; repeatable.",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", metavar="", help="Print one JSON document on stdout (messages on stderr)."
        ),
    ] = False,
) -> None:
    """Verify signatures over a bundle directory against a policy or trusted signers."""
    from modelward.attest.errors import AttestError, PolicyError
    from modelward.attest.manifest import build_bundle
    from modelward.attest.policy import policy_from_flags
    from modelward.attest.tree import normalize_excludes
    from modelward.attest.verifier import DirectoryReader, verify_bundle_result
    from modelward.attest.verify import MAX_SIGNATURE_BYTES

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
    try:
        ignores = normalize_excludes(ignore_path or ())
    except ValueError as exc:
        fail(f"--ignore-path: {exc}", code=2)
    # (1): one source of trust: a policy file, or flags that stand for one.
    try:
        policy, trust = policy_from_flags(flags)
    except PolicyError as exc:
        fail(str(exc), code=2, hint=_TRUST_HELP)
    signatures = [read_bounded(path, "signature", MAX_SIGNATURE_BYTES) for path in signature]
    excluded = _excluded_present(directory, ignores)

    def refuse(message: str) -> NoReturn:
        if json_output:
            typer.echo(json.dumps(verdict_json(None, excluded, message), indent=2, sort_keys=True))
        fail(message)

    try:
        # (2): the bundle digest, the ignored paths left out; (3): the one verifier over
        # the manifest, the signatures and the bundle's files.
        built = build_bundle(directory, exclude=ignores)
        verdict = verify_bundle_result(
            built.manifest.raw,
            signatures,
            policy=policy,
            trust=trust,
            reader=DirectoryReader(directory),
            labels=[path.name for path in signature],
            oms_ignore_paths=ignores,
        )
    except AttestError as exc:
        refuse(str(exc))
    except OSError as exc:
        refuse(f"{directory}: {exc.strerror or exc}")
    if json_output:
        typer.echo(json.dumps(verdict_json(verdict, excluded), indent=2, sort_keys=True))
        if not verdict.allowed:
            for reason in verdict.decision.reasons:
                err_console.print(f"NOT verified: {reason}", markup=False)
    else:
        _print_human(verdict, excluded)
    raise typer.Exit(0 if verdict.allowed else 1)
