"""``modelward attestation add|list|show|retract``: attestations of a stored bundle.

REPO@REF is an alias (resolved through the registry once) or a digest. The registry decides
who may attach what and who may retract (docs/registry.md#attestations); a refusal prints
the server's message with exit 1; a malformed REPO@REF is a usage error (exit 2). Human output
is one line per attestation; ``--json`` prints one JSON document on stdout (docs/cli.md).

``show`` decodes each attestation for reading: its format, predicate type, subjects, the
signers the registry's verifier verified when it was attached (key id and principal) and the
in-toto statement itself (a DSSE payload, or a Sigstore bundle's). Decoding is not verifying:
``pull``, ``bundle verify`` and ``release verify`` verify against the trust you pin.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.common import err_console, fail
from modelward.cli.remote import AsJson, registry_client, reported, valid_ref
from modelward.client.api import APIError, RegistryClient
from modelward.client.config import parse_reference

__all__ = ["attestation_app", "decode_statement", "describe", "register_attestation"]

attestation_app = typer.Typer(
    name="attestation",
    help="Attach, list, show (decoded) and retract the attestations of a bundle "
    "(REPO@ALIAS or REPO@DIGEST).",
    no_args_is_help=True,
)

Ref = Annotated[
    str,
    typer.Argument(
        metavar="REPO@REF", help="REPO@ALIAS, REPO:TAG or REPO@sha256:<hex>", callback=valid_ref
    ),
]


def describe(item: dict[str, Any]) -> str:
    """One line: id, kind, predicate type, signers, who attached it, retracted or live."""
    signers = ",".join(str(s.get("name")) for s in item.get("signers") or []) or "-"
    line = (
        f"#{item.get('id')}  {item.get('kind')}  {item.get('predicate_type')}  "
        f"signers={signers}  by={item.get('attached_by')}"
    )
    if item.get("retracted"):
        return (
            f"{line}  RETRACTED by {item.get('retracted_by')} at {item.get('retracted_at')}: "
            f"{item.get('retraction_reason')}"
        )
    return f"{line}  live"


def _digest(client: RegistryClient, ref: str) -> tuple[str, str]:
    r = parse_reference(ref)
    return r.repo, client.resolve(r)


@attestation_app.command("add")
def add(
    ref: Ref,
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...",
            exists=True,
            dir_okay=False,
            help="DSSE envelope, Sigstore bundle or OMS",
        ),
    ],
    as_json: AsJson = False,
) -> None:
    """Attach attestation files to a bundle (verified by the registry, in the order given)."""
    datas = [(path, path.read_bytes()) for path in files]
    attached: list[dict[str, Any]] = []
    with reported(), registry_client() as client:
        repo, digest = _digest(client, ref)
        for done, (path, data) in enumerate(datas):
            try:
                summary = client.add_attestation(repo, digest, data)
            except APIError as exc:
                hint = f"the {done} file(s) before it were attached" if done else None
                fail(f"{path}: {exc}", hint=hint)
            attached.append({"file": str(path), **summary})
            if not as_json:
                typer.echo(f"{path}: {describe(summary)}")
    if as_json:
        typer.echo(json.dumps(attached, indent=2, sort_keys=True))


@attestation_app.command("list")
def list_(
    ref: Ref,
    as_json: AsJson = False,
    include_retracted: Annotated[
        bool, typer.Option("--include-retracted", help="Retracted ones too (admins, reviewers)")
    ] = False,
) -> None:
    """List a bundle's attestations: id, kind, predicate type, signers, attacher, retracted."""
    with reported(), registry_client() as client:
        repo, digest = _digest(client, ref)
        if include_retracted:
            items = client.list_attestations_with_retracted(repo, digest)
        else:
            items = client.list_attestations(repo, digest)
    if as_json:
        typer.echo(json.dumps(items, indent=2, sort_keys=True))
        return
    if not items:
        err_console.print(f"no attestations on {repo}@{digest}", markup=False)
    for item in items:
        typer.echo(describe(item))


