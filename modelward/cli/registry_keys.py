"""``modelward key register|list|revoke``: the signing public keys the registry knows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import err_console, fail
from modelward.cli.remote import AsJson, emit, print_json, registry_client, reported

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    pass

__all__ = ["Force", "key_list", "key_register", "key_revoke", "who_may_sign_previewed"]


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
    with reported(), registry_client() as client:
        answer = client.register_key(pubkey.read_text(encoding="utf-8"), principal)
    emit(answer, as_json, lambda a: f"registered key {a.get('keyid')}")


def key_list(as_json: AsJson = False) -> None:
    """List registered signing keys."""
    with reported(), registry_client() as client:
        keys = client.list_keys()
    emit(keys, as_json, lambda ks: "\n".join(_key_line(k) for k in ks) or "(no keys)")


Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Do it even when it leaves signed aliases, rollout plans or the quarantine short "
        "of their threshold (workers then refuse them until they are signed again; audited)",
    ),
]


def who_may_sign_previewed(
    client: Any,
    change: str,
    args: dict[str, str],
    *,
    force: bool,
    what: str,
    refused_json: dict[str, Any] | None = None,
) -> list[Any]:
    """Show what a change of who may sign would leave short of its threshold, asked of the
    registry's own check (``POST /v1/tuf/impact``; docs/operations.md#changing-who-may-sign),
    and exit 1 (nothing changed) when anything would be, unless ``force``: ``what`` says
    what was not done; ``refused_json`` (``--json``) is printed then, with
    ``signatures_lost``. Returns the items (each with its ``message``); the registry checks
    the change itself again when it is made."""
    preview = client.tuf_impact(change=change, args=args, refuse_if_lost=not force)
    lost: list[Any] = list(preview.get("lost") or [])
    short = show_signatures_lost(preview, going_ahead=force)
    if short and not force:
        if refused_json is not None:
            print_json({**refused_json, "signatures_lost": lost})
        fail(
            f"{what}: {short} signed target(s) would be short of their threshold "
            "(above); nothing was changed",
            hint="have them signed again first (`modelward trust resign ORG/NAME --key KEY`, "
            "docs/tuf.md#rotating-a-signers-key), or do it anyway with --force",
        )
    return lost


def show_signatures_lost(preview: dict[str, Any], *, going_ahead: bool) -> int:
    """Print each entry of a ``POST /v1/tuf/impact`` answer that would be short of its
    threshold, and how many the registry withheld (in repositories the caller may not
    read: counted, never named); returns how many in all."""
    lost: list[Any] = list(preview.get("lost") or [])
    withheld = int(preview.get("withheld") or 0)
    label = "warning" if going_ahead else "would unsign"
    for item in lost:
        err_console.print(f"{label}: {item.get('message')}", markup=False)
    if withheld:
        err_console.print(
            f"{label}: {withheld} more in repositories you may not read", markup=False
        )
    return len(lost) + withheld


def key_revoke(
    keyid: Annotated[str, typer.Argument(metavar="KEYID", help="Key id (hex)")],
    force: Force = False,
    yes: Annotated[bool, typer.Option("--yes", hidden=True, help="The same as --force")] = False,
    as_json: AsJson = False,
) -> None:
    """Revoke a registered signing key. First shows which aliases, rollout plans and
    quarantines would be left short of their threshold (re-sign them with your new key
    first: `modelward trust resign`); with any, nothing is revoked without --force."""
    force = force or yes
    with reported(as_json), registry_client() as client:
        lost = who_may_sign_previewed(
            client,
            "revoke_key",
            {"keyid": keyid},
            force=force,
            what=f"key {keyid} was not revoked",
            refused_json={"keyid": keyid, "revoked": False} if as_json else None,
        )
        client.revoke_key(keyid, force=force)
    emit(
        {"keyid": keyid, "revoked": True, "signatures_lost": lost},
        as_json,
        lambda a: f"revoked {a['keyid']}",
    )
