"""Client-side registry commands on ``modelward``.

login, push, alias get|set|history|rollback, bundle show, approve [--withdraw], quarantine,
audit log|verify|checkpoint|key, repo create, key register|list|revoke. Each builds one
``RegistryClient`` from the config file (``MODELWARD_URL``/``MODELWARD_TOKEN`` override it) and
prints the server's refusal (code, message, detail) with exit 1; ``audit key`` instead reads
the registry's checkpoint key file on its host.

Output (docs/cli.md): human lines by default; with ``--json`` one JSON document on stdout, in
the shape docs/cli.md pins, and every message, warning and progress bar on stderr. Exit codes:
0 done, 1 refused or failed, 2 usage error (a malformed REPO@REF among them: the click
parameter callbacks below turn it into one, naming the argument and the form expected).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli._apps import bundle_app, key_app
from modelward.cli.common import console, err_console, fail, read_bounded, show_progress
from modelward.cli.refusals import describe_refusal
from modelward.client.config import (
    cache_dir,
    normalize_url,
    parse_reference,
    parse_repo,
    resolve_settings,
    save_login,
)
from modelward.client.errors import (
    APIError,
    ConflictError,
    InvalidReference,
    PreflightRefused,
    RegistryClientError,
    UnauthorizedError,
)

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    from modelward.client.api import RegistryClient

__all__ = [
    "AliasRef",
    "AnyRef",
    "AsJson",
    "DigestRef",
    "RepoArg",
    "emit",
    "register_client",
    "repo_argument",
    "repo_or_alias",
    "repo_or_alias_argument",
    "valid_digest",
    "valid_ref",
]

PassphraseEnvOpt = Annotated[
    str | None,
    typer.Option("--passphrase-env", metavar="VAR", help="Key passphrase in env var VAR"),
]
alias_app = typer.Typer(
    name="alias", help="Read and move aliases (REPO@ALIAS).", no_args_is_help=True
)
audit_app = typer.Typer(name="audit", help="Read and verify the audit log.", no_args_is_help=True)
repo_app = typer.Typer(name="repo", help="Manage repositories.", no_args_is_help=True)


# -- arguments: a malformed reference is a usage error (exit 2) ------------------------------
def _reference_check(require: str | None) -> Callable[[str | None], str | None]:
    def check(value: str | None) -> str | None:
        if value is not None:
            try:
                parse_reference(value, require=require)
            except InvalidReference as exc:
                raise typer.BadParameter(str(exc)) from None
        return value

    return check


def valid_ref(value: str | None) -> str | None:
    """Click callback: REPO@ALIAS, REPO:TAG or REPO@sha256:<hex>, else a usage error naming
    them."""
    return _reference_check(None)(value)


def _valid_alias_ref(value: str | None) -> str | None:
    return _reference_check("alias")(value)


def _valid_digest_ref(value: str | None) -> str | None:
    return _reference_check("digest")(value)


def repo_argument(value: str | None) -> str | None:
    """Click callback: ORG/NAME, else a usage error."""
    if value is not None:
        try:
            parse_repo(value)
        except InvalidReference as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def repo_or_alias(value: str | None) -> tuple[str | None, str | None]:
    """``ORG/NAME`` (no alias), ``REPO@ALIAS`` or ``REPO:TAG`` as ``(repo, alias)``, through
    the one reference grammar; ``(None, None)`` for None. Raises ``InvalidReference``."""
    if value is None:
        return None, None
    if "@" not in value and ":" not in value:
        return parse_repo(value), None
    reference = parse_reference(value, require="alias")
    return reference.repo, reference.alias


def repo_or_alias_argument(value: str | None) -> str | None:
    """Click callback: ORG/NAME, REPO@ALIAS or REPO:TAG, else a usage error."""
    try:
        repo_or_alias(value)
    except InvalidReference as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


def valid_digest(value: str | None) -> str | None:
    """Click callback: sha256:<64 lowercase hex>, else a usage error."""
    if value is not None:
        try:
            parse_reference(f"a/b@{value}", require="digest")
        except InvalidReference:
            raise typer.BadParameter(
                f"{value!r} is not a digest: expected sha256: followed by 64 lowercase hex digits"
            ) from None
    return value


AliasRef = Annotated[
    str,
    typer.Argument(metavar="REPO@ALIAS", help="REPO@ALIAS or REPO:TAG", callback=_valid_alias_ref),
]
DigestRef = Annotated[
    str,
    typer.Argument(metavar="REPO@DIGEST", help="REPO@sha256:<hex>", callback=_valid_digest_ref),
]
AnyRef = Annotated[
    str,
    typer.Argument(
        metavar="REPO@REF",
        help="REPO@ALIAS, REPO:TAG or REPO@sha256:<hex>",
        callback=valid_ref,
    ),
]
RepoArg = Annotated[
    str, typer.Argument(metavar="ORG/NAME", help="ORG/NAME", callback=repo_argument)
]
AsJson = Annotated[
    bool,
    typer.Option(
        "--json", help="One JSON document on stdout (shape: docs/cli.md); messages on stderr"
    ),
]


def _client(workers: int = 4) -> RegistryClient:
    from modelward.client.api import RegistryClient, TransferOptions

    settings = resolve_settings()
    options = TransferOptions(workers=workers, state_dir=cache_dir())
    return RegistryClient(settings.url, settings.token, options=options)


@contextlib.contextmanager
def _reported(as_json: bool = False) -> Iterator[None]:
    """Turn client errors into ``error: ...`` on stderr and exit 1. A ``gates_failed``
    refusal prints its gates as a table unless ``as_json`` (then the whole detail, as JSON)."""
    try:
        yield
    except ConflictError as exc:
        current = exc.current
        if current is None:  # not a stale alias version (quarantined, already withdrawn...)
            fail(str(exc))
        fail(str(exc), hint=f"the alias is now {json.dumps(current)}; read it and retry")
    except UnauthorizedError as exc:
        fail(str(exc), hint="check the token: `modelward login URL --token T`")
    except APIError as exc:
        fail(str(exc) if as_json else describe_refusal(exc))
    except PreflightRefused:
        raise  # push words it itself
    except RegistryClientError as exc:
        fail(str(exc))


def emit(value: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    """``value`` as one JSON document on stdout (``--json``), else ``human(value)``."""
    if as_json:
        typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
    else:
        text = human(value)
        if text:
            typer.echo(text)


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


# -- login / push --------------------------------------------------------------------------
def login(
    url: Annotated[
        str, typer.Argument(metavar="URL", help="Registry URL, e.g. http://127.0.0.1:8700")
    ],
    token: Annotated[str, typer.Option("--token", help="API token", prompt=True, hide_input=True)],
    check: Annotated[bool, typer.Option(help="Ask the registry who the token is first")] = True,
) -> None:
    """Save URL and token to the per-user config file (mode 0600)."""
    try:
        url, note = normalize_url(url)
    except RegistryClientError as exc:
        fail(str(exc), code=2)
    if note:
        err_console.print(f"note: {note}", markup=False)
    if check:
        from modelward.client.api import RegistryClient

        with _reported(), RegistryClient(url, token) as client:
            who = client.whoami()
        console.print(
            f"logged in to {url} as {who.get('principal')} ({who.get('role')})", markup=False
        )
    path = save_login(url, token)
    console.print(f"saved {path}", markup=False)


def _key_signer(
    key: Path,
    directory: Path,
    passphrase_env: str | None,
    source: str | None = None,
    source_revision: str | None = None,
) -> tuple[Callable[[Any], Sequence[bytes]], Any]:
    """Sign SLSA provenance about the built bundle, as ``modelward bundle sign --key`` does;
    returns the signer and a TrustSet holding its public key (for the preflight)."""
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.keys import load_private_key, trusted_key
    from modelward.attest.trust import TrustSet
    from modelward.cli.keys import passphrase_from_env

    # the key first: a wrong passphrase fails before hashing gigabytes
    private = load_private_key(key, passphrase_from_env(passphrase_env))
    started = datetime.now(UTC)

    def sign(built: Any) -> Sequence[bytes]:
        from modelward.attest.provenance import make_provenance
        from modelward.attest.statement import PredicateType, make_statement

        predicate = make_provenance(
            started_on=started,
            finished_on=datetime.now(UTC),
            source_uri=source,
            source_revision=source_revision,
            serving=_serving_inputs(directory, built),
        )
        subject = directory.resolve().name or "bundle"
        payload = make_statement(
            subject, built.manifest.digest, PredicateType.PROVENANCE, predicate
        )
        return [sign_envelope(payload, [private])]

    own = TrustSet(keys=(trusted_key("your --key", private.public_key()),))
    return sign, own


def _check_source(source: str | None, source_revision: str | None) -> None:
    """--source/--source-revision as ``bundle sign`` takes them: together, pinned (exit 2)."""
    from modelward.attest.provenance import make_provenance

    if (source is None) != (source_revision is None):
        fail("--source and --source-revision go together", code=2)
    now = datetime.now(UTC)
    try:
        make_provenance(
            started_on=now, finished_on=now, source_uri=source, source_revision=source_revision
        )
    except ValueError as exc:
        fail(str(exc), code=2)


def _serving_inputs(directory: Path, built: Any) -> dict[str, Any] | None:
    """The bundle spec (modelward.yaml) exactly as hashed into the manifest, or None."""
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


_UNSIGNED_HINT = (
    "nothing vouches for this bundle: sign provenance as you push with --sign --key KEY "
    "(its public key registered: `modelward key register KEY.pub`), add --source URI "
    "--source-revision REV when the policy lists sources, or pass --attestation FILE"
)


def push(
    directory: Annotated[
        Path,
        typer.Argument(metavar="DIR", exists=True, file_okay=False, help="The bundle directory"),
    ],
    repo: RepoArg,
    *,
    alias: Annotated[
        str | None,
        typer.Option(
            metavar="ALIAS",
            help="Move this alias to the pushed bundle (a protected alias "
            "short of approvals: propose the move for its reviewers to sign)",
        ),
    ] = None,
    attestation: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="FILE",
            exists=True,
            dir_okay=False,
            help="Attestation file to attach (repeatable)",
        ),
    ] = None,
    sign: Annotated[
        bool, typer.Option("--sign", help="Sign SLSA provenance for the bundle with --key")
    ] = False,
    key: Annotated[
        Path | None, typer.Option(metavar="KEY", help="Private key (PEM) for --sign")
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source", metavar="URI", help="--sign: the source the bundle came from (hf://, git)"
        ),
    ] = None,
    source_revision: Annotated[
        str | None,
        typer.Option("--source-revision", metavar="REV", help="--sign: the source's 40-hex commit"),
    ] = None,
    reason: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Reason recorded with the alias move")
    ] = None,
    workers: Annotated[int, typer.Option(metavar="N", min=1, max=64, help="Parallel uploads")] = 4,
    ignore_path: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore-path",
            metavar="PATH",
            help="Leave PATH (a file or directory, relative to DIR) out of the bundle, as "
            "`bundle sign --format oms --ignore-path` did (repeatable)",
        ),
    ] = None,
    preflight: Annotated[
        bool,
        typer.Option(
            "--preflight/--no-preflight",
            help="Scan and judge the bundle under the repository's policy before uploading",
        ),
    ] = True,
    as_json: AsJson = False,
) -> None:
    """Upload missing blobs, then the manifest and attestations, then move the alias.

    Before a byte is sent, the bundle is scanned and judged locally under the repository's
    policy with the registry's own verifier; what the registry would refuse is refused here.
    """
    if sign and key is None:
        fail("--sign needs --key PRIVATE_KEY", code=2)
    if key is not None and not sign:
        fail("--key signs with --sign; add --sign", code=2)
    if (source is not None or source_revision is not None) and not sign:
        fail("--source and --source-revision describe the provenance --sign signs", code=2)
    _check_source(source, source_revision)
    attestations = [p.read_bytes() for p in attestation or []]
    signer, own = (
        _key_signer(key, directory, passphrase_env, source, source_revision)
        if sign and key is not None
        else (None, None)
    )
    names = {
        f"sha256:{hashlib.sha256(data).hexdigest()}": str(path)
        for path, data in zip(attestation or [], attestations, strict=True)
    }
    try:
        with _reported(), _client(workers) as client:
            kwargs: dict[str, Any] = {
                "alias": alias,
                "attestations": attestations,
                "sign": signer,
                "reason": reason,
                "preflight": preflight,
                "own_trust": own,
                "exclude": tuple(ignore_path or ()),
                "propose_alias": True,
            }
            try:
                if show_progress():
                    result = _push_with_bar(client, directory, repo, **kwargs)
                else:
                    result = client.push(directory, repo, **kwargs)
            except APIError as exc:
                if exc.code == "policy_denied" and not attestations and signer is None:
                    fail(str(exc), hint=_UNSIGNED_HINT)
                raise
            if result.alias is not None and key is not None:
                # the key that signed the provenance signs the alias move too
                from modelward.cli.trust import load_key

                _sign_move(client, result.alias, repo, str(alias), load_key(key, passphrase_env))
    except PreflightRefused as exc:
        err_console.print("error:", style="bold red", end=" ")
        err_console.print(str(exc), markup=False)
        err_console.print(
            f"note: judged here under the policy of {exc.repo} before uploading; nothing was "
            "sent (--no-preflight lets the registry judge it)",
            markup=False,
        )
        if exc.unsigned:
            err_console.print("hint:", style="dim", end=" ")
            err_console.print(_UNSIGNED_HINT, markup=False)
        raise typer.Exit(1) from None
    except typer.Exit:
        raise
    _report_push(repo, result, names, as_json)


def _sign_with(repo: str, state: dict[str, Any]) -> str | None:
    """The command that signs a move the registry made but no TUF role signed (an alias left
    UNSIGNED: workers resolving through TUF do not see it); None when signed or not moved."""
    if state.get("pending") or state.get("signed", True) or not state.get("digest"):
        return None
    proposal = state.get("proposal")
    if proposal is not None:
        return f"modelward trust sign {proposal} --key KEY"
    return (
        "modelward trust adopt (an admin: no role is delegated the alias yet), then "
        "modelward trust sign ID --key KEY (IDs: modelward alias pending)"
    )


def warn_unsigned(repo: str, state: dict[str, Any]) -> str | None:
    """``warning: ...`` on stderr when a move left ``repo@alias`` UNSIGNED; returns the
    signing command (for ``--json``'s ``sign_with``), None when there is nothing to sign."""
    command = _sign_with(repo, state)
    if command is not None:
        err_console.print(
            f"warning: {repo}@{state.get('alias')} now names {state.get('digest')} on the "
            "registry's word only: UNSIGNED, so workers resolving through TUF do not see "
            f"it; sign the move with: {command}",
            markup=False,
        )
    return command


def _report_push(repo: str, result: Any, names: dict[str, str], as_json: bool) -> None:
    checked = result.preflight
    if result.alias is not None:
        result.alias["sign_with"] = warn_unsigned(repo, result.alias)
    if checked is not None and checked.skipped:
        err_console.print(f"note: not checked before uploading: {checked.skipped}", markup=False)
    ignored = []
    for item in result.ignored:
        shown = names.get(item.get("sha256", ""), item.get("sha256", "?"))
        err_console.print(
            f"warning: attestation {shown} not recorded: {item.get('reason')}", markup=False
        )
        ignored.append(
            {
                "sha256": item.get("sha256"),
                "file": names.get(item.get("sha256", "")),
                "reason": item.get("reason"),
            }
        )
    if as_json:
        _print_json(
            {
                "repository": repo,
                "digest": result.digest,
                "uploaded": result.uploaded,
                "skipped": result.skipped,
                "bytes": result.total_bytes,
                "decision": result.decision,
                "alias": result.alias,
                "ignored_attestations": ignored,
                "preflight": (
                    "off" if checked is None else "skipped" if checked.skipped else "passed"
                ),
            }
        )
        return
    console.print(f"pushed {repo}@{result.digest}", markup=False)
    console.print(
        f"blobs: {result.uploaded} uploaded, {result.skipped} already present", markup=False
    )
    if result.alias is not None and result.alias.get("pending"):
        console.print(_alias_line(repo)(result.alias), markup=False)
    elif result.alias is not None:
        console.print(
            f"{repo}@{result.alias['alias']} -> {result.digest} (v{result.alias['version']})",
            markup=False,
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
def _alias_line(repo: str) -> Callable[[Any], str]:
    def line(state: Any) -> str:
        pending = state.get("pending")
        if pending:
            from modelward.cli.trust import describe

            return (
                f"proposed {describe(pending)}\nreviewers sign it with: modelward approve "
                f"{repo}@{pending.get('to_digest')} --alias {state.get('alias')} --key KEY"
            )
        if not state.get("digest"):
            return f"{repo}@{state.get('alias')} is not set (v{state.get('version', 0)})"
        unsigned = (
            ""
            if state.get("signed", True)
            else (
                "  UNSIGNED: the registry's word only; workers resolving through TUF do not see it "
                "(`modelward alias pending`)"
            )
        )
        return (
            f"{repo}@{state.get('alias')} -> {state.get('digest')} "
            f"(v{state.get('version')}){unsigned}"
        )

    return line


@alias_app.command("get")
def alias_get(ref: AliasRef, as_json: AsJson = False) -> None:
    """Show the digest and version an alias points at."""
    r = parse_reference(ref, require="alias")
    with _reported(), _client() as client:
        state = client.get_alias(r.repo, str(r.alias))
    emit(state, as_json, _alias_line(r.repo))


@alias_app.command("set")
def alias_set(
    ref: AliasRef,
    digest: Annotated[
        str, typer.Argument(metavar="DIGEST", help="sha256:<hex>", callback=valid_digest)
    ],
    *,
    reason: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Recorded in the history")
    ] = None,
    expected_version: Annotated[
        int | None,
        typer.Option(metavar="N", help="Compare-and-swap on this version (default: read it now)"),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Sign the move with your key (publishers' aliases)"),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Evaluate every check of the move and report each; move and propose nothing "
            "(exit 1 when the move would be refused)",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Move an alias to a digest (compare-and-swap on its version); a protected alias short
    of approvals becomes a proposal its reviewers sign."""
    from modelward.cli.trust import load_key

    r = parse_reference(ref, require="alias")
    if dry_run:
        if key is not None or expected_version is not None:
            raise typer.BadParameter(
                "a dry run moves nothing: it takes neither --key nor --expected-version",
                param_hint="--dry-run",
            )
        with _reported(as_json), _client() as client:
            report = client.dry_run_alias(r.repo, str(r.alias), digest)
        emit(report, as_json, _dry_run_lines)
        if not report.get("allowed"):
            raise typer.Exit(1)
        return
    private = load_key(key, passphrase_env) if key is not None else None
    with _reported(as_json), _client() as client:
        state = client.set_alias(
            r.repo,
            str(r.alias),
            digest,
            expected_version=expected_version,
            reason=reason,
            propose=True,
        )
        _sign_move(client, state, r.repo, str(r.alias), private)
    emit(state, as_json, _alias_line(r.repo))


def _dry_run_lines(report: Any) -> str:
    """A dry run's checks, one line each, and its verdict."""
    lines = [
        f"{'ok  ' if c.get('passed') else 'FAIL'} ({c.get('step')}) {c.get('check')}: "
        f"{c.get('message')}"
        for c in report.get("checks", [])
    ]
    ref = f"{report.get('repository')}@{report.get('alias')}"
    verdict = "would move" if report.get("allowed") else "would be refused"
    lines.append(f"dry run: {ref} -> {report.get('digest')} {verdict}; nothing moved")
    return "\n".join(lines)


def _sign_move(
    client: RegistryClient, state: dict[str, Any], repo: str, alias: str, private: Any
) -> None:
    """With ``--key``: sign the proposal a move made (an alias the publishers' keys sign)."""
    from modelward.cli.trust import sign_proposal

    proposal = state.get("proposal")
    if private is None or proposal is None or state.get("signed"):
        return
    signed = sign_proposal(
        client,
        int(proposal),
        private,
        expect_target=f"{repo}/aliases/{alias}",
        expect_digest=state.get("digest"),
    )
    state["signed"] = signed.get("state") == "published"


def _history_lines(repo: str, alias: str) -> Callable[[Any], str]:
    def lines(moves: Any) -> str:
        out = []
        for m in moves:
            kind = "rollback" if m.get("rollback") else "move"
            why = f"  ({m['reason']})" if m.get("reason") else ""
            out.append(
                f"v{m.get('version')}  {m.get('at')}  {m.get('actor')}  {kind}  "
                f"{m.get('from_digest') or '(unset)'} -> {m.get('to_digest')}{why}"
            )
        return "\n".join(out) or f"{repo}@{alias} never moved"

    return lines


@alias_app.command("history")
def alias_history(ref: AliasRef, as_json: AsJson = False) -> None:
    """Every move of an alias: version, from -> to, who, when, why, rollback."""
    r = parse_reference(ref, require="alias")
    with _reported(), _client() as client:
        moves = client.alias_history(r.repo, str(r.alias))
    emit(moves, as_json, _history_lines(r.repo, str(r.alias)))


@alias_app.command("rollback")
def alias_rollback(
    ref: AliasRef,
    digest: Annotated[
        str | None,
        typer.Argument(
            metavar="DIGEST", help="Earlier digest (default: previous)", callback=valid_digest
        ),
    ] = None,
    *,
    reason: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Recorded in the history")
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Sign the move with your key (publishers' aliases)"),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Set an alias back to an earlier digest, recorded as a rollback (a protected alias:
    proposed, for its reviewers to sign)."""
    from modelward.cli.trust import load_key

    r = parse_reference(ref, require="alias")
    private = load_key(key, passphrase_env) if key is not None else None
    with _reported(as_json), _client() as client:
        state = client.rollback(r.repo, str(r.alias), digest, reason=reason, propose=True)
        _sign_move(client, state, r.repo, str(r.alias), private)
    emit(state, as_json, _alias_line(r.repo))


# -- bundles, approvals, quarantine --------------------------------------------------------
def _bundle_state(record: Any) -> str:
    if record.get("tombstoned"):
        return "tombstoned"
    if record.get("quarantined"):
        return f"quarantined ({record.get('quarantine_reason')}, {record.get('quarantined_at')})"
    return "live"


def _bundle_lines(repo: str) -> Callable[[Any], str]:
    def lines(record: Any) -> str:
        from modelward.attest.manifest import FILEPATH_ANNOTATION

        out = [
            f"{repo}@{record.get('digest')}",
            f"  state:        {_bundle_state(record)}",
            f"  pushed by:    {record.get('created_by')} at {record.get('created_at')}",
        ]
        decision = record.get("decision") or {}
        signers = ", ".join(str(s.get("name")) for s in decision.get("signers") or []) or "-"
        out.append(f"  signers:      {signers}")
        manifest = record.get("manifest")
        if manifest is None:
            out.append("  files:        (manifest withheld: quarantined)")
        else:
            layers = manifest.get("layers") or []
            size = sum(int(layer.get("size", 0)) for layer in layers)
            out.append(f"  files:        {len(layers)} ({size} bytes)")
            for layer in layers:
                path = (layer.get("annotations") or {}).get(FILEPATH_ANNOTATION, "?")
                out.append(f"    {layer.get('digest')}  {layer.get('size'):>12}  {path}")
        atts = record.get("attestations") or []
        out.append(f"  attestations: {len(atts)}")
        from modelward.cli.attestation import describe

        out += [f"    {describe(a)}" for a in atts]
        return "\n".join(out)

    return lines


def bundle_show(ref: AnyRef, as_json: AsJson = False) -> None:
    """Show a bundle: digest, quarantine/tombstone state, manifest, attestations."""
    r = parse_reference(ref)
    with _reported(), _client() as client:
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
    record["repository"] = r.repo
    emit(record, as_json, _bundle_lines(r.repo))


def _approval_line(repo: str) -> Callable[[Any], str]:
    def line(answer: Any) -> str:
        approvers = ", ".join(answer.get("approvers") or []) or "none"
        verb = "your approval withdrawn" if answer.get("withdrawn") else "approved"
        unsigned = answer.get("unsigned_proposals") or []
        taken = (
            f"; your signature taken off pending proposal(s) {', '.join(map(str, unsigned))}"
            if unsigned
            else ""
        )
        return (
            f"{repo}@{answer.get('digest')} for {answer.get('alias')}: {verb}{taken}; "
            f"approvers: {approvers}"
        )

    return line


def approve(
    ref: DigestRef,
    *,
    alias: Annotated[str, typer.Option(metavar="ALIAS", help="The alias this approval is for")],
    withdraw: Annotated[
        bool, typer.Option("--withdraw", help="Withdraw your own approval instead (needs --reason)")
    ] = False,
    reason: Annotated[
        str | None,
        typer.Option(metavar="TEXT", help="Why the approval is withdrawn (recorded)"),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Sign the pending move with your key: the approval workers verify (docs/tuf.md)",
        ),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Approve a bundle for a protected alias (reviewers; not the publisher), or withdraw
    your own approval with --withdraw --reason: it no longer counts."""
    if reason is not None and not withdraw:
        fail("--reason is recorded only with --withdraw", code=2)
    r = parse_reference(ref, require="digest")
    if key is not None and not withdraw:
        _approve_signed(
            r.repo, str(r.digest), alias, key, passphrase_env=passphrase_env, as_json=as_json
        )
        return
    if withdraw:
        if reason is None or not reason.strip():
            fail("--withdraw needs --reason TEXT", code=2)
        with _reported(), _client() as client:
            answer = client.withdraw_approval(r.repo, str(r.digest), alias, reason)
        emit(answer, as_json, _approval_line(r.repo))
        return
    with _reported(), _client() as client:
        answer = client.approve(r.repo, str(r.digest), alias)
        current = _alias_now(client, r.repo, alias)
    if current is not None and current.get("digest") == r.digest and current.get("signed"):
        # a late approval: the move is signed already, workers see it; nothing to sign
        answer["signed"], answer["sign_with"] = True, None
        emit(answer, as_json, _approval_line(r.repo))
        return
    # a keyless approval counts on the registry only: nothing signed says it to workers
    answer["signed"] = False
    answer["sign_with"] = f"modelward approve {r.repo}@{r.digest} --alias {alias} --key KEY"
    err_console.print(
        f"warning: approved on the registry's word only: no TUF signature, so {r.repo}@"
        f"{alias} stays UNSIGNED for workers resolving through TUF once it moves; sign the "
        f"pending move with: {answer['sign_with']}",
        markup=False,
    )
    emit(answer, as_json, _approval_line(r.repo))


def _alias_now(client: RegistryClient, repo: str, alias: str) -> dict[str, Any] | None:
    """``repo@alias`` as the registry shows it, None when it does not exist."""
    from modelward.client.errors import NotFoundError

    try:
        return dict(client.get_alias(repo, alias))
    except NotFoundError:
        return None


def _approve_signed(
    repo: str, digest: str, alias: str, key: Path, *, passphrase_env: str | None, as_json: bool
) -> None:
    """``approve --key``: sign the pending proposal moving ``repo@alias`` to ``digest``."""
    from modelward.cli.trust import find_pending, load_key, sign_proposal

    private = load_key(key, passphrase_env)
    target = f"{repo}/aliases/{alias}"
    with _reported(), _client() as client:
        pending = find_pending(client, repo=repo, alias=alias, target=target, digest=digest)
        if pending is None:
            current = _alias_now(client, repo, alias)
            if current is not None and current.get("digest") == digest:
                # a late approval: the threshold was met before this signature came
                signed = bool(current.get("signed"))
                emit(
                    {"repository": repo, "alias": alias, "digest": digest, "already": True,
                     "signed": signed},
                    as_json,
                    lambda _: f"{repo}@{alias} already points to {digest}"
                    + (" (signed)" if signed else " (not signed yet)")
                    + ": nothing to approve",
                )  # fmt: skip
                return
            fail(
                f"no pending proposal moves {repo}@{alias} to {digest}",
                hint=f"the publisher proposes it: modelward alias set {repo}@{alias} {digest}",
            )
        answer = sign_proposal(
            client, int(pending["id"]), private, expect_target=target, expect_digest=digest
        )
    from modelward.cli.trust import signed_line

    emit(answer, as_json, signed_line)


def quarantine(
    ref: DigestRef,
    reason: Annotated[
        str, typer.Option(metavar="TEXT", help="Why (recorded and shown to loaders)")
    ],
    key: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Sign the quarantine with your key, so workers "
            "verifying through TUF refuse the bundle too",
        ),
    ] = None,
    passphrase_env: PassphraseEnvOpt = None,
    as_json: AsJson = False,
) -> None:
    """Quarantine a bundle: unloadable everywhere, unassignable to aliases."""
    from modelward.cli.trust import find_pending, load_key, sign_proposal

    r = parse_reference(ref, require="digest")
    private = load_key(key, passphrase_env) if key is not None else None
    target = "quarantine/" + str(r.digest).removeprefix("sha256:")
    with _reported(), _client() as client:
        try:
            record = client.quarantine(r.repo, str(r.digest), reason)
            proposal = record.get("proposal")
        except ConflictError:
            # already quarantined on the registry's word: sign its pending proposal
            pending = (
                find_pending(client, repo=None, alias=None, target=target, digest=str(r.digest))
                if private is not None
                else None
            )
            if pending is None:
                raise
            record, proposal = dict(client.get_bundle(r.repo, str(r.digest))), pending["id"]
        signed = None
        if private is not None and proposal is not None:
            signed = sign_proposal(
                client, int(proposal), private, expect_target=target, expect_digest=str(r.digest)
            )
    shown = {
        "repository": r.repo,
        "digest": record.get("digest"),
        "quarantined": record.get("quarantined"),
        "quarantine_reason": record.get("quarantine_reason"),
        "quarantined_at": record.get("quarantined_at"),
        "tombstoned": record.get("tombstoned"),
        "signed": signed is not None and signed.get("state") == "published",
    }
    emit(
        shown,
        as_json,
        lambda q: (
            f"quarantined {q['repository']}@{q['digest']} at {q['quarantined_at']}: "
            f"{q['quarantine_reason']}\nno worker will load it and no alias can point at it"
        ),
    )


# -- audit ---------------------------------------------------------------------------------
@audit_app.command("log")
def audit_log(
    after: Annotated[
        int, typer.Option(metavar="SEQ", min=0, help="Events after this sequence number")
    ] = 0,
    limit: Annotated[int, typer.Option(metavar="N", min=1, help="At most this many events")] = 100,
    as_json: AsJson = False,
) -> None:
    """Print audit events, one line each (--json: one document with next_after)."""
    with _reported(), _client() as client:
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

    from modelward.attest.audit.signed_note import MalformedKey, parse_verifier_key
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

        _print_json(
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
    from modelward.attest.audit.signed_note import MalformedKey, parse_verifier_key
    from modelward.attest.errors import AuditVerificationError
    from modelward.client.audit import checkpoint_from_answer

    try:
        verifier = parse_verifier_key(key) if key else None
    except MalformedKey as exc:
        fail(f"--key: {exc}", code=2)
    with _reported(), _client() as client:
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


# -- repositories and keys -----------------------------------------------------------------
def _repo_lines(repo: Any) -> str:
    publishers = ", ".join(repo.get("publishers") or []) or "(none)"
    own = "its own" if repo.get("policy_yaml") else "the registry's default"
    return (
        f"{repo.get('name')}\n  publishers: {publishers}\n  policy: {own}\n"
        f"  created: {repo.get('created_at')}"
    )


def _repo_json(repo: Any) -> dict[str, Any]:
    keep = ("name", "org", "publishers", "policy_yaml", "created_at")
    return {k: repo.get(k) for k in keep}


def _policy_text(path: Path) -> str:
    """The policy file ``path`` as text, refused (exit 2) by its size before a byte is read
    when it is larger than the registry accepts (``attest.policy.MAX_POLICY_BYTES``)."""
    from modelward.attest.policy import MAX_POLICY_BYTES

    try:
        size = path.stat().st_size
    except OSError as exc:
        fail(f"--policy {path}: cannot read: {exc.strerror or exc}", code=2)
    if size > MAX_POLICY_BYTES:
        fail(
            f"--policy {path}: {size} bytes, larger than the {MAX_POLICY_BYTES} bytes the "
            "registry accepts for a policy; nothing was sent",
            code=2,
        )
    data = read_bounded(path, "--policy", MAX_POLICY_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"--policy {path}: not UTF-8 text (byte {exc.start})", code=2)


@repo_app.command("create")
def repo_create(
    name: RepoArg,
    policy: Annotated[
        Path | None,
        typer.Option(metavar="FILE", exists=True, dir_okay=False, help="Its own policy (YAML)"),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Create a repository (optionally with its own policy file)."""
    text = _policy_text(policy) if policy else None
    with _reported(), _client() as client:
        created = client.create_repo(name, text)
    emit(_repo_json(created), as_json, _repo_lines)


@repo_app.command("add-publisher")
def repo_add_publisher(
    name: RepoArg,
    principal: Annotated[
        str, typer.Argument(metavar="PRINCIPAL", help="The principal who may publish to it")
    ],
    as_json: AsJson = False,
) -> None:
    """Let a principal publish to a repository (admins only)."""
    with _reported(), _client() as client:
        repo = client.add_publisher(name, principal)
    emit(_repo_json(repo), as_json, _repo_lines)


def _key_line(item: Any) -> str:
    state = "revoked" if item.get("revoked") else "active"
    return f"{item.get('keyid')}  {item.get('principal')}  {state}"


def key_register(
    pubkey: Annotated[
        Path,
        typer.Argument(metavar="PUBLIC_KEY", exists=True, dir_okay=False, help="Public key PEM"),
    ],
    principal: Annotated[
        str | None, typer.Option(metavar="NAME", help="Owner (admins only)")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Register a signing public key for yourself (or, as admin, for a principal)."""
    with _reported(), _client() as client:
        answer = client.register_key(pubkey.read_text(encoding="utf-8"), principal)
    emit(answer, as_json, lambda a: f"registered key {a.get('keyid')}")


def key_list(as_json: AsJson = False) -> None:
    """List registered signing keys."""
    with _reported(), _client() as client:
        keys = client.list_keys()
    emit(keys, as_json, lambda ks: "\n".join(_key_line(k) for k in ks) or "(no keys)")


def key_revoke(keyid: Annotated[str, typer.Argument(metavar="KEYID", help="Key id (hex)")]) -> None:
    """Revoke a registered signing key."""
    with _reported(), _client() as client:
        client.revoke_key(keyid)
    console.print(f"revoked {keyid}", markup=False)


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
