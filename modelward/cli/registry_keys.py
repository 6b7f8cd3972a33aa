"""``modelward key register|list|revoke``: the signing public keys the registry knows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import err_console, fail
from modelward.cli.remote import AsJson, emit, print_json, registry_client, reported

if TYPE_CHECKING:  # httpx loads with the client, inside the commands that send requests
    pass

__all__ = ["key_list", "key_register", "key_revoke"]


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


def key_revoke(
    keyid: Annotated[str, typer.Argument(metavar="KEYID", help="Key id (hex)")],
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            help="Revoke it even when aliases signed with it would lose their valid "
            "signatures (workers then refuse them until they are signed again)",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Revoke a registered signing key. First shows which aliases would lose their valid
    signatures (re-sign them with your new key first: `modelward trust resign`); with
    any, nothing is revoked without --yes."""
    with reported(as_json), registry_client() as client:
        preview = client.tuf_impact(revoke_key=keyid, refuse_if_lost=not yes)
        lost = preview.get("lost") or []
        for item in lost:
            err_console.print(
                f"{'warning' if yes else 'would unsign'}: {item.get('message')}", markup=False
            )
        if lost and not yes:
            if as_json:
                print_json({"keyid": keyid, "revoked": False, "signatures_lost": lost})
            fail(
                f"key {keyid} was not revoked: {len(lost)} signed target(s) would lose their "
                "valid signatures (above)",
                hint="re-sign them with the new key first (`modelward trust resign ORG/NAME "
                "--key NEW.key`, docs/tuf.md#rotating-a-signers-key), or revoke anyway with "
                "--yes",
            )
        client.revoke_key(keyid)
    emit(
        {"keyid": keyid, "revoked": True, "signatures_lost": lost},
        as_json,
        lambda a: f"revoked {a['keyid']}",
    )
