"""``modelward bundle sign DIR``: sign a bundle's provenance (docs/attestations.md#signing).

Formats:

- ``dsse`` (default): hash DIR into its manifest, read the pinned serving inputs from
  ``DIR/modelward.yaml`` when present, build a SLSA Provenance v1 predicate, wrap it in an
  in-toto Statement v1 whose subject is the bundle digest, and sign it as a DSSE envelope
  with ``--key``. With ``--sigstore`` the same statement is signed keyless instead
  (Fulcio certificate + Rekor entry) into a Sigstore bundle; that needs the network and
  an OIDC identity token (``SIGSTORE_ID_TOKEN`` or an ambient CI credential).
- ``oms``: an OpenSSF Model Signing ``model.sig`` over DIR's files with an EC (P-256)
  ``--key``; ``--ignore-path P`` leaves P out of the signature and of the bundle.

Nothing is signed that the scanner refuses: DIR is scanned (docs/scanner.md, with
``--allow GLOB`` as ``bundle scan`` takes it) before any signature is made, and every
finding is printed, as ``modelward bundle scan DIR`` prints it.

The output never lands inside the bundle, except under ``DIR/.modelward/`` (and, for
``oms``, ``DIR/model.sig``), both of which the bundle's tree walk ignores. It is written
atomically: an interrupted run leaves no partial file. Exit 0 signed; 1 failed; 2 usage.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.attest.provenance import DEFAULT_BUILDER_ID, make_provenance
from modelward.cli._apps import bundle_app
from modelward.cli.common import console, err_console, fail, hashing_progress
from modelward.cli.keys import passphrase_from_env

if TYPE_CHECKING:
    from modelward.attest.manifest import BuiltBundle

__all__ = ["sign"]

_STATE_DIR = ".modelward"
_OMS_FILENAME = "model.sig"


class SignatureFormat(StrEnum):
    DSSE = "dsse"
    OMS = "oms"


def _check_out(directory: Path, out: Path, fmt: SignatureFormat) -> Path:
    """Resolve ``out``; refuse a place inside the bundle that the bundle digest covers."""
    if out.is_dir():
        fail(f"{out} is a directory; --out names the signature file to write", code=2)
    target = out.parent.resolve() / out.name
    root = directory.resolve()
    if not target.is_relative_to(root):
        if not target.parent.is_dir():
            fail(f"directory {target.parent} does not exist")
        return target
    rel = target.relative_to(root).parts
    if len(rel) >= 2 and rel[0] == _STATE_DIR:
        return target
    if fmt is SignatureFormat.OMS and rel == (_OMS_FILENAME,):
        return target
    allowed = f"{root / _STATE_DIR}/" + (
        f" or {root / _OMS_FILENAME}" if fmt is SignatureFormat.OMS else ""
    )
    fail(
        f"refusing to write {target} inside the bundle: it would change what is signed",
        hint=f"write it outside {root} or under {allowed}",
    )
    return target  # pragma: no cover - fail() does not return


def _write_atomic(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` (atomically, or in place for a device: _fileio)."""
    from modelward.attest._fileio import write_output

    try:
        write_output(target, data)
    except OSError as exc:
        fail(f"cannot write {target}: {exc.strerror or exc}")


def _serving_inputs(directory: Path, built: BuiltBundle) -> dict[str, Any] | None:
    """The pinned serving inputs of ``DIR/modelward.yaml``, or None when it has none.

    The bytes read must be the bytes just hashed into the manifest (DigestMismatch if the
    file changed in between), so the provenance never describes another spec.
    """
    from modelward.attest.errors import DigestMismatch
    from modelward.attest.spec import MAX_SPEC_BYTES, SPEC_FILENAME, load_spec

    try:
        layer = built.manifest.layer(SPEC_FILENAME)
    except KeyError:
        return None
    path = directory / SPEC_FILENAME
    with path.open("rb") as fh:
        data = fh.read(MAX_SPEC_BYTES + 1)
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != layer.digest:
        raise DigestMismatch(SPEC_FILENAME, layer.digest, actual)
    spec = load_spec(data, source=str(path))
    return spec.model_dump(mode="json", exclude={"probes"})


