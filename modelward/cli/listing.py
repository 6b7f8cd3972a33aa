"""Finding things: ``modelward repo list``, ``modelward bundle list REPO``, ``modelward alias
list REPO`` (docs/registry.md#finding-things).

Each asks the registry (``RegistryClient.list_*``, the logged-in URL and token) for at most
``--limit`` rows, from ``--cursor`` on, a page at a time, and prints a table, or with
``--json`` one JSON document on stdout: the API's own shape, ``{<rows>, next}``, where
``next`` is the cursor to continue from (null at the end). Messages go to stderr. A refusal
exits 1 with the server's message; a malformed ``org/name`` exits 2 before anything is sent.
Heavy imports (the HTTP client) happen inside the commands.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from modelward.client.api import RegistryClient

__all__ = ["alias_list", "bundle_list", "repo_list"]

MAX_PAGE = 1000  # the registry's largest page (registry.domains.repos.listing.MAX_PAGE)

Limit = Annotated[
    int,
    typer.Option(
        "--limit", metavar="N", min=1, help="Show at most this many (then: --cursor NEXT)"
    ),
]
Cursor = Annotated[
    str | None,
    typer.Option("--cursor", metavar="NEXT", help="Continue after a previous listing (its next)"),
]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout")]


def _fail(message: str, *, code: int = 1, hint: str | None = None) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _registry() -> Iterator[RegistryClient]:
    """The logged-in client; client errors become ``error: ...`` and exit 1 (2 for a
    malformed reference)."""
    from modelward.client.api import (
        InvalidReference,
        RegistryClient,
        RegistryClientError,
        UnauthorizedError,
    )
    from modelward.client.config import resolve_settings

    try:
        settings = resolve_settings()
        with RegistryClient(settings.url, settings.token) as client:
            yield client
    except InvalidReference as exc:
        _fail(str(exc), code=2)
    except UnauthorizedError as exc:
        _fail(str(exc), hint="check the token: `modelward login URL --token T`")
    except RegistryClientError as exc:
        from modelward.cli.common import fail_with

        fail_with(exc)


def _collect(
    fetch: Callable[[int, str | None], dict[str, Any]], key: str, limit: int, cursor: str | None
) -> dict[str, Any]:
    """Up to ``limit`` rows from ``cursor`` on, page after page: ``{key: rows, next}``."""
    rows: list[Any] = []
    while True:
        answer = fetch(min(limit - len(rows), MAX_PAGE), cursor)
        rows += answer.get(key) or []
        following = answer.get("next")
        cursor = following if isinstance(following, str) else None
        if cursor is None or len(rows) >= limit:
            return {key: rows, "next": cursor}


def _emit(
    doc: dict[str, Any],
    key: str,
    *,
    as_json: bool,
    columns: Sequence[tuple[str, Callable[[dict[str, Any]], str]]],
    empty: str,
    again: str,
) -> None:
    if as_json:
        typer.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    rows = doc[key]
    if not rows:
        typer.echo(empty, err=True)
    else:
        table = [[title for title, _ in columns]]
        table += [[cell(row) for _, cell in columns] for row in rows]
        widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
        for line in table:
            typer.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    if doc.get("next"):
        typer.echo(f"more: {again} --cursor {doc['next']}", err=True)


def _when(value: Any) -> str:
    return str(value or "-").replace("T", " ").split(".")[0].removesuffix("Z")


def repo_list(
    *,
    org: Annotated[
        str | None, typer.Option("--org", metavar="ORG", help="Only this org's repositories")
    ] = None,
    publishable: Annotated[
        bool, typer.Option("--publishable", help="Only those you may publish to")
    ] = False,
    limit: Limit = 100,
    cursor: Cursor = None,
    as_json: AsJson = False,
) -> None:
    """List the repositories you may read, by name (with --publishable: those you may push
    to and move aliases in)."""
    with _registry() as client:
        doc = _collect(
            lambda n, c: client.list_repos(limit=n, cursor=c, org=org, publishable=publishable),
            "repositories",
            limit,
            cursor,
        )
    flags = (f" --org {org}" if org else "") + (" --publishable" if publishable else "")
    _emit(
        doc,
        "repositories",
        as_json=as_json,
        columns=(
            ("REPOSITORY", lambda r: str(r["name"])),
            ("BUNDLES", lambda r: str(r["bundles"])),
            ("ALIASES", lambda r: str(r["aliases"])),
            ("YOU MAY PUBLISH", lambda r: "yes" if r.get("may_publish") else "no"),
            ("CREATED", lambda r: _when(r.get("created_at"))),
        ),
        empty="no repositories" + (" you may publish to" if publishable else ""),
        again=f"modelward repo list{flags}",
    )


def bundle_list(
    repo: Annotated[str, typer.Argument(metavar="ORG/NAME", help="The repository")],
    *,
    limit: Limit = 100,
    cursor: Cursor = None,
    as_json: AsJson = False,
) -> None:
    """List a repository's bundles, newest first: digest, state (live, quarantined,
    tombstoned) and the aliases pointing at each."""
    from modelward.client.config import parse_repo

    with _registry() as client:
        parse_repo(repo)
        doc = _collect(
            lambda n, c: client.list_bundles(repo, limit=n, cursor=c), "bundles", limit, cursor
        )
    _emit(
        {"repository": repo, **doc},
        "bundles",
        as_json=as_json,
        columns=(
            ("DIGEST", lambda b: str(b["digest"])),
            ("STATE", lambda b: str(b["state"])),
            ("ALIASES", lambda b: ",".join(b.get("aliases") or []) or "-"),
            ("PUSHED BY", lambda b: str(b.get("created_by") or "-")),
            ("PUSHED", lambda b: _when(b.get("created_at"))),
        ),
        empty=f"{repo} has no bundles",
        again=f"modelward bundle list {repo}",
    )


def alias_list(
    repo: Annotated[str, typer.Argument(metavar="ORG/NAME", help="The repository")],
    *,
    limit: Limit = 100,
    cursor: Cursor = None,
    as_json: AsJson = False,
) -> None:
    """List a repository's aliases, by name: the digest and version each points at, and the
    state of that bundle."""
    from modelward.client.config import parse_repo

    with _registry() as client:
        parse_repo(repo)
        doc = _collect(
            lambda n, c: client.list_aliases(repo, limit=n, cursor=c), "aliases", limit, cursor
        )
    _emit(
        {"repository": repo, **doc},
        "aliases",
        as_json=as_json,
        columns=(
            ("ALIAS", lambda a: str(a["alias"])),
            ("VERSION", lambda a: str(a["version"])),
            ("BUNDLE STATE", lambda a: str(a["bundle_state"])),
            ("SIGNED", lambda a: "yes" if a.get("signed") else "UNSIGNED"),
            ("DIGEST", lambda a: str(a["digest"])),
            ("MOVED", lambda a: _when(a.get("updated_at"))),
        ),
        empty=f"{repo} has no aliases",
        again=f"modelward alias list {repo}",
    )
