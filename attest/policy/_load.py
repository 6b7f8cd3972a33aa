"""Read a policy document and turn its signers into a TrustSet.

``load_policy`` parses bounded YAML (attest._yaml: safe loader, no anchors or aliases, no
duplicate keys, nesting bounded), validates it against attest.policy._model and, when it
knows the policy's directory, loads every key, certificate and trust root it names, so
that a policy with a broken reference never loads. Every error is a ``PolicyError`` whose
message names the source and the field: ``policy.yaml: signers.keys[0].path: file not
found``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError

from modelward.attest._malformed import MALFORMED
from modelward.attest._yaml import StrictYAMLError, load_strict_yaml
from modelward.attest.errors import KeyError_, PolicyError
from modelward.attest.keys import keyid, load_public_key, trusted_key
from modelward.attest.policy._model import Policy
from modelward.attest.trust import TrustedCA, TrustedIdentity, TrustedKey, TrustSet

__all__ = ["MAX_POLICY_BYTES", "load_policy", "policy_trust_set", "trusted_public_key"]

MAX_POLICY_BYTES = 1 << 20  # a policy is a few KiB; anything near a MiB is not a policy
MAX_REFERENCED_FILE_BYTES = 16 << 20  # a PEM bundle or a trusted_root.json


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _message(error: Any) -> str:
    kind, ctx, msg = error["type"], error.get("ctx") or {}, str(error["msg"])
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}"
    return msg.removeprefix("Value error, ")


def _validation_message(source: str, exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        loc = _loc(error["loc"])
        lines.append(f"{source}: {loc + ': ' if loc else ''}{_message(error)}")
    return "\n".join(lines)


def load_policy(
    data: bytes | Path, source: str | None = None, *, base_dir: Path | None = None
) -> Policy:
    """Parse and validate a policy document.

    ``data`` is the document's bytes or a path to it; with a path, ``base_dir`` defaults to
    its directory. When ``base_dir`` is known, every file the policy references is loaded
    now (and refused now if missing or malformed).

    Raises:
        PolicyError: the document is too large, not YAML, or invalid; the message names
            the source and the field at fault.
    """
    if isinstance(data, Path):
        source = source or data.name
        base_dir = base_dir if base_dir is not None else data.parent
        try:
            with data.open("rb") as f:
                raw = f.read(MAX_POLICY_BYTES + 1)
        except OSError as exc:
            raise PolicyError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    else:
        raw = data
    source = source or "policy"
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(f"{source}: larger than {MAX_POLICY_BYTES} bytes")
    try:
        doc = load_strict_yaml(raw)
    except StrictYAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise PolicyError(f"{source}: the document must be a mapping with version: 1")
    try:
        policy = Policy.model_validate(doc)
    except ValidationError as exc:
        raise PolicyError(_validation_message(source, exc)) from exc
    if base_dir is not None or _all_inline(policy):
        policy_trust_set(policy, base_dir, source=source)  # resolve references now
    return policy


def _all_inline(policy: Policy) -> bool:
    s = policy.signers
    return (
        all(k.path is None for k in s.keys)
        and all(_is_pem(c) for ca in s.cas for c in (*ca.roots, *ca.intermediates))
        and all(i.trust_root is None for i in s.identities)
    )


def _is_pem(text: str) -> bool:
    return text.lstrip().startswith("-----BEGIN")


def _read(base_dir: Path | None, ref: str, field: str, source: str) -> tuple[bytes, Path]:
    path = Path(ref)
    if not path.is_absolute():
        if base_dir is None:
            raise PolicyError(
                f"{source}: {field}: relative path {ref!r} but the policy has no directory; "
                "use an absolute path or inline PEM"
            )
        path = base_dir / path
    try:
        with path.open("rb") as f:
            data = f.read(MAX_REFERENCED_FILE_BYTES + 1)
    except FileNotFoundError as exc:
        raise PolicyError(f"{source}: {field}: file not found: {path}") from exc
    except OSError as exc:
        raise PolicyError(f"{source}: {field}: cannot read {path}: {exc.strerror}") from exc
    if len(data) > MAX_REFERENCED_FILE_BYTES:
        raise PolicyError(f"{source}: {field}: {path} is too large")
    return data, path


def _certificates(
    base_dir: Path | None, refs: Sequence[str], field: str, source: str
) -> tuple[x509.Certificate, ...]:
    certs: list[x509.Certificate] = []
    for i, ref in enumerate(refs):
        where = f"{field}[{i}]"
        pem = ref.encode() if _is_pem(ref) else _read(base_dir, ref, where, source)[0]
        try:
            loaded = x509.load_pem_x509_certificates(pem)
        except ValueError as exc:
            raise PolicyError(f"{source}: {where}: not a PEM certificate: {exc}") from exc
        certs.extend(loaded)
    return tuple(certs)


# model_signing signs with P-256, P-384 or P-521 keys; attest.keys (our own signatures)
# accepts only Ed25519 and P-256. Larger NIST curves are trusted for verification only.
_OMS_ONLY_CURVES = (ec.SECP384R1, ec.SECP521R1)


def trusted_public_key(name: str, pem: bytes, source: str) -> TrustedKey:
    """A TrustSet entry from PEM: Ed25519/P-256 (attest.keys), or P-384/P-521 for OMS.

    Raises:
        KeyError_: not a PEM public key, or a refused type (RSA, other curves ...).
    """
    try:
        key = serialization.load_pem_public_key(pem)
    except MALFORMED:
        key = None  # load_public_key below names what is wrong with it
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, _OMS_ONLY_CURVES):
        return TrustedKey(name=name, keyid=keyid(key), public_key=key)
    return trusted_key(name, load_public_key(pem, source))


def policy_trust_set(
    policy: Policy, base_dir: Path | None = None, *, source: str = "policy"
) -> TrustSet:
    """The signers a policy trusts, loaded from their files (relative to ``base_dir``).

    Registered signers (``trust_registered_signers``) are not included: the registry adds
    them as ``extra_trust`` when it evaluates.

    Raises:
        PolicyError: a referenced file is missing or does not hold what the field says.
    """
    keys: list[TrustedKey] = []
    for i, k in enumerate(policy.signers.keys):
        field = f"signers.keys[{i}].{'path' if k.path is not None else 'pem'}"
        if k.path is not None:
            pem, path = _read(base_dir, k.path, field, source)
            origin = str(path)
        else:
            pem, origin = (k.pem or "").encode(), "inline PEM"
        try:
            keys.append(trusted_public_key(k.name, pem, origin))
        except KeyError_ as exc:
            raise PolicyError(f"{source}: {field}: {exc}") from exc
    cas = [
        TrustedCA(
            name=ca.name,
            roots=_certificates(base_dir, ca.roots, f"signers.cas[{i}].roots", source),
            intermediates=_certificates(
                base_dir, ca.intermediates, f"signers.cas[{i}].intermediates", source
            ),
        )
        for i, ca in enumerate(policy.signers.cas)
    ]
    identities: list[TrustedIdentity] = []
    for i, ident in enumerate(policy.signers.identities):
        root: Path | None = None
        if ident.trust_root is not None:
            root = _read(base_dir, ident.trust_root, f"signers.identities[{i}].trust_root", source)[
                1
            ]
        identities.append(TrustedIdentity(ident.name, ident.identity, ident.issuer, root))
    return TrustSet(keys=tuple(keys), cas=tuple(cas), identities=tuple(identities))
