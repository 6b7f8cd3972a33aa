"""Client-side registry commands on ``modelward``.

login, push, alias get|set|history|rollback, bundle show, approve [--withdraw], quarantine,
audit log|verify|checkpoint|key, repo create, key register|list|revoke. Each builds one
``RegistryClient`` from the config file (``MODELWARD_URL``/``MODELWARD_TOKEN`` override it) and
prints the server's refusal (code, message, detail) with exit 1; ``audit key`` instead reads
the registry's checkpoint key file on its host.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.attest.cli._apps import bundle_app, key_app
from modelward.attest.cli._common import console, err_console, fail, show_progress
from modelward.registry._client_config import (
    cache_dir,
    parse_reference,
    resolve_settings,
    save_login,
)
from modelward.registry.client import (
    APIError,
    Conflict,
    RegistryClient,
    RegistryClientError,
    TransferOptions,
    Unauthorized,
)

__all__ = ["register_client"]

alias_app = typer.Typer(
    name="alias", help="Read and move aliases (REPO@ALIAS).", no_args_is_help=True
)
audit_app = typer.Typer(name="audit", help="Read and verify the audit log.", no_args_is_help=True)
repo_app = typer.Typer(name="repo", help="Manage repositories.", no_args_is_help=True)


def _client(workers: int = 4) -> RegistryClient:
    settings = resolve_settings()
    options = TransferOptions(workers=workers, state_dir=cache_dir())
    return RegistryClient(settings.url, settings.token, options=options)


@contextlib.contextmanager
def _reported() -> Iterator[None]:
    """Turn client errors into ``error: ...`` on stderr and exit 1."""
    try:
        yield
    except Conflict as exc:
        current = exc.current
        if current is None:  # not a stale alias version (quarantined, already withdrawn...)
            fail(str(exc))
        fail(str(exc), hint=f"the alias is now {json.dumps(current)}; read it and retry")
    except Unauthorized as exc:
        fail(str(exc), hint="check the token: `modelward login URL --token T`")
    except APIError as exc:
        fail(str(exc))
    except RegistryClientError as exc:
        fail(str(exc))


def _print_json(value: Any) -> None:
    console.print_json(json.dumps(value, default=str))


# -- login / push --------------------------------------------------------------------------
def login(
    url: Annotated[str, typer.Argument(help="Registry URL, e.g. http://127.0.0.1:8700")],
    token: Annotated[str, typer.Option("--token", help="API token", prompt=True, hide_input=True)],
    check: Annotated[bool, typer.Option(help="Ask the registry who the token is first")] = True,
) -> None:
    """Save URL and token to the per-user config file (mode 0600)."""
    if check:
        with _reported(), RegistryClient(url, token) as client:
            who = client.whoami()
        console.print(f"logged in as {who.get('principal')} ({who.get('role')})")
    path = save_login(url, token)
    console.print(f"saved {path}")


def _key_signer(
    key: Path, directory: Path, passphrase_env: str | None
) -> Callable[[Any], Sequence[bytes]]:
    """Sign SLSA provenance about the built bundle, as ``modelward bundle sign --key`` does."""
    from modelward.attest.cli.keys import passphrase_from_env
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.keys import load_private_key

    # the key first: a wrong passphrase fails before hashing gigabytes
    private = load_private_key(key, passphrase_from_env(passphrase_env))
    started = datetime.now(UTC)

    def sign(built: Any) -> Sequence[bytes]:
        from modelward.attest.provenance import make_provenance
        from modelward.attest.statement import PredicateType, make_statement

        predicate = make_provenance(
            started_on=started,
            finished_on=datetime.now(UTC),
            serving=_serving_inputs(directory, built),
        )
        subject = directory.resolve().name or "bundle"
        payload = make_statement(
            subject, built.manifest.digest, PredicateType.PROVENANCE, predicate
        )
        return [sign_envelope(payload, [private])]

    return sign


def _serving_inputs(directory: Path, built: Any) -> dict[str, Any] | None:
    """The bundle spec (modelward.yaml) exactly as hashed into the manifest, or None."""
    import hashlib

    from modelward.attest.errors import DigestMismatch
    from modelward.attest.spec import MAX_SPEC_BYTES, SPEC_FILENAME, load_spec

    try:
        layer = built.manifest.layer(SPEC_FILENAME)
    except KeyError:
        return None
    with (directory / SPEC_FILENAME).open("rb") as fh:
        data = fh.read(MAX_SPEC_BYTES + 1)
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != layer.digest:
        raise DigestMismatch(SPEC_FILENAME, layer.digest, actual)
    spec = load_spec(data, source=str(directory / SPEC_FILENAME))
    dumped: dict[str, Any] = spec.model_dump(mode="json", exclude={"probes"})
    return dumped


def push(
    directory: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="Bundle dir")],
    repo: Annotated[str, typer.Argument(help="ORG/NAME")],
    *,
    alias: Annotated[str | None, typer.Option(help="Move this alias to the pushed bundle")] = None,
    attestation: Annotated[
        list[Path] | None, typer.Option(help="Attestation file to attach (repeatable)")
    ] = None,
    sign: Annotated[bool, typer.Option(help="Sign a provenance statement with --key")] = False,
    key: Annotated[Path | None, typer.Option(help="Private key for --sign")] = None,
    passphrase_env: Annotated[
        str | None,
        typer.Option("--passphrase-env", metavar="VAR", help="Key passphrase in env var VAR"),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Reason recorded with the alias move")] = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Parallel uploads")] = 4,
) -> None:
    """Upload missing blobs, then the manifest and attestations, then move the alias."""
    if sign and key is None:
        fail("--sign needs --key PRIVATE_KEY", code=2)
    attestations = [p.read_bytes() for p in attestation or []]
    signer = _key_signer(key, directory, passphrase_env) if sign and key is not None else None
    with _reported(), _client(workers) as client:
        if show_progress():
            result = _push_with_bar(
                client,
                directory,
                repo,
                alias=alias,
                attestations=attestations,
                sign=signer,
                reason=reason,
            )
        else:
            result = client.push(
                directory, repo, alias=alias, attestations=attestations, sign=signer, reason=reason
            )
    console.print(f"pushed {repo}@{result.digest}")
    console.print(f"blobs: {result.uploaded} uploaded, {result.skipped} already present")
    names = {f"sha256:{hashlib.sha256(data).hexdigest()}": str(path)
             for path, data in zip(attestation or [], attestations, strict=True)}
    for item in result.ignored:
        shown = names.get(item.get("sha256", ""), item.get("sha256", "?"))
        err_console.print(f"warning: attestation {shown} not recorded: {item.get('reason')}",
                          markup=False)
    if result.alias is not None:
        console.print(
            f"{repo}@{result.alias['alias']} -> {result.digest} (v{result.alias['version']})"
        )


def _push_with_bar(client: RegistryClient, directory: Path, repo: str, **kwargs: Any) -> Any:
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err_console,
    ) as bar:
        task = bar.add_task("uploading", total=None)
        return client.push(
            directory,
            repo,
            progress=lambda n: bar.advance(task, n),
            on_total=lambda total: bar.update(task, total=total),
            **kwargs,
        )


# -- aliases -------------------------------------------------------------------------------
@alias_app.command("get")
def alias_get(ref: Annotated[str, typer.Argument(help="REPO@ALIAS")]) -> None:
    """Show the digest and version an alias points at."""
    with _reported(), _client() as client:
        r = parse_reference(ref, require="alias")
        _print_json(client.get_alias(r.repo, str(r.alias)))


@alias_app.command("set")
def alias_set(
    ref: Annotated[str, typer.Argument(help="REPO@ALIAS")],
    digest: Annotated[str, typer.Argument(help="sha256:<hex>")],
    reason: Annotated[str | None, typer.Option(help="Recorded in the history")] = None,
    expected_version: Annotated[
        int | None, typer.Option(help="Compare-and-swap on this version (default: read it now)")
    ] = None,
) -> None:
    """Move an alias to a digest (compare-and-swap on its version)."""
    with _reported(), _client() as client:
        r = parse_reference(ref, require="alias")
        d = parse_reference(f"{r.repo}@{digest}", require="digest").digest
        _print_json(
            client.set_alias(
                r.repo, str(r.alias), str(d), expected_version=expected_version, reason=reason
            )
        )


@alias_app.command("history")
def alias_history(ref: Annotated[str, typer.Argument(help="REPO@ALIAS")]) -> None:
    """Every move of an alias: version, from -> to, who, when, why, rollback."""
    with _reported(), _client() as client:
        r = parse_reference(ref, require="alias")
        _print_json(client.alias_history(r.repo, str(r.alias)))


@alias_app.command("rollback")
def alias_rollback(
    ref: Annotated[str, typer.Argument(help="REPO@ALIAS")],
    digest: Annotated[str | None, typer.Argument(help="Earlier digest (default: previous)")] = None,
    reason: Annotated[str | None, typer.Option(help="Recorded in the history")] = None,
) -> None:
    """Set an alias back to an earlier digest, recorded as a rollback."""
    with _reported(), _client() as client:
        r = parse_reference(ref, require="alias")
        d = parse_reference(f"{r.repo}@{digest}", require="digest").digest if digest else None
        _print_json(client.rollback(r.repo, str(r.alias), d, reason=reason))


# -- bundles, approvals, quarantine --------------------------------------------------------
def bundle_show(
    ref: Annotated[str, typer.Argument(help="REPO@ALIAS or REPO@sha256:<hex>")],
) -> None:
    """Show a bundle: digest, quarantine/tombstone state, manifest, attestations."""
    with _reported(), _client() as client:
        r = parse_reference(ref)
        digest = client.resolve(r)
        record = dict(client.get_bundle(r.repo, digest))
        manifest_b64 = record.pop("manifest", None)
        record["manifest"] = None  # withheld: a quarantined digest, for publishers and readers
        if isinstance(manifest_b64, str):
            import base64

            record["manifest"] = json.loads(base64.b64decode(manifest_b64))
        record["attestations"] = [
            {k: v for k, v in a.items() if k != "data"}
            for a in client.list_attestations(r.repo, digest)
        ]
        _print_json(record)


def approve(
    ref: Annotated[str, typer.Argument(help="REPO@sha256:<hex>")],
    alias: Annotated[str, typer.Option(help="The alias this approval is for")],
    withdraw: Annotated[
        bool, typer.Option("--withdraw", help="Withdraw your own approval instead (needs --reason)")
    ] = False,
    reason: Annotated[
        str | None, typer.Option(help="Why the approval is withdrawn (recorded)")
    ] = None,
) -> None:
    """Approve a bundle for a protected alias (reviewers; not the publisher), or withdraw
    your own approval with --withdraw --reason: it no longer counts."""
    if reason is not None and not withdraw:
        fail("--reason is recorded only with --withdraw", code=2)
    if withdraw:
        if reason is None or not reason.strip():
            fail("--withdraw needs --reason TEXT", code=2)
        with _reported(), _client() as client:
            r = parse_reference(ref, require="digest")
            _print_json(client.withdraw_approval(r.repo, str(r.digest), alias, reason))
        return
    with _reported(), _client() as client:
        r = parse_reference(ref, require="digest")
        _print_json(client.approve(r.repo, str(r.digest), alias))


def quarantine(
    ref: Annotated[str, typer.Argument(help="REPO@sha256:<hex>")],
    reason: Annotated[str, typer.Option(help="Why (recorded and shown to loaders)")],
) -> None:
    """Quarantine a bundle: unloadable everywhere, unassignable to aliases."""
    with _reported(), _client() as client:
        r = parse_reference(ref, require="digest")
        _print_json(client.quarantine(r.repo, str(r.digest), reason))


# -- audit ---------------------------------------------------------------------------------
@audit_app.command("log")
def audit_log(
    after: Annotated[int, typer.Option(min=0, help="Events after this sequence number")] = 0,
    limit: Annotated[int, typer.Option(min=1, help="At most this many events")] = 100,
) -> None:
    """Print audit events as JSON lines."""
    with _reported(), _client() as client:
        answer = client.audit(after=after, limit=limit)
    for event in answer.get("events", []):
        console.print(json.dumps(event, sort_keys=True), markup=False)


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
) -> None:
    """Recompute the audit hash chain and Merkle tree; name the first broken link (exit 1).

    With --since and --key, also prove the log only grew since that checkpoint: the new
    checkpoint is signed by the pinned key, a consistency proof links it to the saved one, and
    the events re-hash to both roots.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from modelward.registry._client_audit import verify_database, verify_through_api
    from modelward.registry.audit_chain import BrokenChain
    from modelward.registry.errors import RegistryError
    from modelward.registry.signed_note import MalformedKey, parse_verifier_key

    if since is not None and key is None:
        fail(
            "--since needs --key NAME+ID+KEY: a checkpoint proves nothing without the key "
            "that signed it",
            hint="`modelward audit key` on the registry host prints it",
            code=2,
        )
    try:
        verifier = parse_verifier_key(key) if key else None
    except MalformedKey as exc:
        fail(f"--key: {exc}", code=2)
    saved = since.read_bytes() if since is not None else None
    try:
        if database_url:
            report = verify_database(database_url, verifier=verifier, since=saved)
        else:
            with _reported(), _client() as client:
                report = verify_through_api(client, verifier=verifier, since=saved)
    except BrokenChain as exc:
        fail(str(exc))
    except RegistryError as exc:  # a rewritten log, a failed proof, a bad checkpoint
        fail(str(exc))
    except (ValueError, TypeError) as exc:
        fail(f"unreadable audit event: {exc}")
    except SQLAlchemyError as exc:
        fail(f"cannot read the audit log from the database: {exc.__class__.__name__}: {exc}")
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
    from modelward.registry._client_audit import checkpoint_from_answer
    from modelward.registry.audit_checkpoint import open_checkpoint, unsafe_read_checkpoint
    from modelward.registry.errors import RegistryError
    from modelward.registry.signed_note import MalformedKey, parse_verifier_key

    try:
        verifier = parse_verifier_key(key) if key else None
    except MalformedKey as exc:
        fail(f"--key: {exc}", code=2)
    with _reported(), _client() as client:
        answer = client.audit_checkpoint()
    try:
        note = checkpoint_from_answer(answer)
        checkpoint = (
            open_checkpoint(note, verifier) if verifier else unsafe_read_checkpoint(note)
        )
    except (RegistryError, ValueError) as exc:
        fail(f"the registry's checkpoint is refused: {exc}")
    if out is None:
        typer.echo(note.decode(), nl=False)
    else:
        temporary = out.with_name(f".{out.name}.tmp")
        temporary.write_bytes(note)
        temporary.replace(out)
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
    to pin; on the registry host (it reads the private key file)."""
    from modelward.registry.domains.audit.keyfile import (
        create_signer_file,
        default_key_name,
        read_signer_file,
    )
    from modelward.registry.settings import load_settings
    from modelward.registry.signed_note import MalformedKey

    settings = load_settings(config, data_dir=data_dir, audit_checkpoint_key=key_file)
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
            f"no checkpoint key at {path} yet",
            hint="the registry creates it on first use, or run with --create [--name NAME]",
        )
    else:
        signer = read_signer_file(path)
    typer.echo(signer.verifier.key_string)


# -- repositories and keys -----------------------------------------------------------------
@repo_app.command("create")
def repo_create(
    name: Annotated[str, typer.Argument(help="ORG/NAME")],
    policy: Annotated[Path | None, typer.Option(exists=True, dir_okay=False)] = None,
) -> None:
    """Create a repository (optionally with its own policy file)."""
    text = policy.read_text(encoding="utf-8") if policy else None
    with _reported(), _client() as client:
        _print_json(client.create_repo(name, text))


@repo_app.command("add-publisher")
def repo_add_publisher(
    name: Annotated[str, typer.Argument(help="ORG/NAME")],
    principal: Annotated[str, typer.Argument(help="The principal who may publish to it")],
) -> None:
    """Let a principal publish to a repository (admins only)."""
    with _reported(), _client() as client:
        _print_json(client.add_publisher(name, principal))


def key_register(
    pubkey: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Public key PEM")],
    principal: Annotated[str | None, typer.Option(help="Owner (admins only)")] = None,
) -> None:
    """Register a signing public key for yourself (or, as admin, for a principal)."""
    with _reported(), _client() as client:
        _print_json(client.register_key(pubkey.read_text(encoding="utf-8"), principal))


def key_list() -> None:
    """List registered signing keys."""
    with _reported(), _client() as client:
        _print_json(client.list_keys())


def key_revoke(keyid: Annotated[str, typer.Argument(help="Key id (hex)")]) -> None:
    """Revoke a registered signing key."""
    with _reported(), _client() as client:
        client.revoke_key(keyid)
    console.print(f"revoked {keyid}")


def register_client(app: typer.Typer) -> None:
    """Add the client-side commands to the root app and to attest's bundle/key groups."""
    app.command("login")(login)
    app.command("push")(push)
    app.command("approve")(approve)
    app.command("quarantine")(quarantine)
    app.add_typer(alias_app)
    app.add_typer(audit_app)
    app.add_typer(repo_app)
    bundle_app.command("show")(bundle_show)
    key_app.command("register")(key_register)
    key_app.command("list")(key_list)
    key_app.command("revoke")(key_revoke)
