"""What every part of attest.release shares: the format's constants, the error, the limits,
the verified result, and how embedded bytes are written (docs/release.md#the-format)."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from modelward.attest.errors import VerificationError

PREDICATE_TYPE: Final = "https://modelward.dev/release-record/v1"  # == PredicateType.RELEASE_RECORD
CHECKS: Final = {
    1: "file",
    2: "tuf",
    3: "signature",
    4: "envelopes",
    5: "digests",
    6: "rollouts",
}
ATTESTATION_SECTIONS: Final = ("evaluations", "baselines", "replays")


class ReleaseRecordInvalid(VerificationError):  # noqa: N818 - the name is the finding
    """A release record fails ``check`` (1-6, named in CHECKS) at ``field``; the evidence is
    in the message."""

    def __init__(self, check: int, field_name: str, message: str) -> None:
        self.check = check
        self.check_name = CHECKS[check]
        self.field = field_name
        self.reason = message
        super().__init__(f"check {check} ({self.check_name}): {field_name}: {message}")


class PinnedRootError(ValueError):
    """The caller's ``--trust-root`` is not usable: not TUF root metadata, or not signed by its
    own root keys (a wrong file given, not a finding about the record)."""


class RecordKeyRefused(ValueError):  # noqa: N818 - the name is the finding
    """The key given to sign a record is not one ``verify_record`` trusts for it: not a key of
    the top-level targets nor of the alias's ``role`` in the verified chain."""

    def __init__(self, keyid: str, role: str) -> None:
        self.keyid = keyid
        self.role = role
        super().__init__(
            f"key {keyid} is not a key of TUF role {role} nor of the top-level targets in the "
            "verified chain: `release verify` would refuse the record (sign it with a key of "
            f"{role}: for a protected alias, a reviewer's key)"
        )


@dataclass(frozen=True)
class RecordLimits:
    """Bounds on an untrusted record file, checked before parsing."""

    max_bytes: int = 64 * 2**20
    max_signatures: int = 8


@dataclass(frozen=True)
class VerifiedRecord:
    """What ``verify_record`` established; ``notes`` lists what it could not check."""

    repository: str
    alias: str
    version: int
    digest: str
    signers: tuple[str, ...]
    predicate: Mapping[str, Any]
    notes: tuple[str, ...] = field(default=())


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def blob(data: bytes, **extra: Any) -> dict[str, Any]:
    """Embedded bytes: their digest, size and base64."""
    return {**extra, "sha256": sha256(data), "size": len(data), "data": b64(data)}


# -- reading a predicate that is not yet trusted -------------------------------------------
def get(obj: Any, path: str, kind: type | tuple[type, ...], check: int) -> Any:
    """``obj`` at the dotted ``path``, of type ``kind``, else ReleaseRecordInvalid."""
    value = obj
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ReleaseRecordInvalid(check, path, "missing")
        value = value[part]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ReleaseRecordInvalid(check, path, f"must be {getattr(kind, '__name__', kind)}")
    return value


def canonical_b64(value: str, where: str, check: int) -> bytes:
    """The bytes ``value`` encodes in standard padded base64, the one spelling of them:
    base64 decoders also accept others (other padding bits), which would hide a changed
    byte."""
    try:
        data = base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise ReleaseRecordInvalid(check, where, f"not valid base64: {exc}") from None
    if b64(data) != value:
        raise ReleaseRecordInvalid(check, where, "not canonical base64")
    return data


def embedded(obj: Any, where: str, check: int) -> bytes:
    """The bytes embedded at ``where`` (its ``data``, canonical base64)."""
    value = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(value, str):
        raise ReleaseRecordInvalid(check, f"{where}.data", "must be a base64 string")
    return canonical_b64(value, f"{where}.data", check)
