"""The shared vocabulary of verification: who is trusted, and what was verified.

A ``TrustSet`` names the signers a verifier trusts (built from a policy, from command-line
flags, or by the registry from its registered keys). Verifiers return
``VerifiedStatement`` objects that say which trusted signers vouched for which statement;
the policy evaluator (attest.policy) counts them against a threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

SignatureKind = Literal["dsse", "sigstore", "oms"]
SignerKind = Literal["key", "x509", "sigstore"]


@dataclass(frozen=True)
class TrustedKey:
    """A public key trusted under a name; ``keyid`` is attest.keys.keyid(public_key)."""

    name: str
    keyid: str
    public_key: PublicKeyTypes


@dataclass(frozen=True)
class TrustedCA:
    """An X.509 CA trusted under a name; ``roots`` anchor, ``intermediates`` may chain."""

    name: str
    roots: tuple[x509.Certificate, ...]
    intermediates: tuple[x509.Certificate, ...] = ()


@dataclass(frozen=True)
class TrustedIdentity:
    """A Sigstore keyless identity (exact SAN and OIDC issuer) under a trust root file.

    ``trust_root`` None means the public-good production root shipped in sigstore-python.
    """

    name: str
    identity: str
    issuer: str
    trust_root: Path | None = None


@dataclass(frozen=True)
class TrustSet:
    """Every signer a verifier trusts. An empty set trusts nobody (never everybody)."""

    keys: tuple[TrustedKey, ...] = ()
    cas: tuple[TrustedCA, ...] = ()
    identities: tuple[TrustedIdentity, ...] = ()

    def is_empty(self) -> bool:
        return not (self.keys or self.cas or self.identities)

    def names(self) -> list[str]:
        return [
            *(k.name for k in self.keys),
            *(c.name for c in self.cas),
            *(i.name for i in self.identities),
        ]

    def merged(self, other: TrustSet) -> TrustSet:
        """Both sets together. Raises ``ValueError`` when a signer name appears in both:
        signers are counted by name, so one name must never stand for two signers."""
        clash = sorted(set(self.names()) & set(other.names()))
        if clash:
            raise ValueError(f"signer name {clash[0]!r} is trusted twice, for different signers")
        return TrustSet(
            keys=self.keys + other.keys,
            cas=self.cas + other.cas,
            identities=self.identities + other.identities,
        )


@dataclass(frozen=True)
class Signer:
    """A trusted signer that produced a valid signature: the TrustSet entry's name and kind."""

    name: str
    kind: SignerKind
    detail: str  # key id, certificate subject, or "identity (issuer)"


@dataclass(frozen=True)
class Subject:
    name: str
    digest: Mapping[str, str]


@dataclass(frozen=True)
class VerifiedStatement:
    """An in-toto statement whose signature verified against a TrustSet.

    ``payload`` holds the exact signed bytes; ``statement`` is their parsed JSON.
    ``signers`` is deduplicated by signer name: one trusted signer counts once.
    """

    kind: SignatureKind
    payload: bytes
    statement: Mapping[str, Any]
    predicate_type: str
    subjects: tuple[Subject, ...]
    signers: tuple[Signer, ...]
    notes: tuple[str, ...] = field(default=())
