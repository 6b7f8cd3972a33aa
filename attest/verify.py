"""The one dispatcher: tell a signature's kind from its content, verify it, bind it.

Three kinds are understood (docs/attestations.md#formats):

- ``dsse``: a DSSE envelope (JSON with exactly ``payloadType``, ``payload``, ``signatures``)
  signed by trusted keys — attest.dsse.
- ``sigstore``: a Sigstore bundle (``mediaType`` application/vnd.dev.sigstore.bundle...)
  holding a DSSE in-toto statement, verified offline — attest.sigstore_verify.
- ``oms``: an OpenSSF Model Signing ``model.sig``: a Sigstore bundle whose statement's
  predicateType is a ``https://model_signing/`` one — attest.oms, checked file by file
  against the bundle's tree (it has no bundle-digest subject).

Anything else raises ``UnknownSignatureFormat``; nothing is ever guessed into a pass.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from modelward.attest.errors import UnknownSignatureFormat, UntrustedSigner, VerificationError
from modelward.attest.policy._evaluate import OMS_TREE_NOTE
from modelward.attest.trust import SignatureKind, TrustSet, VerifiedStatement

__all__ = [
    "MAX_SIGNATURE_BYTES",
    "OMS_PREDICATE_PREFIX",
    "SIGSTORE_BUNDLE_MEDIA_PREFIX",
    "detect_kind",
    "verify_attestation",
]

MAX_SIGNATURE_BYTES = 16 << 20
SIGSTORE_BUNDLE_MEDIA_PREFIX = "application/vnd.dev.sigstore.bundle"
OMS_PREDICATE_PREFIX = "https://model_signing/"
_DSSE_KEYS = frozenset({"payloadType", "payload", "signatures"})


def _json_object(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_SIGNATURE_BYTES:
        raise UnknownSignatureFormat(f"signature is larger than {MAX_SIGNATURE_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise UnknownSignatureFormat(f"not a signature: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise UnknownSignatureFormat("not a signature: the JSON is not an object")
    return doc


def _statement_predicate_type(envelope: Any) -> str | None:
    """The predicateType inside a Sigstore bundle's DSSE envelope, or None if unreadable."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), str):
        return None
    try:
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
    except (binascii.Error, ValueError, RecursionError):
        return None
    if not isinstance(statement, dict):
        return None
    ptype = statement.get("predicateType")
    return ptype if isinstance(ptype, str) else None


def detect_kind(data: bytes) -> SignatureKind:
    """The signature's kind, from its content alone.

    Raises:
        UnknownSignatureFormat: not JSON, or JSON of no shape we understand.
    """
    doc = _json_object(data)
    media_type = doc.get("mediaType")
    if isinstance(media_type, str) and media_type.startswith(SIGSTORE_BUNDLE_MEDIA_PREFIX):
        ptype = _statement_predicate_type(doc.get("dsseEnvelope"))
        if ptype is not None and ptype.startswith(OMS_PREDICATE_PREFIX):
            return "oms"
        return "sigstore"
    if set(doc) == _DSSE_KEYS:
        return "dsse"
    shown = ", ".join(sorted(doc)[:8]) or "(none)"
    raise UnknownSignatureFormat(
        "not a DSSE envelope, Sigstore bundle or OMS model.sig "
        f"(top-level keys: {shown}; mediaType: {media_type!r})"
    )


def verify_attestation(
    data: bytes,
    trust: TrustSet,
    *,
    bundle_digest: str,
    root: Path | None = None,
    ignore_paths: Sequence[str] = (),
) -> VerifiedStatement:
    """Verify one attestation of any kind against ``trust`` and bind it to a bundle.

    For ``oms`` the bundle's materialized tree ``root`` is required. ``ignore_paths`` are
    excluded from the tree (as ``build_bundle(exclude=...)`` left them out of the bundle);
    the signature binds to ``bundle_digest`` (the returned statement carries the note
    ``OMS_TREE_NOTE + bundle_digest``) only if it signs every other file.

    Raises:
        UntrustedSigner: no signature is by, or claims, a signer ``trust`` names.
        UnknownSignatureFormat: the kind cannot be told.
        SubjectMismatch: a DSSE or Sigstore statement is about another bundle.
        VerificationError: no trusted signer, a bad signature, a file mismatch (OMS), a
            bundle file an OMS signature does not sign (``OmsFileMismatch``).
    """
    # (1): the kind, from the content.
    kind = detect_kind(data)
    # (2): fail closed: an empty trust set trusts nobody, so nobody here is trusted.
    if trust.is_empty():
        raise UntrustedSigner("no trusted signers were given: nobody here is trusted")
    # (3): verify the signature(s) with the kind's verifier.
    if kind == "dsse":
        from modelward.attest.dsse import verify_envelope

        stmt = verify_envelope(data, trust)
    elif kind == "sigstore":
        from modelward.attest.sigstore_verify import verify_sigstore_bundle

        stmt = verify_sigstore_bundle(data, trust)
    else:
        if root is None:
            raise VerificationError(
                "an OMS signature is verified against the bundle's files; no tree was given"
            )
        from modelward.attest.oms import require_signs_bundle, verify_oms

        stmt = verify_oms(data, root, trust, ignore_paths)
        # (4, oms): verify_oms mapped every signed file onto the tree at ``root``, and the
        # digest covers every bundle file: each must be signed, none merely ignored.
        require_signs_bundle(stmt, root, bundle_digest, ignore_paths)
        return replace(stmt, notes=(*stmt.notes, f"{OMS_TREE_NOTE}{bundle_digest}"))
    # (4): the statement must be about this bundle.
    from modelward.attest.statement import require_subject

    require_subject(stmt, bundle_digest)
    return stmt