MAX_STATEMENT_BYTES = 16 * 2**20  # the registry's max_attestation_bytes default


def decode_statement(data: bytes) -> dict[str, Any] | None:
    """The in-toto statement inside a DSSE envelope or a Sigstore bundle (its
    ``dsseEnvelope``), parsed; None when the bytes hold none (an OMS message signature)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    envelope = doc.get("dsseEnvelope", doc) if isinstance(doc, dict) else None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), str):
        return None
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
        statement = json.loads(payload)
    except (binascii.Error, ValueError):
        return None
    return statement if isinstance(statement, dict) else None


def _subjects(statement: dict[str, Any] | None) -> list[str]:
    subjects = (statement or {}).get("subject") or []
    return [
        f"{s.get('name')} " + ", ".join(f"{k}:{v}" for k, v in (s.get("digest") or {}).items())
        for s in subjects
        if isinstance(s, dict)
    ]


def _decoded(item: dict[str, Any]) -> dict[str, Any]:
    data = base64.b64decode(str(item.get("data", "")))
    statement = decode_statement(data[:MAX_STATEMENT_BYTES])
    shown = {k: v for k, v in item.items() if k != "data"}
    shown["subjects"] = _subjects(statement)
    shown["statement"] = statement
    shown["verdict"] = (
        "retracted: counts nowhere"
        if item.get("retracted")
        else "verified by the registry when attached (signers above); verify it yourself "
        "with `pull` or `bundle verify`"
    )
    return shown


@attestation_app.command("show")
def show(
    ref: Ref,
    as_json: AsJson = False,
    attestation_id: Annotated[
        int | None, typer.Option("--id", metavar="ID", min=1, help="Only this attestation")
    ] = None,
) -> None:
    """Show a bundle's attestations decoded: predicate type, subjects, signers (key id and
    principal), who attached it, and the in-toto statement."""
    with reported(), registry_client() as client:
        repo, digest = _digest(client, ref)
        items = client.list_attestations(repo, digest)
    shown = [_decoded(i) for i in items if attestation_id is None or i.get("id") == attestation_id]
    if attestation_id is not None and not shown:
        fail(f"{repo}@{digest} has no live attestation #{attestation_id}")
    if as_json:
        typer.echo(json.dumps(shown, indent=2, sort_keys=True))
        return
    if not shown:
        err_console.print(f"no attestations on {repo}@{digest}", markup=False)
    for item in shown:
        typer.echo(f"#{item.get('id')}  {item.get('kind')}  {item.get('predicate_type')}")
        for subject in item["subjects"]:
            typer.echo(f"  subject:   {subject}")
        for signer in item.get("signers") or []:
            typer.echo(f"  signer:    {signer.get('name')}  key {signer.get('detail')}")
        typer.echo(f"  attached:  by {item.get('attached_by')} at {item.get('attached_at')}")
        typer.echo(f"  verdict:   {item['verdict']}")
        statement = item["statement"]
        text = json.dumps(statement, indent=2, sort_keys=True) if statement else "(none)"
        typer.echo("  statement: " + text.replace("\n", "\n  "))


@attestation_app.command("retract")
def retract(
    ref: Ref,
    attestation_id: Annotated[int, typer.Argument(metavar="ID", min=1, help="Attestation id")],
    reason: Annotated[str, typer.Option(metavar="TEXT", help="Why (recorded and audited)")],
    as_json: AsJson = False,
) -> None:
    """Retract an attestation (its attacher or an admin): kept for forensics, counts nowhere."""
    with reported(), registry_client() as client:
        repo, digest = _digest(client, ref)
        summary = client.retract_attestation(repo, digest, attestation_id, reason)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    typer.echo(f"{repo}@{digest}: {describe(summary)}")


def register_attestation(app: typer.Typer) -> None:
    """Add ``modelward attestation`` to the root app."""
    app.add_typer(attestation_app)
