"""The MAC that authenticates a backup (docs/operations.md#the-backup-key).

A backup's ``manifest.json`` lists every file with its size and sha256; ``manifest.hmac``
holds HMAC-SHA256 over the manifest's bytes, with a key the backup does not carry (the
``backup_key`` setting: a file of at least 32 random bytes, mode 0600). Whoever edits a
file and recomputes the manifest's digests cannot recompute the MAC. ``verify_manifest``
runs on the bytes read, before they are parsed; it returns nothing and raises
``BackupError`` naming the file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

from modelward.registry.errors import RegistryError
from modelward.registry.secret_files import SecretFileError, read_secret_file

__all__ = [
    "MAC_FILE",
    "BackupKeyError",
    "BackupMacError",
    "load_backup_key",
    "sign_manifest",
    "verify_manifest",
]

MAC_FILE = "manifest.hmac"
ALGORITHM = "hmac-sha256"
MIN_KEY_BYTES = 32
MAX_KEY_BYTES = 4096
MAX_MAC_FILE_BYTES = 4096


class BackupMacError(RegistryError):
    """A backup's manifest is not authenticated by the backup key (the message names the
    file)."""


class BackupKeyError(RegistryError):
    """The backup key is not set, or its file is unusable (the message says which and how)."""


def load_backup_key(path: Path | None) -> bytes:
    """The backup key's bytes. Raises BackupKeyError when it is unset, unreadable, open to
    other users or shorter than 32 bytes."""
    if path is None:
        raise BackupKeyError(
            "no backup key: set backup_key (MODELWARD_BACKUP_KEY) or pass --backup-key FILE, "
            f"a file of at least {MIN_KEY_BYTES} random bytes, mode 0600, kept apart from the "
            "backups: (umask 077; head -c 32 /dev/urandom > backup.key) "
            "(docs/operations.md#the-backup-key)"
        )
    try:
        key = read_secret_file(path, max_bytes=MAX_KEY_BYTES, what="backup key")
    except SecretFileError as exc:
        raise BackupKeyError(str(exc)) from exc
    if len(key) < MIN_KEY_BYTES:
        raise BackupKeyError(
            f"the backup key {path} holds {len(key)} bytes: at least {MIN_KEY_BYTES} random "
            "bytes are needed"
        )
    return key


def _key_id(key: bytes) -> str:
    """Which key (a hash of it, revealing nothing of it): tells "another key" from
    "tampered"."""
    return hashlib.sha256(b"modelward-backup-key-id\x00" + key).hexdigest()[:16]


def sign_manifest(manifest: bytes, key: bytes) -> bytes:
    """The contents of ``manifest.hmac`` for the manifest bytes ``manifest``."""
    mac = hmac.new(key, manifest, hashlib.sha256).hexdigest()
    return json.dumps(
        {"algorithm": ALGORITHM, "key_id": _key_id(key), "mac": mac}, indent=1, sort_keys=True
    ).encode()


def verify_manifest(src: Path, manifest: bytes, key: bytes) -> None:
    """Raise BackupMacError unless ``src/manifest.hmac`` authenticates ``manifest`` (the
    bytes of ``src/manifest.json``) under ``key``."""
    path = src / MAC_FILE
    # (1) the MAC file: present, small, the one algorithm
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_MAC_FILE_BYTES + 1)
    except FileNotFoundError:
        raise BackupMacError(
            f"{path} does not exist: the backup is not authenticated (taken by an older "
            "modelward, or the file was removed); nothing was written"
        ) from None
    except OSError as exc:
        raise BackupMacError(f"{path}: {exc}") from exc
    try:
        stated = json.loads(raw) if len(raw) <= MAX_MAC_FILE_BYTES else None
    except ValueError:
        stated = None
    if not isinstance(stated, dict) or stated.get("algorithm") != ALGORITHM:
        raise BackupMacError(f"{path} is not a {ALGORITHM} backup MAC; nothing was written")
    # (2) the key it was made with
    if stated.get("key_id") != _key_id(key):
        raise BackupMacError(
            f"{path} was made with another backup key (key id {stated.get('key_id')!r}, "
            f"this one's is {_key_id(key)!r}); nothing was written"
        )
    # (3) the MAC over the manifest's bytes, compared in constant time
    expected = hmac.new(key, manifest, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(str(stated.get("mac")), expected):
        raise BackupMacError(
            f"{src / 'manifest.json'}: its HMAC in {path} does not verify with the backup "
            "key: the backup was changed after it was taken; nothing was written"
        )
