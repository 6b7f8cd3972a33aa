"""OMS signature bundles: tell the kind, verify the DSSE signature against the TrustSet.

model_signing writes ``model.sig`` as a Sigstore bundle (media type
``application/vnd.dev.sigstore.bundle.v0.3+json``) around a DSSE envelope. Its
``verificationMaterial`` says which kind of signer made it:

- ``publicKey`` (a ``hint``: hex SHA-256 of the key's SubjectPublicKeyInfo PEM) and no log
  entries: an elliptic-curve key; verified against each trusted key (``kind == "key"``).
- ``x509CertificateChain`` and no log entries: a key certified by an X.509 chain (leaf
  first); the chain must lead to a trusted CA root (``kind == "x509"``).
- ``certificate``, or any transparency-log entry: Sigstore keyless; verified by
  sigstore-python under each trusted identity's trust root (``kind == "sigstore"``).

ECDSA signatures are over DSSE PAE of the payload, hashed by curve size (P-256: SHA-256,
P-384: SHA-384, P-521: SHA-512). Signatures from model_signing v0.2 were over a buggy PAE
(``pae_compat``) and, for certificates, always SHA-256; both are accepted as the library
accepts them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import verification as x509v
from cryptography.x509.oid import ExtendedKeyUsageOID

from modelward.attest._malformed import MALFORMED, describe
from modelward.attest.dsse import pae
from modelward.attest.errors import UntrustedSigner, VerificationError
from modelward.attest.keys import keyid
from modelward.attest.sigstore_verify import (
    BUNDLE_MEDIA_TYPES,
    IN_TOTO_PAYLOAD_TYPE,
    check_bundle_media_type,
    verify_sigstore_dsse,
)
from modelward.attest.statement import strict_json_loads
from modelward.attest.trust import Signer, TrustedCA, TrustedKey, TrustSet

OMS_BUNDLE_MEDIA_TYPE: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
OmsKind = Literal["key", "x509", "sigstore"]
_CURVE_HASHES: Final[Mapping[str, type[hashes.HashAlgorithm]]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
    "secp521r1": hashes.SHA512,
}


@dataclass(frozen=True)
class Envelope:
    """The parts of an OMS bundle that a signature check needs."""

    kind: OmsKind
    material: Mapping[str, Any]
    payload_type: str
    payload: bytes
    signatures: tuple[bytes, ...]


@dataclass(frozen=True)
class Verified:
    """A verified OMS envelope. One signing key counts once: ``notes`` name the trusted
    entries that verified it too and were not counted again."""

    payload: bytes
    signers: tuple[Signer, ...]
    kind: OmsKind
    notes: tuple[str, ...] = ()


def b64decode(text: Any, where: str) -> bytes:
    """Decode protobuf-JSON base64 (standard or URL-safe alphabet, padding optional)."""
    if not isinstance(text, str):
        raise VerificationError(f"{where} must be a base64 string")
    padded = text + "=" * (-len(text) % 4)
    altchars = b"-_" if ("-" in text or "_" in text) else None
    try:
        return base64.b64decode(padded.encode("ascii"), altchars=altchars, validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise VerificationError(f"{where} is not valid base64") from None


def pae_compat(payload: bytes) -> bytes:
    """The PAE model_signing v0.2 signed by mistake (a ``repr`` of the payload bytes)."""
    text = f"DSSEV1 {len(IN_TOTO_PAYLOAD_TYPE)} {IN_TOTO_PAYLOAD_TYPE} {len(payload)} {payload!r}"
    return text.encode("utf-8")


def key_hint(public_key: ec.EllipticCurvePublicKey) -> str:
    """model_signing's public key hint: hex SHA-256 of the SubjectPublicKeyInfo PEM."""
    pem = public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(pem).hexdigest()


def curve_hash(public_key: ec.EllipticCurvePublicKey) -> hashes.HashAlgorithm:
    """The hash model_signing pairs with a curve; VerificationError for other curves."""
    algorithm = _CURVE_HASHES.get(public_key.curve.name)
    if algorithm is None:
        raise VerificationError(f"unsupported elliptic curve {public_key.curve.name}")
    return algorithm()


