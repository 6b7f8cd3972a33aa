"""What the commands that talk to the registry share (docs/cli.md).

The REPO@REF arguments and their click callbacks (a malformed reference is a usage error,
exit 2, naming the argument and the form expected), ``--json`` and ``--passphrase-env``,
one ``RegistryClient`` built from the config file (``MODELWARD_URL``/``MODELWARD_TOKEN``
override it), the one way a client error is reported (``error: ...`` on stderr, exit 1),
and output: human lines by default, with ``--json`` one JSON document on stdout.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import fail, fail_with
from modelward.cli.refusals import describe_refusal
from modelward.client.config import cache_dir, parse_reference, parse_repo, resolve_settings
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
    "PassphraseEnvOpt",
    "RepoArg",
    "emit",
    "print_json",
    "registry_client",
    "repo_argument",
    "repo_or_alias",
    "repo_or_alias_argument",
    "reported",
    "valid_digest",
    "valid_ref",
]

PassphraseEnvOpt = Annotated[
    str | None,
    typer.Option("--passphrase-env", metavar="VAR", help="Key passphrase in env var VAR"),
]


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


def registry_client(workers: int = 4) -> RegistryClient:
    from modelward.client.api import RegistryClient, TransferOptions

    settings = resolve_settings()
    options = TransferOptions(workers=workers, state_dir=cache_dir())
    return RegistryClient(settings.url, settings.token, options=options)


@contextlib.contextmanager
def reported(as_json: bool = False) -> Iterator[None]:
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
        fail_with(exc)  # the registry unreachable: exit 3 (modelward.cli._EXIT_CODES)


def emit(value: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    """``value`` as one JSON document on stdout (``--json``), else ``human(value)``."""
    if as_json:
        typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
    else:
        text = human(value)
        if text:
            typer.echo(text)


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
