"""``modelward attestation add|list|retract``: attestations of a stored bundle.

REPO@REF is an alias (resolved through the registry once) or a digest. The registry decides
who may attach what and who may retract (docs/registry.md#attestations); a refusal prints
the server's message with exit 1; a malformed REPO@REF is a usage error (exit 2). Human output
is one line per attestation; ``--json`` prints one JSON document on stdout (docs/cli.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.common import err_console, fail
from modelward.cli.remote import AsJson, registry_client, reported, valid_ref
from modelward.client.api import APIError, RegistryClient
from modelward.client.config import parse_reference

__all__ = ["attestation_app", "describe", "register_attestation"]

attestation_app = typer.Typer(
    name="attestation",
    help="Attach, list and retract the attestations of a bundle (REPO@ALIAS or REPO@DIGEST).",
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