def _build(directory: Path) -> BuiltBundle:
    from modelward.attest.manifest import build_bundle

    with hashing_progress(directory) as progress:
        return build_bundle(directory, progress=progress)


def _sign_sigstore(statement: bytes) -> bytes:
    """Keyless signing with sigstore-python: needs an OIDC token and the network."""
    from sigstore import dsse as sigstore_dsse
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken, detect_credential
    from sigstore.sign import SigningContext

    raw_token = os.environ.get("SIGSTORE_ID_TOKEN") or None
    if raw_token is None:
        try:
            raw_token = detect_credential()
        except Exception as exc:  # noqa: BLE001 - any detector failure means no identity
            fail(f"keyless signing: ambient OIDC credential detection failed: {exc}")
    if raw_token is None:
        fail(
            "keyless signing (--sigstore) needs an OIDC identity token, and none is available",
            hint="set SIGSTORE_ID_TOKEN (e.g. in CI with id-token permission), or sign with --key",
        )
    try:
        token = IdentityToken(raw_token)
        context = SigningContext.from_trust_config(ClientTrustConfig.production())
        with context.signer(token) as signer:
            bundle = signer.sign_dsse(sigstore_dsse.Statement(statement))
    except Exception as exc:  # noqa: BLE001 - report the network/identity failure plainly
        fail(f"keyless signing failed: {type(exc).__name__}: {exc}")
    return bundle.to_json().encode("utf-8")


