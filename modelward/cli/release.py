"""``modelward release record|verify``: one signed record per promotion (docs/release.md).

``record`` gathers, through the registry client, everything that decided one version of an
alias (``modelward.client.release``), signs it as an in-toto statement in a DSSE envelope
(``attest.release``) and writes it, with a Markdown and/or HTML rendering. ``verify``
re-checks a record offline against a pinned TUF root: no network.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from modelward.cli.common import fail, read_bounded
from modelward.cli.remote import AliasRef, AsJson, PassphraseEnvOpt

__all__ = ["record", "release_app", "verify"]

release_app = typer.Typer(
    name="release",
    help="Release records: one signed document per promotion, verified offline.",
    no_args_is_help=True,
)

MAX_ROOT_BYTES = 1 << 20


def _write(path: Path, data: bytes, what: str) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        fail(f"{what} {path}: cannot write: {exc.strerror or exc}")


def _console_css() -> str:
    """The console's stylesheet, read as a file the package ships: the standalone page looks
    like the console without this client command importing the server."""
    sheet = resources.files("modelward").joinpath("registry", "ui", "static", "console.css")
    return sheet.read_text(encoding="utf-8")


@release_app.command("record")
def record(
    ref: AliasRef,
    *,
    key: Annotated[
        Path,
        typer.Option(
            "--key",
            metavar="FILE",
            exists=True,
            dir_okay=False,
            help="Private key that signs the record: a key of the alias's TUF role "
            "or of the top-level targets (checked before anything is written)",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            metavar="FILE",
            dir_okay=False,
            help="Where to write the signed record (a DSSE envelope)",
        ),
    ],
    version: Annotated[
        int | None,
        typer.Option(
            "--version",
            metavar="N",
            min=1,
            help="The alias's signed move to record, counted in its TUF role's versions "
            "(default: the latest)",
        ),
    ] = None,
    trust_root: Annotated[
        Path | None,
        typer.Option(
            "--trust-root",
            metavar="FILE",
            help="Check the key against the chain from this root.json (default: the "
            "registry's first root version as it serves it)",
        ),
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown", metavar="FILE.md", dir_okay=False, help="Also write a Markdown rendering"
        ),
    ] = None,
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html", metavar="FILE.html", dir_okay=False, help="Also write an HTML rendering"
        ),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Export the signed release record of REPO@ALIAS at one of its signed moves (TUF role
    versions; default: the latest)."""
    from modelward.attest.errors import AttestError
    from modelward.attest.release import (
        PinnedRootError,
        RecordKeyRefused,
        ReleaseRecordInvalid,
        build_predicate,
        make_record_statement,
        render_html,
        render_markdown,
        rollout_lines,
        verify_record_key,
        write_record,
    )
    from modelward.cli.remote import registry_client, reported
    from modelward.cli.trust import load_key
    from modelward.client.config import parse_reference
    from modelward.client.release import ReleaseInputError, collect_release

    private = load_key(key, passphrase_env)  # a bad key: nothing is fetched
    pinned = (
        None if trust_root is None else read_bounded(trust_root, "--trust-root", MAX_ROOT_BYTES)
    )
    target = parse_reference(ref, require="alias")
    assert target.alias is not None  # noqa: S101 - required above
    with reported(), registry_client() as client:
        try:
            inputs = collect_release(client, target.repo, target.alias, version)
        except ReleaseInputError as exc:
            fail(str(exc))
    try:
        predicate = build_predicate(**inputs)
    except (AttestError, ValueError, KeyError, TypeError) as exc:  # the registry's bytes
        fail(
            f"{target.repo}@{target.alias}: the registry's data for the record is "
            f"malformed: {type(exc).__name__}: {exc}"
        )
    statement = make_record_statement(predicate)
    # the signer rule of `release verify` (check 3), applied before anything is written
    try:
        verify_record_key(statement, pinned or inputs["roots"][0], private.public_key())
    except RecordKeyRefused as exc:
        fail(f"--key {key}: {exc}", code=2)
    except PinnedRootError as exc:
        where = f"--trust-root {trust_root}" if trust_root else "the registry's 1.root.json"
        fail(f"{where}: {exc}", code=2 if trust_root else 1)
    except ReleaseRecordInvalid as exc:
        fail(
            f"{target.repo}@{target.alias}: the registry's TUF metadata for the record does "
            f"not verify: {exc}"
        )
    data = write_record(statement, [private])
    _write(out, data, "--out")
    if markdown is not None:
        _write(markdown, render_markdown(predicate).encode("utf-8"), "--markdown")
    if html_out is not None:
        page = render_html(predicate, css=_console_css())
        _write(html_out, page.encode("utf-8"), "--html")
    rec = predicate["record"]
    if as_json:
        answer = {
            "file": str(out),
            "repository": rec["repository"],
            "alias": rec["alias"],
            "version": rec["version"],
            "digest": rec["digest"],
            "rollback": predicate["rollback"],
            "evaluations": len(predicate["evaluations"]),
            "baselines": len(predicate["baselines"]),
            "replays": len(predicate["replays"]),
            "audit_events": len(predicate["audit"]["events"]),
            "rollouts": [
                {
                    "rollout_id": r["rollout_id"],
                    "outcome": r["outcome"],
                    "steps": len(r["steps"]),
                    "abort_reason": r["abort_reason"],
                }
                for r in predicate["rollouts"]
            ],
            "markdown": str(markdown) if markdown else None,
            "html": str(html_out) if html_out else None,
        }
        typer.echo(json.dumps(answer, indent=2, sort_keys=True))
        return
    typer.echo(
        f"wrote the release record of {rec['repository']}@{rec['alias']} version "
        f"{rec['version']} ({rec['digest']}) to {out}"
    )
    if predicate["rollouts"] or predicate["later_rollouts"]:
        for line in rollout_lines(predicate):
            typer.echo(f"  {line}")


