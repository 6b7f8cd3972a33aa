"""Signing keys: generate, save, load, and name them (docs/attestations.md#keys).

Two key types are accepted, for signing and for trust: Ed25519 (the default) and ECDSA
on NIST P-256 with SHA-256. Every other type (RSA, DSA, other curves, X25519 ...) is
refused with ``KeyError_`` naming the source, so a weak key never becomes trusted.

On disk a private key is PKCS#8 PEM, optionally encrypted with a passphrase, created with
mode 0600 and never silently overwritten; its public key sits beside it at ``FILE.pub``
as SubjectPublicKeyInfo PEM. A key id is the lowercase hex SHA-256 of the public key's
DER SubjectPublicKeyInfo, the canonical encoding of the key.

Raises:
    KeyError_: a key file or PEM cannot be read, decrypted, parsed, or is of a refused type.
    ValueError: caller misuse (unknown key kind, empty passphrase, refusing to overwrite).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Literal, TypeGuard, get_args

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from modelward.attest._fileio import read_bounded
from modelward.attest.errors import KeyError_
from modelward.attest.trust import TrustedKey

__all__ = [
    "KeyKind",
    "SigningKey",
    "VerifyingKey",
    "generate_private_key",
    "key_kind",
    "keyid",
    "load_private_key",
    "load_public_key",
    "public_key_pem",
    "require_signing_key",
    "require_verifying_key",
    "save_private_key",
    "trusted_key",
]

KeyKind = Literal["ed25519", "ecdsa-p256"]
SigningKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
VerifyingKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey

# A PEM key file is a few hundred bytes; anything far larger is not a key.
MAX_KEY_FILE_BYTES = 64 * 1024


def generate_private_key(kind: KeyKind = "ed25519") -> SigningKey:
    """Generate a new private key of ``kind``. Raises ValueError for an unknown kind."""
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if kind == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    raise ValueError(f"unknown key type {kind!r}; choose one of {', '.join(get_args(KeyKind))}")


def key_kind(key: PrivateKeyTypes | PublicKeyTypes) -> KeyKind:
    """The kind of an accepted key. Raises KeyError_ for any refused type."""
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "ed25519"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if isinstance(key.curve, ec.SECP256R1):
            return "ecdsa-p256"
        raise KeyError_(f"unsupported key: ECDSA curve {key.curve.name}; only P-256 is accepted")
    raise KeyError_(
        f"unsupported key type {type(key).__name__}; only Ed25519 and ECDSA P-256 are accepted"
    )


def _is_signing_key(key: PrivateKeyTypes) -> TypeGuard[SigningKey]:
    return isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey)


def _is_verifying_key(key: PublicKeyTypes) -> TypeGuard[VerifyingKey]:
    return isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey)


def _require_kind(key: PrivateKeyTypes | PublicKeyTypes, source: str) -> None:
    """key_kind's check, its KeyError_ naming ``source``."""
    try:
        key_kind(key)
    except KeyError_ as exc:
        raise KeyError_(f"{source}: {exc}") from None


def require_signing_key(key: PrivateKeyTypes, source: str = "<key>") -> SigningKey:
    """Return ``key`` as an accepted signing key, or raise KeyError_ naming ``source``."""
    _require_kind(key, source)
    if not _is_signing_key(key):  # pragma: no cover - key_kind accepted it
        raise KeyError_(f"{source}: not a private key")
    return key


def require_verifying_key(key: PublicKeyTypes, source: str = "<key>") -> VerifyingKey:
    """Return ``key`` as an accepted public key, or raise KeyError_ naming ``source``."""
    _require_kind(key, source)
    if not _is_verifying_key(key):  # pragma: no cover - key_kind accepted it
        raise KeyError_(f"{source}: not a public key")
    return key


