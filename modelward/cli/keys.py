"""``modelward key generate``: a new signing key pair (docs/attestations.md#keys)."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from modelward.attest.keys import generate_private_key, keyid, save_private_key
from modelward.cli._apps import key_app
from modelward.cli.common import console, fail

__all__ = ["generate", "passphrase_from_env"]


class KeyType(StrEnum):
    ED25519 = "ed25519"
    ECDSA_P256 = "ecdsa-p256"


def passphrase_from_env(var: str | None) -> bytes | None:
    """The passphrase held in environment variable ``var`` (None when no var is named).

    A named variable that is unset or empty is an error: silently signing or writing an
    unencrypted key because of a typo in a variable name would be worse.
    """
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        fail(
            f"passphrase variable {var} is unset or empty",
            code=2,
            hint=f"export {var}=... (the passphrase never goes on the command line)",
        )
    return value.encode("utf-8")


@key_app.command("generate")
def generate(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Private key file to create (mode 0600); public key at FILE.pub.",
        ),
    ],
    key_type: Annotated[
        KeyType,
        typer.Option(
            "--type",
            case_sensitive=False,
            help="Key type (OMS signing with model_signing needs ecdsa-p256).",
        ),
    ] = KeyType.ED25519,
    passphrase_env: Annotated[
        str | None,
        typer.Option(
            "--passphrase-env",
            metavar="VAR",
            help="Encrypt the private key with the passphrase in environment variable VAR.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace existing key files at FILE and FILE.pub.")
    ] = False,
) -> None:
    """Generate a signing key pair: PKCS#8 private key and SubjectPublicKeyInfo public key."""
    passphrase = passphrase_from_env(passphrase_env)
    if out.is_dir():
        fail(f"{out} is a directory; --out names the private key file to create", code=2)
    if not out.parent.is_dir():
        fail(f"directory {out.parent} does not exist")
    key = generate_private_key("ecdsa-p256" if key_type is KeyType.ECDSA_P256 else "ed25519")
    try:
        pub_path = save_private_key(key, out, passphrase, overwrite=force)
    except ValueError as exc:
        fail(str(exc), hint="pass --force to replace the existing key files")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    console.print(f"keyid:       {keyid(key.public_key())}", markup=False)
    console.print(f"type:        {key_type.value}", markup=False)
    console.print(f"private key: {out}" + (" (encrypted)" if passphrase else ""), markup=False)
    console.print(f"public key:  {pub_path}", markup=False)
