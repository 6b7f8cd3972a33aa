"""Verify Sigstore bundles holding DSSE in-toto statements, fully offline (docs/attestations.md).

A Sigstore bundle (``application/vnd.dev.sigstore.bundle*+json``) carries a short-lived
Fulcio certificate, a DSSE envelope signed with its key, and transparency-log evidence
(an inclusion proof and/or signed timestamps). sigstore-python's ``Verifier`` checks all of
it against a *trust root file* — never a TUF refresh, so nothing here touches the network.
Each ``TrustedIdentity`` names an exact certificate identity (SAN) and OIDC issuer, and the
trust root to check them under (``None``: the public-good production root shipped inside
sigstore-python).

Steps of ``verify_sigstore_bundle``:

1. The bytes are a JSON object whose ``mediaType`` is a known Sigstore bundle type.
2. sigstore-python parses the bundle (its own invariants) and it holds a DSSE envelope.
3. For each trusted identity: its identity and issuer are non-empty (sigstore skips the
   check of an empty one), and the chain to the trust root's Fulcio CA, the SCT, the log
   entry and/or timestamps, the identity policy and the DSSE signature all verify. One
   (identity, issuer) counts once, however many names it is trusted under.
4. At least one identity verified; the payload type is in-toto JSON.
5. The payload is a strict in-toto Statement v1.

Raises:
    VerificationError: the bundle is malformed, of an unknown media type, or no trusted
        identity verified it (the message holds one reason per identity tried).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from sigstore.errors import Error as SigstoreError
from sigstore.models import Bundle, TrustedRoot
from sigstore.verify import Verifier, policy

from modelward.attest._malformed import MALFORMED, describe
from modelward.attest.errors import UntrustedSigner, VerificationError
from modelward.attest.statement import parse_statement, strict_json_loads
from modelward.attest.trust import Signer, TrustedIdentity, TrustSet, VerifiedStatement

__all__ = [
    "BUNDLE_MEDIA_TYPES",
    "IN_TOTO_PAYLOAD_TYPE",
    "DsseResult",
    "load_trusted_root",
    "verify_sigstore_bundle",
    "verify_sigstore_dsse",
]

IN_TOTO_PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
BUNDLE_MEDIA_TYPES: Final = frozenset(str(t) for t in Bundle.BundleType)
MAX_BUNDLE_BYTES: Final = 64 * 2**20

# The public-good production trust root as embedded in the sigstore-python distribution
# (the directory name is its quoted TUF URL). Read from the package, never fetched.
_EMBEDDED_STORE: Final = "sigstore._store"
_PRODUCTION_DIR: Final = "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev"


@dataclass(frozen=True)
class DsseResult:
    """A verified DSSE envelope: its payload type, exact payload and the signers that vouched.

    ``notes`` says which trusted names were not counted again (same identity and issuer).
    """

    payload_type: str
    payload: bytes
    signers: tuple[Signer, ...]
    notes: tuple[str, ...] = ()


def load_trusted_root(path: Path | None) -> TrustedRoot:
    """Load a trust root file offline; ``None`` loads the production root embedded in sigstore.

    Raises VerificationError if the file is missing or is no Sigstore trusted root.
    """
    try:
        if path is None:
            embedded = resources.files(_EMBEDDED_STORE).joinpath(
                _PRODUCTION_DIR, "trusted_root.json"
            )
            with resources.as_file(embedded) as file:
                return TrustedRoot.from_file(str(file))
        return TrustedRoot.from_file(str(path))
    except (OSError, ValueError, SigstoreError) as exc:
        where = "the embedded production trust root" if path is None else str(path)
        raise VerificationError(f"cannot load Sigstore trust root {where}: {exc}") from None


def check_bundle_media_type(data: bytes) -> str:
    """(1): ``data`` is a JSON object with a known Sigstore bundle media type; return it."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise VerificationError(
            f"Sigstore bundle is {len(data)} bytes, over the {MAX_BUNDLE_BYTES}-byte limit"
        )
    document = strict_json_loads(data, "Sigstore bundle")
    if not isinstance(document, dict):
        raise VerificationError("Sigstore bundle is not a JSON object")
    media_type = document.get("mediaType")
    if not isinstance(media_type, str) or media_type not in BUNDLE_MEDIA_TYPES:
        raise VerificationError(
            f"unknown Sigstore bundle media type {media_type!r}; expected one of "
            f"{', '.join(sorted(BUNDLE_MEDIA_TYPES))}"
        )
    return str(media_type)


# sigstore-python's own errors, and what its dependencies let through on malformed bytes
_REFUSED: Final[tuple[type[Exception], ...]] = (SigstoreError, *MALFORMED)


