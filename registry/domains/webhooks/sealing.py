"""Endpoint secrets at rest, sealed with AES-256-GCM under ``webhooks.key``
(docs/webhooks.md#the-secret).

The registry must hold each endpoint's secret to sign with it. The database keeps only the
sealed secret (a 12-byte nonce and the ciphertext with its tag); the key is 32 random bytes
in ``<tuf_keys_dir>/webhooks.key`` (mode 0600, made on first use, shared by replicas as the
other online keys are). The endpoint's id is the associated data: a database writer cannot
move one endpoint's sealed secret to another. The secret is shown once, when it is made.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from modelward.registry.errors import RegistryError
from modelward.registry.secret_files import SecretFileError, create_secret_file, read_secret_file
from modelward.registry.settings import Settings

__all__ = ["KEY_FILE", "SECRET_PREFIX", "Sealer", "WebhookKeyUnavailable", "new_secret"]

KEY_FILE: Final = "webhooks.key"
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
SECRET_BYTES: Final = 32  # the Standard Webhooks spec: 24 to 64 bytes
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - the prefix of every secret, not one


class WebhookKeyUnavailable(RegistryError):  # noqa: N818 - named after the HTTP outcome
    """The webhook key file is missing, open to others, or does not open a sealed secret."""

    status = 503
    code = "webhook_key_unavailable"


def new_secret() -> tuple[bytes, str]:
    """A new signing secret: its bytes and its ``whsec_<base64>`` form (shown once)."""
    raw = secrets.token_bytes(SECRET_BYTES)
    return raw, SECRET_PREFIX + base64.b64encode(raw).decode("ascii")


def _aad(endpoint_id: int) -> bytes:
    return f"modelward webhook endpoint {endpoint_id}".encode()


class Sealer:
    """Seals and opens endpoint secrets with the key in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / KEY_FILE

    @classmethod
    def of(cls, settings: Settings) -> Sealer:
        return cls(settings.resolved_tuf_keys_dir())

    def _key(self, *, create: bool) -> bytes:
        if create and not self.path.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # another process made it first
                create_secret_file(self.path, os.urandom(KEY_BYTES))
        try:
            key = read_secret_file(self.path, max_bytes=KEY_BYTES, what="webhook key")
        except SecretFileError as exc:
            raise WebhookKeyUnavailable(str(exc)) from exc
        if len(key) != KEY_BYTES:
            raise WebhookKeyUnavailable(f"{self.path} is not a webhook key ({KEY_BYTES} bytes)")
        return key

    def seal(self, endpoint_id: int, secret: bytes) -> bytes:
        """``secret`` sealed for endpoint ``endpoint_id`` (the key is made on first use)."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + AESGCM(self._key(create=True)).encrypt(nonce, secret, _aad(endpoint_id))

    def open(self, endpoint_id: int, sealed: bytes) -> bytes:
        """The secret of endpoint ``endpoint_id``; raises WebhookKeyUnavailable naming the
        key file when it does not open (another key, or a sealed secret moved or changed)."""
        try:
            return AESGCM(self._key(create=False)).decrypt(
                sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _aad(endpoint_id)
            )
        except (InvalidTag, ValueError) as exc:
            raise WebhookKeyUnavailable(
                f"the sealed secret of webhook endpoint {endpoint_id} does not open with "
                f"{self.path} (another key, or the stored secret was changed)"
            ) from exc
