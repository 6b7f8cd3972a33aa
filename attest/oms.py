"""OpenSSF Model Signing (OMS): verify and write ``model.sig`` offline (docs/attestations.md).

``model_signing`` (sigstore/model-transparency) signs a model directory as an in-toto
statement listing every file's digest, in a DSSE envelope inside a Sigstore bundle. Three
signer kinds exist: an EC key, a key with an X.509 chain, and Sigstore keyless (see
``attest._oms_envelope``); the predicate forms are in ``attest._oms_manifest``.

Steps of ``verify_oms``:

1. The bytes are a Sigstore bundle of a known media type (OMS key/chain: bundle v0.3).
2. Its verification material names the signer kind; the DSSE payload type is in-toto.
3. The DSSE signature verifies for at least one trusted signer of that kind: an EC key
   (key hint and signature), a CA (leaf signature, leaf usage, chain to a trusted root now)
   or a Sigstore identity (sigstore-python, offline, under its trust root).
4. The payload is a strict in-toto Statement v1 with an OMS predicate type.
5. The predicate's items are well formed, unique, safe relative paths, of a supported hash,
   and consistent with the subject's digest of digests.
6. The model tree (tree rules as attest.tree; ``model.sig``, ``.git/``, ``.modelward/`` and
   the caller's ``ignore_paths`` left out) is re-hashed: every signed file present and
   equal, every present file signed.

The caller's ``ignore_paths`` EXCLUDE paths, as ``model_signing verify --ignore-paths`` does
and as ``attest.manifest.build_bundle(exclude=...)`` leaves them out of the bundle: the
walk never sees them, so a signed file under an ignored path is *missing* (model_signing
refuses it too), and an unsigned one is simply not part of the model. The signature's own
``ignore_paths`` never excuse a file (model_signing honours them; we name them in the
refusal, so the caller can pass them as ``--ignore-path`` and leave those files out).

Binding to a bundle (``require_signs_bundle``, called by attest.verify): the bundle digest
covers every file, so an OMS signature vouches for it only if it signs every file of the
bundle tree (the same walk, the same exclusions). An empty file left out of a sharded
signature (model_signing makes no shard for it) is in the bundle but unsigned: the
binding is refused.

Raises:
    VerificationError: any step fails; ``OmsFileMismatch`` (a VerificationError) when only
        the files disagree, with ``check`` listing missing, extra and mismatched paths.
    KeyError_: sign_oms cannot load or use the private key.
    TreeRuleError: sign_oms is given a tree that breaks the tree rules.
    ValueError: caller misuse (an absolute or ``..`` ignore path).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from modelward.attest._oms_envelope import (
    OMS_BUNDLE_MEDIA_TYPE,
    curve_hash,
    key_hint,
    verify_envelope,
)
from modelward.attest._oms_manifest import (
    PREDICATE_V1,
    compare,
    file_digest,
    signed_items,
)
from modelward.attest.dsse import pae
from modelward.attest.errors import KeyError_, TreeRuleError, VerificationError
from modelward.attest.sigstore_verify import IN_TOTO_PAYLOAD_TYPE
from modelward.attest.statement import STATEMENT_TYPE, parse_statement
from modelward.attest.tree import BundleFile, is_excluded, normalize_excludes, walk_bundle
from modelward.attest.trust import Signer, TrustSet, VerifiedStatement

__all__ = [
    "OMS_SIGNATURE_FILENAME",
    "OmsFileCheck",
    "OmsFileMismatch",
    "load_oms_signing_key",
    "require_signs_bundle",
    "sign_oms",
    "verify_oms",
]

OMS_SIGNATURE_FILENAME: Final = "model.sig"
# Always left out of a signed tree: the signature itself and directories attest.tree skips.
_ALWAYS_IGNORED: Final = ("model.sig", ".git", ".modelward")


@dataclass(frozen=True)
class OmsFileCheck:
    """How a model tree differs from an OMS signature (paths, sorted)."""

    missing: tuple[str, ...]
    extra: tuple[str, ...]
    mismatched: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.mismatched)


class OmsFileMismatch(VerificationError):  # noqa: N818 - the name is the evidence
    """The signature verified but the model's files do not match it; ``check`` lists how."""

    def __init__(
        self, check: OmsFileCheck, message: str | None = None, *, hint: str | None = None
    ) -> None:
        self.check = check
        if message is None:
            lines = [f"  missing (signed, absent or ignored): {p}" for p in check.missing]
            lines += [f"  extra (present, not signed, not ignored): {p}" for p in check.extra]
            lines += [f"  mismatched (digest differs): {p}" for p in check.mismatched]
            message = "model files do not match the OMS signature:\n" + "\n".join(lines)
        if hint:
            message += f"\n  {hint}"
        super().__init__(message)


