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

``--manifest FILE`` names the manifest the signatures are about (as a registry serves it:
``oras manifest fetch``, ``skopeo inspect --raw``). A directory that holds exactly its
files is verified against those bytes (a bundle built before the title annotation,
docs/bundle-format.md#layers, has another digest for the same files); one that differs is
refused naming the added, removed and changed files.

Heavy modules (the policy models, the verifier, cryptography) are imported inside the
command: ``modelward --help`` does not pay for them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from modelward.cli._apps import bundle_app
from modelward.cli.common import console, err_console, fail, read_bounded
from modelward.cli.trust_options import TrustOptions, with_trust_options

if TYPE_CHECKING:
    from modelward.attest.manifest import Manifest
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


def _differences(expected: Manifest, actual: Manifest) -> list[str]:
    """The files of ``actual`` (a directory) that are not those of ``expected``: added,
    removed and changed, each path once, in path order; empty when the files are the same."""
    want = {layer.path: layer.digest for layer in expected.layers}
    have = {layer.path: layer.digest for layer in actual.layers}
    found = [f"added {p}" for p in have.keys() - want.keys()]
    found += [f"removed {p}" for p in want.keys() - have.keys()]
    found += [f"changed {p}" for p in want.keys() & have.keys() if want[p] != have[p]]
    return sorted(found, key=lambda item: item.split(" ", 1)[1].encode())


def _excluded_present(directory: Path, ignores: tuple[str, ...]) -> list[str]:
    """The ignore paths that exist in ``directory``: what the bundle leaves out."""
    return [p for p in ignores if (directory / p).exists() or (directory / p).is_symlink()]


@bundle_app.command("verify")
@with_trust_options("signers", json=False)
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
    trust: TrustOptions,
    ignore_path: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore-path",
            metavar="PATH",
            help="Leave PATH (relative to DIR) out of the bundle, as model_signing's "
            "--ignore-paths does; repeatable.",
        ),
    ] = None,
    manifest_file: Annotated[
        Path | None,
        typer.Option(
            "--manifest",
            metavar="FILE",
            help="The manifest the signatures are about (e.g. from `oras manifest fetch`): "
            "verify DIR against it, or name the files that differ.",
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
    from modelward.attest.manifest import ManifestLimits, build_bundle, parse_manifest
    from modelward.attest.policy import policy_from_flags
    from modelward.attest.tree import normalize_excludes
    from modelward.attest.verifier import DirectoryReader, verify_bundle_result
    from modelward.attest.verify import MAX_SIGNATURE_BYTES

    if not directory.is_dir():
        fail(f"{directory}: not a directory", code=2)
    try:
        ignores = normalize_excludes(ignore_path or ())
    except ValueError as exc:
        fail(f"--ignore-path: {exc}", code=2)
    # (1): one source of trust: a policy file, or flags that stand for one.
    try:
        policy, trusted = policy_from_flags(trust.flags)
    except PolicyError as exc:
        fail(str(exc), code=2, hint=_TRUST_HELP)
    signatures = [read_bounded(path, "signature", MAX_SIGNATURE_BYTES) for path in signature]
    limit = ManifestLimits().max_bytes
    expected_raw = None if manifest_file is None else read_bounded(manifest_file, "manifest", limit)
    excluded = _excluded_present(directory, ignores)

    def refuse(message: str) -> NoReturn:
        if json_output:
            typer.echo(json.dumps(verdict_json(None, excluded, message), indent=2, sort_keys=True))
        fail(message)

    try:
        # (2): the bundle digest, the ignored paths left out; (3): the one verifier over
        # the manifest, the signatures and the bundle's files.
        built = build_bundle(directory, exclude=ignores)
        raw = built.manifest.raw
        if expected_raw is not None:
            # (2a): --manifest: the directory must hold exactly the files it names.
            expected = parse_manifest(expected_raw)
            differ = _differences(expected, built.manifest)
            if differ:
                refuse(
                    f"{directory} is not the bundle {expected.digest} ({manifest_file}); "
                    f"it is {built.manifest.digest}: {', '.join(differ)}"
                )
            raw = expected.raw
        verdict = verify_bundle_result(
            raw,
            signatures,
            policy=policy,
            trust=trusted,
            reader=DirectoryReader(directory),
            labels=[path.name for path in signature],
            oms_ignore_paths=ignores,
        )
    except AttestError as exc:
        refuse(str(exc))
    except OSError as exc:
        refuse(f"{directory}: {exc.strerror or exc}")
    if expected_raw is None and any(
        "statement is not about bundle" in aside.reason for aside in verdict.rejected
    ):
        err_console.print(
            f"hint: {directory} is {verdict.digest}; give the signed bundle's manifest with "
            "--manifest FILE to see which files differ",
            markup=False,
        )
    if json_output:
        typer.echo(json.dumps(verdict_json(verdict, excluded), indent=2, sort_keys=True))
        if not verdict.allowed:
            for reason in verdict.decision.reasons:
                err_console.print(f"NOT verified: {reason}", markup=False)
    else:
        _print_human(verdict, excluded)
    raise typer.Exit(0 if verdict.allowed else 1)