def _provenance(
    builder_id: str,
    started: datetime,
    finished: datetime,
    source: str | None,
    revision: str | None,
    *,
    serving: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The SLSA provenance predicate; a usage error (exit 2) when make_provenance refuses."""
    try:
        return make_provenance(
            builder_id=builder_id,
            started_on=started,
            finished_on=finished,
            source_uri=source,
            source_revision=revision,
            serving=serving,
        )
    except ValueError as exc:
        fail(str(exc), code=2)


def _refuse_unsafe_tree(
    directory: Path, allow: list[str] | None, excludes: tuple[str, ...]
) -> None:
    """The scanner's verdict on DIR (less the excluded paths) before anything is signed:
    every finding printed as ``bundle scan`` prints it, then exit 1."""
    from modelward.attest.scanner import ScanLimits, scan_tree
    from modelward.attest.tree import is_excluded

    report = scan_tree(directory, ScanLimits(allow_globs=tuple(allow or ())))
    findings = [f for f in report.findings if not is_excluded(f.path, excludes)]
    if not findings:
        return
    for finding in findings:
        err_console.print(str(finding), markup=False)
    fail(
        f"refusing to sign {directory}: the scanner refuses it ({len(findings)} finding(s) "
        "above); a registry would refuse this bundle too",
        hint=f"remove or convert the files named, then check with `modelward bundle scan "
        f"{directory}`",
    )


def _check_provenance_inputs(builder_id: str, source: str | None, revision: str | None) -> None:
    """Refuse an unpinned source or a malformed builder id before hashing anything."""
    now = datetime.now(UTC)
    _provenance(builder_id, now, now, source, revision)


def _sign_oms(
    directory: Path,
    key: Path,
    passphrase: bytes | None,
    target: Path,
    *,
    allow: list[str] | None,
    excludes: tuple[str, ...],
) -> None:
    """The key first (an EC key, its passphrase), then the scan, then the signature."""
    from modelward.attest.errors import BundleError, KeyError_
    from modelward.attest.oms import load_oms_signing_key, sign_oms

    try:
        load_oms_signing_key(key, passphrase)
    except KeyError_ as exc:
        fail(str(exc), code=2)
    _refuse_unsafe_tree(directory, allow, excludes)
    try:
        data = sign_oms(directory, key, passphrase, excludes)
    except (BundleError, KeyError_) as exc:
        fail(f"{directory}: {exc}")
    _write_atomic(target, data)
    console.print(f"wrote OMS signature {target}", markup=False)


@bundle_app.command("sign")
def sign(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="The bundle directory.")],
    *,
    out: Annotated[Path, typer.Option("--out", help="Signature file to write.")],
    key: Annotated[
        Path | None, typer.Option("--key", help="Private key file (PEM, PKCS#8).")
    ] = None,
    passphrase_env: Annotated[
        str | None,
        typer.Option(
            "--passphrase-env", metavar="VAR", help="Key passphrase in environment variable VAR."
        ),
    ] = None,
    builder_id: Annotated[
        str, typer.Option("--builder-id", metavar="URI", help="runDetails.builder.id.")
    ] = DEFAULT_BUILDER_ID,
    source: Annotated[
        str | None,
        typer.Option("--source", metavar="URI", help="Source the bundle came from (hf://, git)."),
    ] = None,
    source_revision: Annotated[
        str | None,
        typer.Option("--source-revision", metavar="REV", help="The source's 40-hex commit."),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Subject name (default: the directory's name)."),
    ] = None,
    fmt: Annotated[
        SignatureFormat, typer.Option("--format", help="Signature format.")
    ] = SignatureFormat.DSSE,
    sigstore: Annotated[
        bool, typer.Option("--sigstore", help="Sign keyless with Sigstore (network + OIDC).")
    ] = False,
    ignore_paths: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore-path",
            metavar="PATH",
            help="(oms) Leave PATH out of the signature and the bundle; repeatable.",
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="GLOB",
            help="Admit files of unknown format matching GLOB, as `bundle scan "
            "--allow` (never a dangerous format). Repeatable.",
        ),
    ] = None,
) -> None:
    """Sign DIR: SLSA provenance for its bundle digest (DSSE), or an OMS model.sig."""
    # (1) usage: a directory, one way to sign, and an output outside what is signed
    if not directory.is_dir():
        fail(f"{directory}: not a directory", code=2)
    if sigstore and (key is not None or fmt is not SignatureFormat.DSSE):
        fail("--sigstore signs keyless DSSE provenance: drop --key and --format oms", code=2)
    if not sigstore and key is None:
        fail("--key is required (or --sigstore for keyless signing)", code=2)
    if ignore_paths and fmt is not SignatureFormat.OMS:
        fail("--ignore-path applies to --format oms only", code=2)
    if fmt is SignatureFormat.OMS and (source or name or builder_id != DEFAULT_BUILDER_ID):
        fail("--source, --name and --builder-id describe DSSE provenance, not oms", code=2)
    if (source is None) != (source_revision is None):
        fail("--source and --source-revision go together", code=2)
    _check_provenance_inputs(builder_id, source, source_revision)
    target = _check_out(directory, out, fmt)
    passphrase = passphrase_from_env(passphrase_env)
    from modelward.attest.errors import BundleError
    from modelward.attest.tree import normalize_excludes

    try:
        excludes = normalize_excludes(ignore_paths or ())
    except ValueError as exc:
        fail(f"--ignore-path: {exc}", code=2)

    # (2) OMS: the interop module signs every file itself
    if fmt is SignatureFormat.OMS and key is not None:
        _sign_oms(directory, key, passphrase, target, allow=allow, excludes=excludes)
        return

    # (3) the key first: a wrong passphrase fails before hashing gigabytes
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.keys import keyid, load_private_key
    from modelward.attest.statement import PredicateType, make_statement

    signing_key = load_private_key(key, passphrase) if key is not None else None

    # (4) nothing the scanner refuses is signed
    _refuse_unsafe_tree(directory, allow, excludes)

    # (5) the bundle digest and the pinned serving inputs it carries
    started = datetime.now(UTC)
    try:
        built = _build(directory)
        serving = _serving_inputs(directory, built)
    except BundleError as exc:
        fail(f"{directory}: {exc}")
    finished = datetime.now(UTC)
    digest = built.manifest.digest

    # (6) provenance → statement → signature
    predicate = _provenance(builder_id, started, finished, source, source_revision, serving=serving)
    subject = name or directory.resolve().name or "bundle"
    statement = make_statement(subject, digest, PredicateType.PROVENANCE, predicate)
    if signing_key is None:
        data = _sign_sigstore(statement)
        signer = "sigstore keyless"
    else:
        data = sign_envelope(statement, [signing_key])
        signer = f"key {keyid(signing_key.public_key())}"

    # (7) write it whole or not at all
    _write_atomic(target, data)
    console.print(f"bundle digest: {digest}", markup=False)
    console.print(f"signed by:     {signer}", markup=False)
    console.print(f"wrote:         {target}", markup=False)
