"""The TUF keys the registry holds online: one PKCS#8 file per role, mode 0600
(docs/tuf.md#keys).

``snapshot.key`` and ``timestamp.key`` are always online: the registry re-signs those roles
on every change and before they expire. ``root.key`` and ``targets.key`` exist only in the
embedded default (``serve`` with no ``trust init``), which says loudly that its root key is
online; with a proper ceremony they stay on the admins' offline machines.

``OnlineKeys`` is the interface a KMS could implement later: it hands out python-tuf
signers by role and never exposes key bytes.
"""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from securesystemslib.signer import Signer

from modelward.attest.errors import AttestError
from modelward.attest.keys import generate_private_key
from modelward.attest.tuf import tuf_signer
from modelward.registry.domains.signing.tuf.seals import KEY_BYTES, ROW_KEY, RowSeals
from modelward.registry.errors import RegistryError
from modelward.registry.secret_files import SecretFileError, create_secret_file, read_secret_file
from modelward.registry.settings import Settings

__all__ = [
    "ALIAS_KEY",
    "EMBEDDED_ROLES",
    "ONLINE_ROLES",
    "ROW_KEY",
    "OnlineKeys",
    "TufKeyUnavailable",
    "next_role",
    "tuf_keys",
]

ONLINE_ROLES = ("snapshot", "timestamp")
# the key of the ``ORG:NAME@online`` roles: aliases a repository's policy lets the registry
# move on its own (``online: true`` alias rules); always online, never in root
ALIAS_KEY = "aliases"
EMBEDDED_ROLES = ("root", "targets")
MAX_KEY_FILE_BYTES = 16_384


class TufKeyUnavailable(RegistryError):  # noqa: N818 - named after the HTTP outcome
    """An online TUF key file is missing, unreadable, open to others or not a key."""

    status = 503
    code = "tuf_key_unavailable"


class OnlineKeys:
    """The TUF signing keys in ``directory`` (``ROLE.key``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, role: str) -> Path:
        return self.directory / f"{role}.key"

    def has(self, role: str) -> bool:
        return self.path(role).exists()

    def create(self, role: str) -> None:
        """A new Ed25519 key for ``role``, unless another process created one first."""
        key = generate_private_key("ed25519")
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # keys only: 0700
        with contextlib.suppress(FileExistsError):  # theirs is the key: all read one file
            create_secret_file(self.path(role), pem)

    def signer(self, role: str) -> Signer:
        """The signer for ``role``; raises TufKeyUnavailable naming the file and why."""
        path = self.path(role)
        try:
            pem = read_secret_file(path, max_bytes=MAX_KEY_FILE_BYTES, what=f"TUF {role} key")
            key = serialization.load_pem_private_key(pem, password=None)
            return tuf_signer(key, source=str(path))
        except SecretFileError as exc:
            raise TufKeyUnavailable(str(exc)) from exc
        except (ValueError, TypeError, UnsupportedAlgorithm, AttestError) as exc:
            raise TufKeyUnavailable(f"{path} is not a TUF {role} key: {exc}") from exc

    def create_row_key(self) -> bool:
        """A new random row seal key (``rows.key``), unless one exists; True if this call
        made it (registry.domains.signing.tuf.seals)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            create_secret_file(self.path(ROW_KEY), secrets.token_bytes(KEY_BYTES))
        except FileExistsError:
            return False
        return True

    def row_seals(self) -> RowSeals:
        """The seals made with ``rows.key``; raises TufKeyUnavailable naming the file when
        it is missing, open to others or too short: nothing is delegated without it."""
        path = self.path(ROW_KEY)
        try:
            return RowSeals(read_secret_file(path, max_bytes=4096, what="row seal key"))
        except SecretFileError as exc:
            raise TufKeyUnavailable(str(exc)) from exc
        except ValueError as exc:
            raise TufKeyUnavailable(f"{path}: {exc}") from exc

    def promote(self, role: str) -> None:
        """Make ``ROLE.next.key`` (made for a rotation, ``next_role``) ``role``'s key."""
        self.path(next_role(role)).replace(self.path(role))

    def forget(self, role: str) -> None:
        """Delete ``role``'s key file (a root or targets key that went offline)."""
        self.path(role).unlink(missing_ok=True)

    def signers(self) -> dict[str, list[Signer]]:
        """Every role this registry holds a key for."""
        return {
            role: [self.signer(role)] for role in (*EMBEDDED_ROLES, *ONLINE_ROLES) if self.has(role)
        }


def next_role(role: str) -> str:
    """The name a rotation's new key for ``role`` is kept under until the new root that
    lists it is installed."""
    return f"{role}.next"


def tuf_keys(settings: Settings) -> OnlineKeys:
    """The registry's online TUF keys: ``tuf_keys_dir`` (default ``<data_dir>/tuf-keys``)."""
    return OnlineKeys(settings.resolved_tuf_keys_dir())
