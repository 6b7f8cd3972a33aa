"""Errors raised by attest/.

Every failure about untrusted input carries its evidence. The tree::

    AttestError
    ├── BundleError                 a bundle tree or manifest is not acceptable
    │   ├── TreeRuleError           tree rules broken (path, rule, reason for each)
    │   ├── ManifestError           manifest bytes are malformed or violate the format
    │   └── DigestMismatch          bytes do not hash to the digest that names them
    ├── VerificationError           a signature, envelope or statement does not verify
    │   ├── UntrustedSigner         no signature even claims a trusted signer (not tampering)
    │   ├── UnknownSignatureFormat  the bytes are no signature format we understand
    │   └── SubjectMismatch         a statement is about another bundle
    ├── PolicyError                 a policy document is invalid (names the field)
    └── KeyError_                   a key file cannot be read, decrypted or used

Caller misuse (wrong argument types, impossible options) is a plain ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class AttestError(Exception):
    """Root of every error attest/ raises about input it was given."""


class BundleError(AttestError):
    """A bundle tree or manifest is not acceptable."""


@dataclass(frozen=True)
class TreeViolation:
    """One broken tree rule: the path at fault, a rule id and a human reason."""

    path: str
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}: {self.reason}"


class TreeRuleError(BundleError):
    """The tree breaks one or more tree rules; ``violations`` lists every one."""

    def __init__(self, violations: Sequence[TreeViolation]) -> None:
        self.violations = tuple(violations)
        lines = "\n".join(f"  {v}" for v in self.violations)
        super().__init__(f"bundle tree breaks {len(self.violations)} rule(s):\n{lines}")


class ManifestError(BundleError):
    """Manifest bytes are malformed or violate the bundle format."""


class DigestMismatch(BundleError):  # noqa: N818 - the name is the evidence
    """Bytes do not hash to the digest that names them."""

    def __init__(self, path: str, expected: str, actual: str) -> None:
        self.path = path
        self.expected = expected
        self.actual = actual
        super().__init__(f"{path}: digest mismatch: expected {expected}, got {actual}")


class VerificationError(AttestError):
    """A signature, envelope or statement does not verify."""


class UntrustedSigner(VerificationError):  # noqa: N818 - the name is the evidence
    """No signature on the attestation claims a signer the verifier trusts.

    Unknown signer is not bad signature (TUF, sigstore): such an attestation vouches for
    nothing and is *ignored* by the bundle verifier, never a reason to deny. A signature
    that claims a trusted key and fails is plain ``VerificationError``: tampering.
    """


class UnknownSignatureFormat(VerificationError):  # noqa: N818
    """The bytes are not a signature format attest/ understands."""


class SubjectMismatch(VerificationError):  # noqa: N818
    """A statement's subject is not the bundle being verified."""

    def __init__(self, expected: str, subjects: Sequence[str]) -> None:
        self.expected = expected
        self.subjects = tuple(subjects)
        super().__init__(
            f"statement is not about bundle {expected}; its subjects are "
            f"{', '.join(self.subjects) or '(none)'}"
        )


class PolicyError(AttestError):
    """A policy document is invalid; the message names the field at fault."""


class KeyError_(AttestError):  # noqa: N801, N818 - KeyError is a builtin
    """A key file cannot be read, decrypted or used."""