def _normalize_ignores(ignore_paths: Sequence[str]) -> tuple[str, ...]:
    return normalize_excludes(ignore_paths)


def _tree(root: Path, ignores: Sequence[str]) -> list[BundleFile]:
    """The model's files, ``ignores`` excluded (never walked); violations are raised."""
    files, violations = walk_bundle(root, ignores)
    if violations:
        raise TreeRuleError(violations)
    return files


def _signature_ignores(statement: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``ignore_paths`` an OMS v1.0 signature records (informational only)."""
    predicate = statement.get("predicate")
    serialization = predicate.get("serialization") if isinstance(predicate, dict) else None
    listed = serialization.get("ignore_paths") if isinstance(serialization, dict) else None
    if not isinstance(listed, list):
        return ()
    return tuple(p for p in listed if isinstance(p, str))


def _extra_hint(extra: Sequence[str], statement: Mapping[str, Any]) -> str | None:
    """When the signature's own ignore_paths name extra files: say how to leave them out."""
    own = _signature_ignores(statement)
    named = sorted({p for path in extra for p in own if is_excluded(path, [p])})
    if not named:
        return None
    flags = " ".join(f"--ignore-path {p}" for p in named)
    return (
        f"hint: the signature's own ignore_paths name {', '.join(named)}; only the "
        f"verifier's list counts: pass {flags} to leave them out of the bundle"
    )


def _dedup(signers: Sequence[Signer]) -> tuple[Signer, ...]:
    seen: dict[str, Signer] = {}
    for signer in signers:
        seen.setdefault(signer.name, signer)
    return tuple(seen.values())


def verify_oms(
    data: bytes, root: Path, trust: TrustSet, ignore_paths: Sequence[str] = ()
) -> VerifiedStatement:
    """Verify an OMS ``model.sig`` and the model directory ``root`` against it; steps (1)-(6).

    Returns the verified statement (kind ``"oms"``); its notes name the files checked.
    Raises VerificationError (``OmsFileMismatch`` for file differences) with every reason.
    """
    ignores = _normalize_ignores(ignore_paths)
    # (1)-(3): the bundle, its signer kind, and the signature against the TrustSet.
    verified = verify_envelope(data, trust)
    # (4): a strict in-toto statement with an OMS predicate.
    statement, predicate_type, subjects = parse_statement(verified.payload)
    # (5): the signed items, consistent with the subject.
    signed = signed_items(predicate_type, statement, subjects)
    # (6): the tree against the items.
    try:
        files = _tree(root, ignores)
    except TreeRuleError as exc:
        raise VerificationError(f"model tree at {root} cannot be verified: {exc}") from None
    # Ignored paths were never walked: a signed file there is missing, as in model_signing.
    missing, extra, mismatched = compare(signed, files)
    check = OmsFileCheck(tuple(missing), tuple(extra), tuple(mismatched))
    if not check.ok:
        raise OmsFileMismatch(check, hint=_extra_hint(extra, statement))
    checked = sorted({item.path for item in signed.items})
    notes = [
        f"OMS {verified.kind} signature; {len(checked)} file(s) match: {', '.join(checked)}",
    ]
    skipped = sorted(f.path for f in files if f.path not in set(checked))
    if skipped:
        notes.append(f"present, not signed (empty in a sharded signature): {', '.join(skipped)}")
    if ignores:
        notes.append(f"excluded (--ignore-path), not part of the model: {', '.join(ignores)}")
    return VerifiedStatement(
        kind="oms",
        payload=verified.payload,
        statement=statement,
        predicate_type=predicate_type,
        subjects=subjects,
        signers=_dedup(verified.signers),
        notes=(*notes, *verified.notes),
    )


def require_signs_bundle(
    stmt: VerifiedStatement, root: Path, bundle_digest: str, ignore_paths: Sequence[str] = ()
) -> None:
    """Refuse unless the OMS statement ``stmt`` (verified by ``verify_oms`` against ``root``)
    signs every file of the bundle tree at ``root`` (less the excluded ``ignore_paths``, as
    ``build_bundle(exclude=...)`` left them out), whose digest is ``bundle_digest``.

    Raises:
        OmsFileMismatch: bundle files the signature does not sign (``check.extra``): empty
            files a sharded signature skips.
        VerificationError: the tree at ``root`` breaks the bundle tree rules.
        ValueError: a bad ignore path.
    """
    signed = signed_items(stmt.predicate_type, stmt.statement, stmt.subjects)
    paths = {item.path for item in signed.items}
    files, violations = walk_bundle(root, ignore_paths)
    if violations:
        problem = TreeRuleError(violations)
        raise VerificationError(f"model tree at {root} is not a bundle: {problem}")
    unsigned = sorted((f for f in files if f.path not in paths), key=lambda f: f.path)
    if not unsigned:
        return
    shown = [
        f"{f.path} (empty: a sharded signature has no shard for it)"
        if signed.shard_size is not None and f.size == 0
        else f.path
        for f in unsigned
    ]
    verb = "is" if len(unsigned) == 1 else "are"
    raise OmsFileMismatch(
        OmsFileCheck((), tuple(f.path for f in unsigned), ()),
        f"OMS signature verified for {len(paths)} file(s); {', '.join(shown)} {verb} in the "
        f"bundle but not signed, so the signature does not vouch for bundle {bundle_digest}",
    )


def load_oms_signing_key(path: Path, passphrase: bytes | None) -> ec.EllipticCurvePrivateKey:
    """The EC private key at ``path`` (PEM, PKCS#8); KeyError_ naming the file otherwise,
    and for an Ed25519 key naming ``modelward key generate --type ecdsa-p256``."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), passphrase)
    except OSError as exc:
        raise KeyError_(f"{path}: cannot read private key: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise KeyError_(f"{path}: cannot load private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        kind = "an Ed25519" if isinstance(key, ed25519.Ed25519PrivateKey) else "not an EC"
        raise KeyError_(
            f"{path}: {kind} key: OMS signing needs an elliptic-curve (P-256) private key, "
            "the only kind model_signing verifies; make one with "
            "`modelward key generate --type ecdsa-p256 --out FILE`"
        )
    try:
        curve_hash(key.public_key())
    except VerificationError as exc:
        raise KeyError_(f"{path}: {exc}") from None
    return key


def _path_order(path: str) -> tuple[str, ...]:
    # model_signing sorts resources as PurePosixPath objects: by their parts.
    return tuple(path.split("/"))


def _oms_payload(root: Path, files: Sequence[BundleFile], ignores: Sequence[str]) -> bytes:
    resources = [
        {"name": f.path, "algorithm": "sha256", "digest": file_digest(f.abspath, "sha256").hex()}
        for f in sorted(files, key=lambda f: _path_order(f.path))
    ]
    root_digest = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources))
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": root.resolve().name, "digest": {"sha256": root_digest.hexdigest()}}],
        "predicateType": PREDICATE_V1,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": "sha256",
                "allow_symlinks": False,
                "ignore_paths": list(dict.fromkeys([*_ALWAYS_IGNORED, *ignores])),
            },
            "resources": resources,
        },
    }
    return json.dumps(statement, indent=2, ensure_ascii=False).encode("utf-8")


def sign_oms(
    root: Path,
    private_key_pem: Path,
    passphrase: bytes | None = None,
    ignore_paths: Sequence[str] = (),
) -> bytes:
    """Write an OMS v1.0 signature (files, sha256) of ``root`` with an EC private key.

    Returns the ``model.sig`` bytes (``model_signing verify key`` accepts them); writes
    nothing. Files under ``ignore_paths`` are left out of the signature and recorded in its
    serialization so model_signing ignores them too. Raises KeyError_, TreeRuleError.
    """
    ignores = _normalize_ignores(ignore_paths)
    key = load_oms_signing_key(private_key_pem, passphrase)
    files = _tree(root, ignores)
    payload = _oms_payload(root, files, ignores)
    signature = key.sign(pae(IN_TOTO_PAYLOAD_TYPE, payload), ec.ECDSA(curve_hash(key.public_key())))
    bundle = {
        "mediaType": OMS_BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": key_hint(key.public_key())},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode("ascii"),
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(signature).decode("ascii"), "keyid": ""}],
        },
    }
    return json.dumps(bundle, indent=2).encode("utf-8") + b"\n"
