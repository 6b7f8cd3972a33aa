"""``modelward audit log|verify|checkpoint|key``: read and verify the registry's audit log
(docs/audit.md); ``audit key`` reads the checkpoint key file on the registry's host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import console, err_console, fail
from modelward.cli.remote import AsJson, emit, print_json, registry_client, reported

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    from modelward.attest.audit.signed_note import NoteVerifier

__all__ = ["audit_app"]

audit_app = typer.Typer(name="audit", help="Read and verify the audit log.", no_args_is_help=True)


def _verifier_key(text: str) -> NoteVerifier:
    """``--key``: the registry's checkpoint verifier key, or exit 2 saying what one looks
    like and which file of the registry it is read from."""
    from modelward.attest.audit.signed_note import MalformedKey, parse_verifier_key

    try:
        return parse_verifier_key(text)
    except MalformedKey as exc:
        shown = text if len(text) <= 40 else text[:37] + "..."
        detail = "not three fields joined by '+'" if text.strip().count("+") < 2 else str(exc)
        fail(
            f"--key {shown!r} is not a checkpoint verifier key ({detail}): a verifier key is one "
            "line NAME+ID+KEY, e.g. registry.example+1a2b3c4d+Af3q...= (the log's name, 8 hex "
            "digits of key id, base64 of 0x01 and a 32-byte Ed25519 public key)",
            hint="`modelward audit key --data-dir D` on the registry host prints it, read from "
            "the registry's checkpoint key file (D/audit-checkpoint.key, or its "
            "audit_checkpoint_key setting); pass the line it prints, not a file name",
            code=2,
        )


@audit_app.command("log")
def audit_log(
    after: Annotated[
        int, typer.Option(metavar="SEQ", min=0, help="Events after this sequence number")
    ] = 0,
    limit: Annotated[int, typer.Option(metavar="N", min=1, help="At most this many events")] = 100,
    as_json: AsJson = False,
) -> None:
    """Print audit events, one line each (--json: one document with next_after)."""
    with reported(), registry_client() as client:
        answer = client.audit(after=after, limit=limit)
    page = {"events": list(answer.get("events") or []), "next_after": answer.get("next_after")}
    emit(page, as_json, _audit_lines)


def _audit_lines(page: Any) -> str:
    lines = []
    for e in page["events"]:
        details = json.dumps(e.get("details") or {}, sort_keys=True)
        lines.append(
            f"{e.get('seq')}  {e.get('at')}  {e.get('actor')}  {e.get('action')}  "
            f"{e.get('subject')}  {details}"
        )
    if page.get("next_after") is not None:
        lines.append(f"(more: --after {page['next_after']})")
    return "\n".join(lines)


@audit_app.command("verify")
def audit_verify(
    database_url: Annotated[
        str | None, typer.Option(help="Read the events straight from this database")
    ] = None,
    since: Annotated[
        Path | None,
        typer.Option(
            "--since",
            exists=True,
            dir_okay=False,
            help="A checkpoint saved earlier (audit checkpoint --out): prove the log only grew",
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="The registry's checkpoint verifier key (NAME+ID+KEY) to pin"),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Recompute the audit hash chain and Merkle tree; name the first broken link (exit 1).

    With --since and --key, also prove the log only grew since that checkpoint: the new
    checkpoint is signed by the pinned key, a consistency proof links it to the saved one, and
    the events re-hash to both roots.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from modelward.attest.errors import AuditVerificationError, BrokenChain
    from modelward.client.audit import verify_through_api
    from modelward.registry.domains.audit.offline import verify_database
    from modelward.registry.errors import RegistryError

    if since is not None and key is None:
        fail(
            "--since needs --key NAME+ID+KEY: a checkpoint proves nothing without the key "
            "that signed it",
            hint="`modelward audit key` on the registry host prints it",
            code=2,
        )
    verifier = _verifier_key(key) if key else None
    saved = since.read_bytes() if since is not None else None
    try:
        if database_url:
            report = verify_database(database_url, verifier=verifier, since=saved)
        else:
            with reported(), registry_client() as client:
                report = verify_through_api(client, verifier=verifier, since=saved)
    except BrokenChain as exc:
        fail(str(exc))
    except (AuditVerificationError, RegistryError) as exc:  # a rewritten log, a failed proof
        fail(str(exc))
    except (ValueError, TypeError) as exc:
        fail(f"unreadable audit event: {exc}")
    except SQLAlchemyError as exc:
        fail(f"cannot read the audit log from the database: {exc.__class__.__name__}: {exc}")
    if as_json:

        def shown(c: Any) -> dict[str, Any]:
            return {
                "origin": c.origin,
                "size": c.size,
                "root": c.root_b64,
                "verified_by": c.verified_by,
            }

        print_json(
            {
                "ok": True,
                "events": report.events,
                "checkpoints": [shown(c) for c in report.checkpoints],
                "grew_since": None if report.since is None else shown(report.since),
            }
        )
        if verifier is None:
            err_console.print("note: no --key: no checkpoint signature was checked", markup=False)
        return
    console.print(f"audit chain ok: {report.events} events verified")
    for checkpoint in report.checkpoints:
        signed = f"signed by {checkpoint.verified_by}" if checkpoint.verified_by else "unsigned"
        console.print(
            f"merkle root ok at {checkpoint.size} events: {checkpoint.root_b64} "
            f"({checkpoint.origin}, {signed})",
            markup=False,
        )
    if report.since is not None:
        console.print(
            f"the log only grew since the checkpoint of {report.since.size} events", markup=False
        )
    elif verifier is None:
        err_console.print(
            "note: no --key, so no checkpoint signature was checked, and without --since a "
            "rewrite by someone with database access is not detected",
            markup=False,
        )


@audit_app.command("checkpoint")
def audit_checkpoint(
    out: Annotated[
        Path | None, typer.Option("--out", dir_okay=False, help="Save it here (else: stdout)")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Verify it with this pinned verifier key (NAME+ID+KEY)"),
    ] = None,
) -> None:
    """Fetch the registry's current signed checkpoint (C2SP tlog-checkpoint) of the audit log.

    Keep it somewhere the registry's operator cannot write; later, `audit verify --since FILE
    --key KEY` proves the log only grew since.
    """
    from modelward.attest.audit.checkpoint import open_checkpoint, unsafe_read_checkpoint
    from modelward.attest.errors import AuditVerificationError
    from modelward.client.audit import checkpoint_from_answer

    verifier = _verifier_key(key) if key else None
    with reported(), registry_client() as client:
        answer = client.audit_checkpoint()
    try:
        note = checkpoint_from_answer(answer)
        checkpoint = open_checkpoint(note, verifier) if verifier else unsafe_read_checkpoint(note)
    except (AuditVerificationError, ValueError) as exc:
        fail(f"the registry's checkpoint is refused: {exc}")
    if out is None:
        typer.echo(note.decode(), nl=False)
    else:
        from modelward.attest._fileio import write_output

        try:
            write_output(out, note)
        except OSError as exc:
            fail(f"cannot write {out}: {exc.strerror or exc}")
        console.print(
            f"saved the checkpoint of {checkpoint.size} events (root {checkpoint.root_b64}) "
            f"to {out}",
            markup=False,
        )
    if verifier is None:
        err_console.print(
            "not verified (no --key); the registry names its key "
            f"{answer.get('verifier_key')!s}: compare it with a copy from a trusted channel "
            "(`modelward audit key` on the registry host) before pinning it",
            markup=False,
        )


@audit_app.command("key")
def audit_key(
    key_file: Annotated[
        Path | None,
        typer.Option("--key-file", help="The key file (default: audit_checkpoint_key setting)"),
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="The registry's data dir")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML settings file")] = None,
    create: Annotated[
        bool, typer.Option("--create", help="Create a new key there (it must not exist)")
    ] = False,
    name: Annotated[
        str | None, typer.Option("--name", help="--create: the log's name (origin)")
    ] = None,
) -> None:
    """Print the registry's checkpoint verifier key (NAME+ID+KEY) for workers and auditors
    to pin; on the registry host (it reads the private key file). Say where: --data-dir,
    --key-file or --config (or MODELWARD_DATA_DIR); ./.modelward is never assumed."""
    from modelward.attest.audit.signed_note import MalformedKey
    from modelward.registry.domains.audit.keyfile import (
        create_signer_file,
        default_key_name,
        read_signer_file,
    )
    from modelward.registry.settings import load_settings

    settings = load_settings(config, data_dir=data_dir, audit_checkpoint_key=key_file)
    # The key is the registry's, wherever its data dir is: never guessed as ./.modelward
    # (a key read or created there would be a stray, not the one the registry signs with).
    if not {"data_dir", "audit_checkpoint_key"} & settings.model_fields_set:
        fail(
            "audit key: which registry? give its --data-dir D (the one `modelward serve` "
            "runs with), --key-file F or --config FILE (or MODELWARD_DATA_DIR); the current "
            "directory's .modelward is never assumed",
            code=2,
        )
    path = settings.resolved_audit_checkpoint_key()
    if create:
        try:
            signer = create_signer_file(path, name or default_key_name())
        except FileExistsError:
            fail(f"{path} exists already; it is the registry's key (omit --create)")
        except MalformedKey as exc:
            fail(f"--name: {exc}", code=2)
        err_console.print(f"created the checkpoint key {path} (mode 0600)", markup=False)
    elif not path.exists():
        fail(
            f"no checkpoint key at {path}",
            hint=(
                f"is {settings.data_dir} the data dir the registry runs with? It creates "
                "its key there when it signs its first checkpoint (`modelward audit "
                "checkpoint` against it)"
                if key_file is None and "audit_checkpoint_key" not in settings.model_fields_set
                else "give the audit_checkpoint_key file the registry is configured with "
                "(a configured key is never created)"
            ),
        )
    else:
        signer = read_signer_file(path)
    typer.echo(signer.verifier.key_string)