def _verify_one(bundle: Bundle, identity: TrustedIdentity) -> tuple[str, bytes]:
    """(3): verify ``bundle`` for one identity under its trust root; raise with the reason."""
    # sigstore's policy.Identity(issuer="") verifies the SAN alone, with no issuer check.
    for field, value in (("identity", identity.identity), ("issuer", identity.issuer)):
        if not value.strip():
            raise VerificationError(f"the trusted identity's {field} is empty; refusing it")
    root = load_trusted_root(identity.trust_root)
    try:
        verifier = Verifier(trusted_root=root)
        return verifier.verify_dsse(
            bundle, policy.Identity(identity=identity.identity, issuer=identity.issuer)
        )
    except SigstoreError as exc:
        raise VerificationError(str(exc)) from None
    except MALFORMED as exc:
        raise VerificationError(f"malformed Sigstore bundle: {describe(exc)}") from None


def _names(bundle: Bundle, identity: TrustedIdentity) -> bool:
    """True if the bundle's signing certificate is for ``identity`` (SAN and issuer); this
    says who the bundle claims to be, not that anything verified."""
    if not identity.identity.strip() or not identity.issuer.strip():
        return True  # let (3) refuse the empty identity with its reason
    try:
        policy.Identity(identity=identity.identity, issuer=identity.issuer).verify(
            bundle.signing_certificate
        )
    except _REFUSED:
        return False  # a certificate without the identity extensions names nobody
    return True


def verify_sigstore_dsse(data: bytes, identities: Sequence[TrustedIdentity]) -> DsseResult:
    """Verify a Sigstore bundle's DSSE envelope against each identity; steps (1)-(4).

    Raises UntrustedSigner when the certificate names no trusted identity, and
    VerificationError (one reason per identity tried) when one it names does not verify.
    """
    # (1): a known Sigstore bundle media type.
    check_bundle_media_type(data)
    # (2): sigstore-python's own parse, and a DSSE envelope inside.
    try:
        bundle = Bundle.from_json(data)
        envelope = bundle._dsse_envelope  # sigstore-python has no public accessor for it
    except _REFUSED as exc:
        raise VerificationError(f"invalid Sigstore bundle: {describe(exc)}") from None
    if envelope is None:
        raise VerificationError("Sigstore bundle holds no DSSE envelope (a bare signature)")
    if not identities:
        raise UntrustedSigner("no trusted Sigstore identity to verify a Sigstore bundle with")
    # (3): only identities the signing certificate names are tried: a certificate for an
    #      identity nobody trusts is an unknown signer, not a bad signature.
    claimed = [i for i in identities if _names(bundle, i)]
    if not claimed:
        raise UntrustedSigner(
            "Sigstore bundle's certificate names no trusted identity (trusted: "
            + "; ".join(f"{i.name} ({i.identity}, {i.issuer})" for i in identities)
            + ")"
        )
    identities = claimed
    # (3): each trusted identity, each under its own trust root.
    reasons: list[str] = []
    signers: list[Signer] = []
    notes: list[str] = []
    counted: dict[tuple[str, str], str] = {}  # (identity, issuer) -> the name it counted as
    verified: tuple[str, bytes] | None = None
    for identity in identities:
        same = counted.get((identity.identity, identity.issuer))
        if same is not None:
            if same != identity.name:
                notes.append(
                    f"{identity.name}: same identity and issuer as {same}, already counted"
                )
            continue
        try:
            result = _verify_one(bundle, identity)
        except VerificationError as exc:
            reasons.append(f"{identity.name} ({identity.identity}, {identity.issuer}): {exc}")
            continue
        verified = result
        counted[(identity.identity, identity.issuer)] = identity.name
        if all(s.name != identity.name for s in signers):
            signers.append(
                Signer(identity.name, "sigstore", f"{identity.identity} ({identity.issuer})")
            )
    # (4): at least one identity verified, and the payload is in-toto JSON.
    if verified is None:
        raise VerificationError(
            "Sigstore bundle did not verify for any trusted identity:\n"
            + "\n".join(f"  {r}" for r in reasons)
        )
    payload_type, payload = verified
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise VerificationError(
            f"DSSE payload type is {payload_type!r}, expected {IN_TOTO_PAYLOAD_TYPE!r}"
        )
    return DsseResult(payload_type, payload, tuple(signers), tuple(notes))


def verify_sigstore_bundle(data: bytes, trust: TrustSet) -> VerifiedStatement:
    """Verify a Sigstore bundle with a DSSE in-toto statement offline; steps (1)-(5).

    Returns the statement with the exact signed payload bytes and every trusted identity
    that verified it. Raises VerificationError with every reason otherwise.
    """
    result = verify_sigstore_dsse(data, trust.identities)
    # (5): the payload is a strict in-toto Statement v1.
    statement, predicate_type, subjects = parse_statement(result.payload)
    return VerifiedStatement(
        kind="sigstore",
        payload=result.payload,
        statement=statement,
        predicate_type=predicate_type,
        subjects=subjects,
        signers=result.signers,
        notes=result.notes,
    )
