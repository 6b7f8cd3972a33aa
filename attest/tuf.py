"""The registry's TUF layout as both sides see it: target paths, role names, keys.

The registry publishes its alias decisions as TUF metadata (docs/tuf.md) and workers read
them with ``tuf.ngclient``; this module is what the two agree on. Target paths:

- ``ORG/NAME/aliases/ALIAS``: the manifest bytes of the bundle the alias names (length and
  sha256; the sha256 *is* the bundle digest);
- ``quarantine/<hex>``: present when the bundle ``sha256:<hex>`` is quarantined.

Role names: ``ORG:NAME@PATTERN`` (a protected alias rule; ``ORG:NAME@=PATTERN`` for the
patterns ``online``, ``*`` and those starting with ``=``), ``ORG:NAME@online`` (aliases the
registry's online key may move), ``ORG:NAME@*`` (every other alias), ``quarantine``. A role
name is part of a metadata file's name (``VERSION.ROLE.json``), so it holds no ``/``: static
file servers, S3 and CDNs would read one as a directory.

Keys are the keys modelward already uses: Ed25519 or ECDSA P-256, PKCS#8 private keys and
SubjectPublicKeyInfo public keys (``attest.keys``). A key's TUF keyid is its modelward
keyid (hex SHA-256 of the DER SubjectPublicKeyInfo), so one key has one id everywhere: in
the key registry, in DSSE envelopes and in TUF delegations.

Pure: no I/O beyond what the caller hands in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from securesystemslib.signer import CryptoSigner, Key, Signature, SSlibKey
from tuf.api.metadata import Metadata, Root, Targets

from modelward.attest.digest import parse_digest
from modelward.attest.keys import keyid, require_signing_key, require_verifying_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import (
        PrivateKeyTypes,
        PublicKeyTypes,
    )

__all__ = [
    "QUARANTINE_ROLE",
    "REASON_WITHHELD",
    "WITHHELD_PRIVATE",
    "TargetChange",
    "alias_path",
    "online_role",
    "open_role",
    "proposal_changes",
    "protected_role",
    "public_key_of",
    "quarantine_path",
    "root_summary",
    "sign_proposal_payload",
    "tuf_key",
    "tuf_signer",
]

QUARANTINE_ROLE = "quarantine"
# A quarantine target's signed ``custom``: ``{"reason": ...}``, or, for a digest that only
# private repositories hold, ``{REASON_WITHHELD: WITHHELD_PRIVATE}`` (the role is served to
# every reader; docs/tuf.md#private-repositories)
REASON_WITHHELD = "reason_withheld"
WITHHELD_PRIVATE = "private"


def alias_path(repo: str, alias: str) -> str:
    """The target path naming what ``repo@alias`` points at."""
    return f"{repo}/aliases/{alias}"


def quarantine_path(digest: str) -> str:
    """The target path that, when present, quarantines ``digest`` (``sha256:<hex>``)."""
    return "quarantine/" + parse_digest(digest).removeprefix("sha256:")


def _role_prefix(repo: str) -> str:
    org, sep, name = repo.partition("/")
    if not sep or not org or not name or "/" in name:
        raise ValueError(f"not a repository name: {repo!r} (expected ORG/NAME)")
    return f"{org}:{name}"


# The names ``online_role`` and ``open_role`` end in; a protected pattern spelt like one of
# them (or like an escaped pattern) is escaped with ``=``, so no pattern can name another
# kind's role and no two patterns name one role (docs/tuf.md#roles).
_RESERVED_PATTERNS = frozenset({"online", "*"})
_ESCAPE = "="


def protected_role(repo: str, pattern: str) -> str:
    """The role that signs ``repo``'s aliases matching the protected ``pattern``:
    ``ORG:NAME@PATTERN``, or ``ORG:NAME@=PATTERN`` when ``PATTERN`` is ``online``, ``*``
    or starts with ``=`` (injective over (repository, kind, pattern); every other name is
    what it always was)."""
    if pattern in _RESERVED_PATTERNS or pattern.startswith(_ESCAPE):
        pattern = _ESCAPE + pattern
    return f"{_role_prefix(repo)}@{pattern}"


def online_role(repo: str) -> str:
    """The role the registry's online key signs for ``repo``'s ``online:`` aliases."""
    return f"{_role_prefix(repo)}@online"


def open_role(repo: str) -> str:
    """The role the publishers of ``repo`` sign for its unprotected aliases."""
    return f"{_role_prefix(repo)}@*"


# securesystemslib's scheme names for the key types attest.keys accepts.
_SCHEMES = {"ed25519": "ed25519", "ecdsa-p256": "ecdsa-sha2-nistp256"}


def tuf_key(public_key: PublicKeyTypes, source: str = "<key>") -> SSlibKey:
    """``public_key`` as a TUF key whose keyid is its modelward keyid.

    Raises ``attest.errors.KeyError_`` (naming ``source``) for a key type modelward refuses.
    """
    from modelward.attest.keys import key_kind

    key = require_verifying_key(public_key, source=source)
    return SSlibKey.from_crypto(key, keyid=keyid(key), scheme=_SCHEMES[key_kind(key)])


def tuf_signer(private_key: PrivateKeyTypes, source: str = "<key>") -> CryptoSigner:
    """A securesystemslib signer for ``private_key``, announcing its modelward keyid."""
    key = require_signing_key(private_key, source=source)
    return CryptoSigner(key, tuf_key(key.public_key(), source=source))


def public_key_of(key: Key) -> PublicKeyTypes | None:
    """The inverse of ``tuf_key``: ``key`` as a cryptography public key, or None when it is
    not one modelward uses (Ed25519, or ECDSA P-256 under ``ecdsa-sha2-nistp256``) or its
    keyid is not its modelward keyid (docs/tuf.md#keys): such a key verifies nothing here.
    Never raises for what the metadata holds."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from modelward.attest.errors import KeyError_
    from modelward.attest.keys import load_public_key

    public = key.keyval.get("public")
    if not isinstance(public, str) or key.keytype not in ("ed25519", "ecdsa"):
        return None
    try:
        if key.keytype == "ed25519":
            found: PublicKeyTypes = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public))
        else:
            found = load_public_key(public.encode("utf-8"), f"TUF key {key.keyid}")
        expected = tuf_key(found)
    except (KeyError_, ValueError):
        return None
    same = (key.keyid, key.keytype, key.scheme) == (
        expected.keyid,
        expected.keytype,
        expected.scheme,
    )
    return found if same else None


