"""``modelward login`` and ``modelward push``: save the registry's URL and token; upload a
bundle (judged locally first), optionally signing its provenance, and move an alias.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.aliases import alias_line, sign_move, warn_unsigned
from modelward.cli.common import console, err_console, fail, show_progress
from modelward.cli.remote import (
    AsJson,
    PassphraseEnvOpt,
    RepoArg,
    print_json,
    registry_client,
    reported,
)
from modelward.client.config import normalize_url, save_login
from modelward.client.errors import APIError, PreflightRefused, RegistryClientError

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    from modelward.client.api import RegistryClient

__all__ = ["login", "push"]


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

        with reported(), RegistryClient(url, token) as client:
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
        with reported(), registry_client(workers) as client:
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

                sign_move(client, result.alias, repo, str(alias), load_key(key, passphrase_env))
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
        print_json(
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
    if result.alias is not None and (result.alias.get("pending") or result.alias.get("unchanged")):
        console.print(alias_line(repo)(result.alias), markup=False)
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