@release_app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A release record file")],
    *,
    trust_root: Annotated[
        Path,
        typer.Option(
            "--trust-root", metavar="FILE", help="The registry's root.json, pinned out of band"
        ),
    ],
    public_key: Annotated[
        list[Path] | None,
        typer.Option(
            "--public-key",
            metavar="PEM",
            help="A key you trust to have signed the record, besides the keys of the "
            "top-level targets and the alias's role (repeatable)",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Re-check a release record offline against a trust root (no network)."""
    from modelward.attest.errors import KeyError_
    from modelward.attest.keys import load_public_key
    from modelward.attest.release import (
        PinnedRootError,
        RecordLimits,
        ReleaseRecordInvalid,
        verify_record,
    )

    limits = RecordLimits()
    root = read_bounded(trust_root, "--trust-root", MAX_ROOT_BYTES)
    keys = []
    for pem in public_key or []:
        try:
            keys.append(load_public_key(read_bounded(pem, "--public-key", 1 << 16), str(pem)))
        except KeyError_ as exc:
            fail(f"--public-key {exc}", code=2)
    data = read_bounded(file, "record", limits.max_bytes)
    try:
        verified = verify_record(data, root, keys, limits)
    except PinnedRootError as exc:
        fail(f"--trust-root {trust_root}: {exc}", code=2)
    except ReleaseRecordInvalid as exc:
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "file": str(file),
                        "valid": False,
                        "check": exc.check,
                        "check_name": exc.check_name,
                        "field": exc.field,
                        "error": str(exc),
                    },
                    indent=2,
                    sort_keys=True,
                )
            )
        fail(f"{file}: {exc}")
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "file": str(file),
                    "valid": True,
                    "repository": verified.repository,
                    "alias": verified.alias,
                    "version": verified.version,
                    "digest": verified.digest,
                    "signers": list(verified.signers),
                    "notes": list(verified.notes),
                },
                indent=2,
                sort_keys=True,
            )
        )
        return
    typer.echo(
        f"{file}: valid: {verified.repository}@{verified.alias} version "
        f"{verified.version} is {verified.digest}, signed by "
        f"{', '.join(k[:16] for k in verified.signers)}"
    )
    for note in verified.notes:
        typer.echo(f"  note: {note}")