def parse_envelope(data: bytes) -> Envelope:
    """(1)-(2): a known bundle media type, the signer kind, and the DSSE envelope parts."""
    check_bundle_media_type(data)
    document = strict_json_loads(data, "OMS signature")
    material = document.get("verificationMaterial")
    if not isinstance(material, dict):
        raise VerificationError("OMS signature has no verificationMaterial object")
    tlog = material.get("tlogEntries") or []
    kind: OmsKind
    if "certificate" in material or tlog:
        kind = "sigstore"
    elif "publicKey" in material:
        kind = "key"
    elif "x509CertificateChain" in material:
        kind = "x509"
    else:
        raise VerificationError(
            "OMS signature verificationMaterial names no public key, certificate chain "
            "or Sigstore certificate"
        )
    if kind != "sigstore" and document.get("mediaType") != OMS_BUNDLE_MEDIA_TYPE:
        raise VerificationError(
            f"OMS {kind} signature must have media type {OMS_BUNDLE_MEDIA_TYPE!r}, "
            f"got {document.get('mediaType')!r}"
        )
    envelope = document.get("dsseEnvelope")
    if not isinstance(envelope, dict):
        raise VerificationError("OMS signature holds no DSSE envelope")
    payload_type = envelope.get("payloadType")
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise VerificationError(
            f"DSSE payload type is {payload_type!r}, expected {IN_TOTO_PAYLOAD_TYPE!r}"
        )
    payload = b64decode(envelope.get("payload"), "dsseEnvelope.payload")
    raw_sigs = envelope.get("signatures")
    if not isinstance(raw_sigs, list) or not raw_sigs:
        raise VerificationError("DSSE envelope has no signatures")
    sigs: list[bytes] = []
    for i, raw in enumerate(raw_sigs):
        if not isinstance(raw, dict):
            raise VerificationError(f"dsseEnvelope.signatures[{i}] is not an object")
        sigs.append(b64decode(raw.get("sig"), f"dsseEnvelope.signatures[{i}].sig"))
    return Envelope(kind, material, payload_type, payload, tuple(sigs))


def _ecdsa_ok(
    public_key: ec.EllipticCurvePublicKey,
    envelope: Envelope,
    compat_hash: hashes.HashAlgorithm | None = None,
) -> bool:
    """True if any signature verifies over PAE (or the v0.2 compat PAE)."""
    algorithm = curve_hash(public_key)
    attempts = (
        (pae(envelope.payload_type, envelope.payload), algorithm),
        (pae_compat(envelope.payload), compat_hash or algorithm),
    )
    for signature in envelope.signatures:
        for message, hash_algorithm in attempts:
            try:
                public_key.verify(signature, message, ec.ECDSA(hash_algorithm))
            except InvalidSignature:
                continue
            return True
    return False


def _verify_key(
    envelope: Envelope, keys: Sequence[TrustedKey]
) -> tuple[list[Signer], list[str], list[str]]:
    """(3a): an EC key signature against each trusted key; one key counts once.

    Keys are told apart by the key id computed here from the key itself (SHA-256 of its
    DER SubjectPublicKeyInfo), never by the stored ``keyid`` or the name it is trusted under.
    """
    material = envelope.material.get("publicKey")
    hint = material.get("hint") if isinstance(material, dict) else None
    signers: list[Signer] = []
    reasons: list[str] = []
    notes: list[str] = []
    counted: dict[str, str] = {}  # computed key id -> the name it counted as
    for key in keys:
        public_key = key.public_key
        same = counted.get(keyid(public_key))
        if same is not None:
            if same != key.name:
                notes.append(f"{key.name}: the same key as {same}, already counted")
            continue
        if not isinstance(public_key, ec.EllipticCurvePublicKey):
            reasons.append(f"{key.name}: not an elliptic-curve key")
            continue
        if public_key.curve.name not in _CURVE_HASHES:
            reasons.append(f"{key.name}: unsupported curve {public_key.curve.name}")
            continue
        if hint and hint != key_hint(public_key):
            reasons.append(f"{key.name}: the signature's key hint {hint} names another key")
            continue
        if _ecdsa_ok(public_key, envelope):
            counted[keyid(public_key)] = key.name
            signers.append(Signer(key.name, "key", keyid(public_key)))
        elif hint:
            # it names this trusted key by its hint, and this key does not verify it
            raise VerificationError(
                f"OMS signature claims trusted key {key.name!r} (hint {hint}) and does not "
                "verify with it"
            )
        else:
            reasons.append(f"{key.name}: signature does not verify with this key")
    return signers, reasons, notes


def _chain(envelope: Envelope) -> list[x509.Certificate]:
    chain = envelope.material.get("x509CertificateChain")
    raw = chain.get("certificates") if isinstance(chain, dict) else None
    if not isinstance(raw, list) or not raw:
        raise VerificationError("x509CertificateChain holds no certificates")
    certs: list[x509.Certificate] = []
    for i, item in enumerate(raw):
        where = f"x509CertificateChain.certificates[{i}]"
        der = b64decode(item.get("rawBytes") if isinstance(item, dict) else None, where)
        try:
            certs.append(x509.load_der_x509_certificate(der))
        except MALFORMED as exc:
            raise VerificationError(f"{where} is not a DER certificate: {describe(exc)}") from None
    return certs