@dataclass(frozen=True)
class TargetChange:
    """One target a proposed role version adds, changes or removes (digests or None)."""

    path: str
    before: str | None
    after: str | None


def _digests(md: Metadata[Targets]) -> dict[str, str]:
    return {
        path: "sha256:" + target.hashes.get("sha256", "")
        for path, target in md.signed.targets.items()
    }


def proposal_changes(payload: bytes, previous: bytes | None) -> list[TargetChange]:
    """What signing ``payload`` (a proposed delegated role version) changes against the
    ``previous`` version (None: the role's first), read from the bytes to be signed, never
    from the registry's summary of them. Raises ``ValueError`` for metadata that is not a
    targets role."""
    md = Metadata[Targets].from_bytes(payload)
    after = _digests(md)
    before = _digests(Metadata[Targets].from_bytes(previous)) if previous else {}
    return [
        TargetChange(path, before.get(path), after.get(path))
        for path in sorted(set(before) | set(after))
        if before.get(path) != after.get(path)
    ]


def sign_proposal_payload(payload: bytes, private_key: PrivateKeyTypes) -> Signature:
    """A signature over the canonical signed bytes of the proposed metadata ``payload``."""
    md: Metadata[Targets] = Metadata.from_bytes(payload)
    return md.sign(tuf_signer(private_key), append=True)


def root_summary(data: bytes) -> dict[str, Any]:
    """A root's version, root keyids and threshold, to compare out of band before pinning.
    Raises ``ValueError`` for bytes that are not root metadata."""
    root = Metadata[Root].from_bytes(data).signed
    role = root.roles[Root.type]
    return {
        "version": root.version,
        "root_keys": list(role.keyids),
        "root_threshold": role.threshold,
        "expires": root.expires.isoformat(),
    }
