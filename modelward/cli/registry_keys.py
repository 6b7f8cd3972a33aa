"""``modelward key register|list|revoke``: the signing public keys the registry knows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from modelward.cli.common import console
from modelward.cli.remote import AsJson, emit, registry_client, reported

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


def key_revoke(keyid: Annotated[str, typer.Argument(metavar="KEYID", help="Key id (hex)")]) -> None:
    """Revoke a registered signing key."""
    with reported(), registry_client() as client:
        client.revoke_key(keyid)
    console.print(f"revoked {keyid}", markup=False)