def keyid(public_key: PublicKeyTypes) -> str:
    """Lowercase hex SHA-256 of the key's DER SubjectPublicKeyInfo."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def public_key_pem(public_key: PublicKeyTypes) -> bytes:
    """SubjectPublicKeyInfo PEM of ``public_key``."""
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def trusted_key(name: str, public_key: PublicKeyTypes) -> TrustedKey:
    """A TrustSet entry for ``public_key`` under ``name``; refuses unsupported key types."""
    if not name:
        raise ValueError("a trusted key needs a non-empty name")
    key = require_verifying_key(public_key, source=f"trusted key {name!r}")
    return TrustedKey(name=name, keyid=keyid(key), public_key=key)


def save_private_key(
    key: PrivateKeyTypes,
    path: Path,
    passphrase: bytes | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write ``key`` to ``path`` (PKCS#8 PEM, mode 0600) and its public key to ``path.pub``.

    Returns the public key's path. Refuses (ValueError) to replace an existing file
    unless ``overwrite``; on failure nothing new is left behind.
    """
    signing_key = require_signing_key(key)
    if passphrase is not None and not passphrase:
        raise ValueError("an empty passphrase is not a passphrase; pass None for no encryption")
    pub_path = path.with_name(path.name + ".pub")
    if not overwrite:
        existing = [str(p) for p in (path, pub_path) if p.exists() or p.is_symlink()]
        if existing:
            raise ValueError(f"refusing to overwrite existing {', '.join(existing)}")
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(passphrase)
        if passphrase
        else serialization.NoEncryption()
    )
    private_pem = signing_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    written: list[Path] = []
    try:
        _write_file(path, private_pem, 0o600, overwrite=overwrite)
        written.append(path)
        _write_file(pub_path, public_key_pem(signing_key.public_key()), 0o644, overwrite=overwrite)
    except BaseException:
        for p in written:
            with contextlib.suppress(OSError):
                p.unlink()
        raise
    return pub_path


def _write_file(path: Path, data: bytes, mode: int, *, overwrite: bool) -> None:
    """Create ``path`` with ``mode`` from the start (never world-readable, even briefly).

    Without ``overwrite`` the file must not exist (O_EXCL). With it, the bytes go to a
    fresh temporary file in the same directory that then atomically replaces ``path``.
    """
    target = path
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    if overwrite:
        target = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(target, flags, mode)
    except FileExistsError:
        raise ValueError(f"refusing to overwrite existing {target}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)  # the umask may have narrowed it; make it exact
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            target.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink()
        raise


def _read_key_file(path: Path) -> bytes:
    return read_bounded(path, MAX_KEY_FILE_BYTES, what=f"{path}: key file", error=KeyError_)


def load_private_key(path: Path, passphrase: bytes | None = None) -> SigningKey:
    """Load a PEM private key from ``path``, decrypting it with ``passphrase`` if given.

    Raises KeyError_ naming the file when it is unreadable, not a PEM private key,
    encrypted without a passphrase (or with the wrong one), or of a refused type.
    """
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=passphrase or None)
    except TypeError as exc:
        # cryptography: "Password was not given but private key is encrypted" or the reverse.
        if passphrase:
            raise KeyError_(f"{path}: key is not encrypted but a passphrase was given") from None
        raise KeyError_(f"{path}: key is encrypted; a passphrase is needed") from exc
    except UnsupportedAlgorithm:
        raise KeyError_(f"{path}: unsupported key algorithm") from None
    except ValueError:
        if passphrase and b"ENCRYPTED" in data:
            raise KeyError_(f"{path}: wrong passphrase (cannot decrypt the key)") from None
        raise KeyError_(f"{path}: not a PEM private key") from None
    return require_signing_key(key, source=str(path))


def load_public_key(pem: bytes, source: str = "<pem>") -> VerifyingKey:
    """Parse a SubjectPublicKeyInfo PEM. Raises KeyError_ naming ``source`` if refused."""
    if len(pem) > MAX_KEY_FILE_BYTES:
        raise KeyError_(f"{source}: not a public key (larger than {MAX_KEY_FILE_BYTES} bytes)")
    try:
        key = serialization.load_pem_public_key(pem)
    except UnsupportedAlgorithm:
        raise KeyError_(f"{source}: unsupported key algorithm") from None
    except ValueError:
        raise KeyError_(f"{source}: not a PEM public key") from None
    return require_verifying_key(key, source=source)
