"""DSSE envelopes: sign, add signatures, verify against a TrustSet (docs/attestations.md#dsse).

Follows the DSSE v1 protocol (github.com/secure-systems-lab/dsse, protocol.md and
envelope.md). The signature covers the pre-authentication encoding::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

with LEN the ASCII decimal byte length and SP one space. An envelope is the JSON object
``{"payloadType", "payload": base64, "signatures": [{"keyid", "sig": base64}]}``.
Signatures are Ed25519 (raw 64 bytes) or ECDSA P-256 with SHA-256 (DER).

Verification is over the exact payload bytes received, never a re-serialization. Every
signature is tried against every trusted key; the ``keyid`` hint orders the tries and
tells an unknown signer (ignored by the bundle verifier) from a signature that claims a
trusted key and fails (tampering). One trusted key counts once however many signatures it
made; thresholds are the policy evaluator's alone (attest.policy).

Raises:
    UntrustedSigner: no signature is by, or claims, a trusted key.
    VerificationError: the envelope is malformed, over a limit, has an unsupported
        payloadType, or a signature claiming a trusted key fails.
    ValueError: caller misuse (no signing keys, a key signing twice).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from modelward.attest.errors import KeyError_, UntrustedSigner, VerificationError
from modelward.attest.keys import (
    SigningKey,
    VerifyingKey,
    keyid,
    require_signing_key,
    require_verifying_key,
)
from modelward.attest.statement import parse_statement, strict_json_loads
from modelward.attest.trust import Signer, TrustedKey, TrustSet, VerifiedStatement

__all__ = [
    "PAYLOAD_TYPE",
    "EnvelopeLimits",
    "add_signature",
    "pae",
    "sign_envelope",
    "verify_envelope",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
_ENVELOPE_KEYS = frozenset({"payloadType", "payload", "signatures"})
_SIGNATURE_KEYS = frozenset({"keyid", "sig"})


@dataclass(frozen=True)
class EnvelopeLimits:
    """Bounds on untrusted envelope input, checked before any parsing or crypto."""

    max_bytes: int = 16 * 2**20
    max_signatures: int = 32
    max_sig_bytes: int = 512


@dataclass(frozen=True)
class _Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]  # (keyid hint, signature bytes)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of ``payload_type`` and ``payload``."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _sign(key: SigningKey, message: bytes) -> bytes:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(message)
    return key.sign(message, ec.ECDSA(hashes.SHA256()))


def _verify(key: VerifyingKey, signature: bytes, message: bytes) -> bool:
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        else:
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _serialize(envelope: _Envelope) -> bytes:
    obj = {
        "payloadType": envelope.payload_type,
        "payload": _b64(envelope.payload),
        "signatures": [{"keyid": kid, "sig": _b64(sig)} for kid, sig in envelope.signatures],
    }
    return json.dumps(obj, indent=2).encode("utf-8") + b"\n"


def _signature_for(key: SigningKey, envelope: _Envelope) -> tuple[str, bytes]:
    return keyid(key.public_key()), _sign(key, pae(envelope.payload_type, envelope.payload))


def sign_envelope(
    payload: bytes, keys: Sequence[PrivateKeyTypes], payload_type: str = PAYLOAD_TYPE
) -> bytes:
    """A DSSE envelope over ``payload`` with one signature per key, as JSON bytes.

    Raises ValueError for no keys or one key given twice; KeyError_ for a refused key type.
    """
    if not keys:
        raise ValueError("sign_envelope needs at least one key")
    envelope = _Envelope(payload_type, payload, ())
    for key in keys:
        envelope = _with_signature(envelope, require_signing_key(key))
    return _serialize(envelope)


def add_signature(envelope: bytes, key: PrivateKeyTypes) -> bytes:
    """Return ``envelope`` with one more signature by ``key`` over the same payload.

    The envelope is parsed strictly first (VerificationError if malformed). Raises
    ValueError if ``key`` already signed it.
    """
    parsed = _parse_envelope(envelope, EnvelopeLimits())
    return _serialize(_with_signature(parsed, require_signing_key(key)))


def _with_signature(envelope: _Envelope, key: SigningKey) -> _Envelope:
    kid = keyid(key.public_key())
    if any(existing == kid for existing, _ in envelope.signatures):
        raise ValueError(f"key {kid} already signed this envelope")
    return _Envelope(
        envelope.payload_type,
        envelope.payload,
        (*envelope.signatures, _signature_for(key, envelope)),
    )


def _decode_b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise VerificationError(f"envelope {what} must be a base64 string")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise VerificationError(f"envelope {what} is not valid base64: {exc}") from None


def _parse_envelope(data: bytes, limits: EnvelopeLimits) -> _Envelope:
    """Strictly parse envelope bytes; VerificationError names the field at fault."""
    if len(data) > limits.max_bytes:
        raise VerificationError(
            f"envelope is {len(data)} bytes, over the limit of {limits.max_bytes}"
        )
    obj = strict_json_loads(data, "envelope")
    if not isinstance(obj, dict):
        raise VerificationError("envelope is not a JSON object")
    missing = sorted(_ENVELOPE_KEYS - set(obj))
    if missing:
        raise VerificationError(f"envelope is missing field(s): {', '.join(missing)}")
    unknown = sorted(set(obj) - _ENVELOPE_KEYS)
    if unknown:
        raise VerificationError(f"envelope has unknown field(s): {', '.join(unknown)}")
    payload_type = obj["payloadType"]
    if not isinstance(payload_type, str):
        raise VerificationError("envelope payloadType must be a string")
    payload = _decode_b64(obj["payload"], "payload")
    raw_signatures = obj["signatures"]
    if not isinstance(raw_signatures, list) or not raw_signatures:
        raise VerificationError("envelope signatures must be a non-empty list")
    if len(raw_signatures) > limits.max_signatures:
        raise VerificationError(
            f"envelope has {len(raw_signatures)} signatures, over the limit of "
            f"{limits.max_signatures}"
        )
    signatures: list[tuple[str, bytes]] = []
    for i, raw in enumerate(raw_signatures):
        if not isinstance(raw, dict):
            raise VerificationError(f"envelope signatures[{i}] is not an object")
        unknown = sorted(set(raw) - _SIGNATURE_KEYS)
        if unknown:
            raise VerificationError(
                f"envelope signatures[{i}] has unknown field(s): {', '.join(unknown)}"
            )
        hint = raw.get("keyid", "")
        if not isinstance(hint, str):
            raise VerificationError(f"envelope signatures[{i}].keyid must be a string")
        if "sig" not in raw:
            raise VerificationError(f"envelope signatures[{i}] is missing field: sig")
        sig = _decode_b64(raw["sig"], f"signatures[{i}].sig")
        if not sig or len(sig) > limits.max_sig_bytes:
            raise VerificationError(
                f"envelope signatures[{i}].sig is {len(sig)} bytes; expected 1 to "
                f"{limits.max_sig_bytes}"
            )
        signatures.append((hint, sig))
    return _Envelope(payload_type, payload, tuple(signatures))


def verify_envelope(
    envelope: bytes, trust: TrustSet, limits: EnvelopeLimits = EnvelopeLimits()
) -> VerifiedStatement:
    """Verify a DSSE envelope holding an in-toto statement against ``trust.keys``.

    Returns the statement with every distinct trusted signer.

    Raises:
        UntrustedSigner: no signature verifies with a trusted key and none claims one (its
            keyid hint names no trusted key): an unknown signer, not tampering.
        VerificationError: malformed envelope, a signature that claims a trusted key (by its
            keyid hint) and fails, an unsupported payloadType or a malformed statement.
    """
    # (0): a trust set without keys trusts nobody: nothing here can claim a trusted key.
    if not trust.keys:
        raise UntrustedSigner("no trusted keys: nobody this verifier trusts signed the envelope")
    # (1): receive and parse the envelope: payloadType, payload, keyid hints, signatures.
    parsed = _parse_envelope(envelope, limits)
    # (2): build PAE(UTF8(payloadType), payload) over the exact payload bytes received.
    message = pae(parsed.payload_type, parsed.payload)
    # (3): verify each signature against every trusted key (hint-matching keys first).
    #      A trusted key counts once, by name and by key: the same key listed under two
    #      names, or one key signing twice, never counts as two signers.
    usable: list[tuple[TrustedKey, VerifyingKey, str]] = []
    notes: list[str] = []
    for trusted in trust.keys:
        try:
            public_key = require_verifying_key(trusted.public_key, f"trusted key {trusted.name!r}")
        except KeyError_ as exc:
            notes.append(f"{exc}; it verifies nothing")
            continue
        usable.append((trusted, public_key, keyid(public_key)))
    trusted_ids = {u[2]: u[0].name for u in usable}
    signers: list[Signer] = []
    seen_names: set[str] = set()
    seen_keyids: set[str] = set()
    tampered: list[str] = []
    unknown: list[str] = []
    for i, (hint, sig) in enumerate(parsed.signatures):
        label = f"signature {i} (keyid hint {hint[:16] or '(none)'})"
        matched: tuple[TrustedKey, VerifyingKey, str] | None = None
        for candidate in sorted(usable, key=lambda u: u[2] != hint):
            if _verify(candidate[1], sig, message):
                matched = candidate
                break
        if matched is None:
            if hint in trusted_ids:
                # (3a): it claims a trusted key and that key does not verify it: tampering.
                tampered.append(f"{label}: claims trusted key {trusted_ids[hint]!r}; it fails")
            else:
                unknown.append(f"{label}: by a key this verifier does not trust")
            continue
        trusted, _, actual_id = matched
        if trusted.name in seen_names or actual_id in seen_keyids:
            notes.append(f"{label}: trusted key {trusted.name!r} already counted")
            continue
        seen_names.add(trusted.name)
        seen_keyids.add(actual_id)
        signers.append(Signer(name=trusted.name, kind="key", detail=actual_id))
    if tampered:
        raise VerificationError(
            "DSSE envelope has a bad signature by a trusted key:\n"
            + "\n".join(f"  {f}" for f in tampered)
        )
    if not signers:
        # the first line is the whole finding (the CLI shows only it): which keys signed,
        # which are trusted; the lines after it say what became of each signature
        present = ", ".join(h[:16] or "(no keyid hint)" for h, _ in parsed.signatures)
        trusted_by = ", ".join(f"{name} ({kid[:16]})" for kid, name in trusted_ids.items())
        raise UntrustedSigner(
            "DSSE envelope has no signature by a trusted key: signed by keyid "
            f"{present or '(no signature)'}; trusted: {trusted_by or 'no usable key'}\n"
            + "\n".join(f"  {f}" for f in (*unknown, *notes))
        )
    notes.extend(unknown)
    # (4): reject a payloadType we do not support (after signatures, as DSSE orders it).
    if parsed.payload_type != PAYLOAD_TYPE:
        raise VerificationError(
            f"envelope payloadType is {parsed.payload_type!r}; only {PAYLOAD_TYPE!r} is accepted"
        )
    # (5): parse the payload as an in-toto Statement v1.
    statement, predicate_type, subjects = parse_statement(parsed.payload)
    return VerifiedStatement(
        kind="dsse",
        payload=parsed.payload,
        statement=statement,
        predicate_type=predicate_type,
        subjects=subjects,
        signers=tuple(signers),
        notes=tuple(notes),
    )