def _leaf_may_sign(leaf: x509.Certificate) -> bool:
    """model_signing's rule: KeyUsage digitalSignature, or ExtendedKeyUsage codeSigning."""
    try:
        if leaf.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature:
            return True
    except x509.ExtensionNotFound:
        pass
    try:
        usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return ExtendedKeyUsageOID.CODE_SIGNING in usage


def _verify_x509(
    envelope: Envelope, cas: Sequence[TrustedCA], now: datetime
) -> tuple[list[Signer], list[str], list[str]]:
    """(3b): leaf signature over PAE, leaf usage, and the chain to a trusted CA at ``now``.

    One leaf is one signer: it counts once, under the first trusted CA it chains to,
    however many trusted CA entries would chain it.
    """
    certs = _chain(envelope)
    leaf = certs[0]
    public_key = leaf.public_key()
    subject = leaf.subject.rfc4514_string()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        return [], [f"leaf certificate {subject} does not hold an elliptic-curve key"], []
    if public_key.curve.name not in _CURVE_HASHES:
        return [], [f"leaf certificate {subject}: unsupported curve {public_key.curve.name}"], []
    if not _leaf_may_sign(leaf):
        return [], [f"leaf certificate {subject} may not be used for signing"], []
    signers: list[Signer] = []
    reasons: list[str] = []
    notes: list[str] = []
    for ca in cas:
        if signers:
            if ca.name != signers[0].name:
                notes.append(
                    f"{ca.name}: the leaf {subject} already counted under {signers[0].name}"
                )
            continue
        if not ca.roots:
            reasons.append(f"{ca.name}: no root certificates")
            continue
        verifier = (
            x509v.PolicyBuilder()
            .store(x509v.Store(list(ca.roots)))
            .time(now)
            .extension_policies(
                ca_policy=x509v.ExtensionPolicy.webpki_defaults_ca(),
                ee_policy=x509v.ExtensionPolicy.permit_all(),
            )
            .build_client_verifier()
        )
        try:
            verifier.verify(leaf, [*certs[1:], *ca.intermediates])
        except x509v.VerificationError as exc:
            reasons.append(f"{ca.name}: certificate chain of {subject} does not verify: {exc}")
            continue
        signers.append(Signer(ca.name, "x509", subject))
    # the leaf chains to a trusted CA: from here on a failure is tampering, not a stranger
    if signers and not _ecdsa_ok(public_key, envelope, compat_hash=hashes.SHA256()):
        raise VerificationError(
            f"OMS signature by leaf certificate {subject} (chains to trusted CA "
            f"{signers[0].name!r}) does not verify"
        )
    return signers, reasons, notes


def verify_envelope(data: bytes, trust: TrustSet, now: datetime | None = None) -> Verified:
    """Steps (1)-(3): parse the OMS bundle and verify its signature against ``trust``.

    Raises:
        UntrustedSigner: the signature is by no trusted signer and claims none (its key
            hint names no trusted key; its leaf chains to no trusted CA; its certificate
            names no trusted identity), with one reason per trusted signer tried.
        VerificationError: malformed, or it claims a trusted signer and does not verify.
    """
    envelope = parse_envelope(data)
    if envelope.kind == "sigstore":
        # (3c): Sigstore keyless, by sigstore-python offline under each identity's root.
        result = verify_sigstore_dsse(data, trust.identities)
        return Verified(result.payload, result.signers, "sigstore", result.notes)
    if envelope.kind == "key":
        if not trust.keys:
            raise UntrustedSigner("OMS signature is made with a key, and no key is trusted")
        signers, reasons, notes = _verify_key(envelope, trust.keys)
    else:
        if not trust.cas:
            raise UntrustedSigner(
                "OMS signature is made with a certificate chain, and no CA is trusted"
            )
        try:
            signers, reasons, notes = _verify_x509(envelope, trust.cas, now or datetime.now(UTC))
        except MALFORMED as exc:
            raise VerificationError(
                f"OMS certificate chain is malformed: {describe(exc)}"
            ) from None
    if not signers:
        # no trusted key is named by the hint, or the leaf chains to no trusted CA
        raise UntrustedSigner(
            f"OMS {envelope.kind} signature did not verify for any trusted signer:\n"
            + "\n".join(f"  {r}" for r in reasons)
        )
    return Verified(envelope.payload, tuple(signers), envelope.kind, tuple(notes))


__all__ = [
    "BUNDLE_MEDIA_TYPES",
    "OMS_BUNDLE_MEDIA_TYPE",
    "Envelope",
    "Verified",
    "b64decode",
    "curve_hash",
    "key_hint",
    "parse_envelope",
    "verify_envelope",
]
