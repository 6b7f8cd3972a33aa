"""The registry's checkpoint signing key: a file outside the database
(docs/registry.md#checkpoints).

The file holds one line, the signer key string ``PRIVATE+KEY+<name>+<id>+<base64>``
(attest.audit.signed_note), mode 0600. Its path is ``audit_checkpoint_key``; unset, it is
``<data_dir>/audit-checkpoint.key`` and is created on first use (atomically: processes
starting together end up with one key). A path that is set is never created: a missing mount
must not quietly become a new key.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from modelward.attest.audit.signed_note import (
    MalformedKey,
    NoteSigner,
    generate_signer_key,
    parse_signer_key,
)
from modelward.registry.errors import RegistryError
from modelward.registry.secret_files import SecretFileError, create_secret_file, read_secret_file
from modelward.registry.settings import Settings

__all__ = [
    "CheckpointKeyUnavailable",
    "checkpoint_signer",
    "create_signer_file",
    "default_key_name",
    "read_signer_file",
]

MAX_KEY_FILE_BYTES = 4096


class CheckpointKeyUnavailable(RegistryError):  # noqa: N818 - named after the HTTP outcome
    """The checkpoint key file is missing, unreadable, too open or not a key."""

    status = 503
    code = "checkpoint_key_unavailable"


def default_key_name() -> str:
    """A name unique to this registry (C2SP recommends a schema-less URL; this one is under
    the reserved ``.invalid`` domain, so it is never mistaken for a reachable one)."""
    return f"modelward.invalid/audit/{secrets.token_hex(4)}"


def read_signer_file(path: Path) -> NoteSigner:
    """The signer in ``path``; raises CheckpointKeyUnavailable naming the problem."""
    try:
        data = read_secret_file(path, max_bytes=MAX_KEY_FILE_BYTES, what="checkpoint key")
    except SecretFileError as exc:
        raise CheckpointKeyUnavailable(str(exc)) from exc
    try:
        return parse_signer_key(data.decode("ascii"))
    except (MalformedKey, UnicodeDecodeError) as exc:
        raise CheckpointKeyUnavailable(f"{path} is not a checkpoint key: {exc}") from exc


def create_signer_file(path: Path, name: str) -> NoteSigner:
    """Create a new key named ``name`` at ``path`` (mode 0600), atomically; raises
    FileExistsError when ``path`` exists, MalformedKey for a bad name."""
    signer = generate_signer_key(name)
    create_secret_file(path, (signer.key_string + "\n").encode("ascii"))
    return signer


def checkpoint_signer(settings: Settings) -> NoteSigner:
    """The registry's checkpoint signer, creating the default key file on first use.

    Raises CheckpointKeyUnavailable.
    """
    path = settings.resolved_audit_checkpoint_key()
    if not path.exists() and settings.audit_checkpoint_key is None:
        try:
            return create_signer_file(path, default_key_name())
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError as exc:
            raise CheckpointKeyUnavailable(
                f"cannot create the checkpoint key {path}: {exc}"
            ) from exc
    if not path.exists():
        raise CheckpointKeyUnavailable(
            f"the checkpoint key {path} (audit_checkpoint_key) does not exist: create it with "
            "`modelward audit key --create --key-file PATH` or mount it there"
        )
    return read_signer_file(path)
