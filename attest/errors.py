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
    ├── KeyError_                   a key file cannot be read, decrypted or used
    ├── StaleProposal               a TUF proposal is not the next version of its role any more
    │                               (compare-and-swap: the role moved on; propose again)
    └── AuditVerificationError      the audit log, a signed note, a checkpoint or a proof about
        │                           them is malformed or does not verify (attest.audit)
        ├── BrokenChain             the hash chain breaks at ``seq`` (a row changed, removed,
        │                           inserted or reordered)
        ├── InvalidProof            an RFC 9162 inclusion or consistency proof does not lead
        │                           from its inputs to the root(s)
        ├── NoteError               a C2SP signed note or note key is wrong
        │   ├── MalformedKey        a key string that is not one (names the part)
        │   ├── MalformedNote       not a signed note (size, encoding, layout)
        │   ├── UnverifiedNote      no signature by the pinned key (names the keys that did sign)
        │   └── BadNoteSignature    a signature by the pinned key's name and id that fails
        └── CheckpointError         a checkpoint of the audit log is refused
            ├── MalformedCheckpoint the note's text is not a checkpoint of the pinned log
            ├── LogRewritten        fewer events than a checkpoint counted, or events that do
            │                       not hash to its root (edited, removed or reordered since)
            └── TrustedCheckpointRefused the checkpoint a verifier starts from (saved earlier)
                                    does not open with the pinned key (``cause`` says why)

Every ``AuditVerificationError`` has a stable ``code`` and its evidence in ``detail`` (a
JSON-able dict): the registry and the CLI report them as they are, never as a server fault.

Caller misuse (wrong argument types, impossible options) is a plain ``ValueError``.

Elsewhere in attest/, each next to its one raiser: ``SpecError`` and ``LayoutError``
(BundleError), ``OmsFileMismatch`` and ``ReleaseRecordInvalid`` (VerificationError),
``PolicyBelowFloor`` (PolicyError), ``PolicyDenied``, ``EvaluationError`` (``ResultsError``,
``PredicateError``), ``AliasMoveRefused``.

The registry's HTTP answers are registry.errors, the HTTP client's errors
registry._client_errors, the worker's loader.errors: one class per concept across the three
(tests/attest/test_error_tree.py); the registry and the loader re-use these, never copy them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


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


class StaleProposal(AttestError):  # noqa: N818 - a domain name, like python-tuf's errors
    """A proposed version is not the next version of its role any more (the role moved on
    since the proposal was made: a failed compare-and-swap). Evidence: ``role``,
    ``proposed``, ``current``."""

    def __init__(self, role: str, proposed: int, current: int) -> None:
        super().__init__(
            f"role {role}: the proposal is version {proposed}, but the role is at version "
            f"{current} now; propose again from the current version"
        )
        self.role, self.proposed, self.current = role, proposed, current


# -- the audit log (attest.audit) ---------------------------------------------------------------
class AuditVerificationError(AttestError):
    """The audit log, a signed note, a checkpoint or a proof is malformed or does not verify.

    ``code`` is a stable machine name; ``detail`` the evidence (JSON-able, never a secret).
    """

    code: ClassVar[str] = "audit_verification_failed"

    def __init__(self, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail: dict[str, Any] = dict(detail or {})


class BrokenChain(AuditVerificationError):  # noqa: N818 - the name is the finding
    """The chain breaks at ``seq``; ``reason`` says how."""

    code = "broken_chain"

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        self.reason = reason
        super().__init__(f"audit chain broken at seq {seq}: {reason}", detail={"seq": seq})


class InvalidProof(AuditVerificationError):  # noqa: N818 - the name is the finding
    """A Merkle proof that does not verify; ``kind`` is ``inclusion`` or ``consistency``."""

    code = "invalid_proof"

    def __init__(self, kind: str, reason: str, **evidence: int) -> None:
        self.kind = kind
        self.reason = reason
        self.evidence = evidence
        where = ", ".join(f"{k} {v}" for k, v in evidence.items())
        super().__init__(
            f"{kind} proof ({where}) does not verify: {reason}", detail={"kind": kind, **evidence}
        )


class NoteError(AuditVerificationError):
    """Root of the signed-note errors."""

    code = "invalid_note"


class MalformedKey(NoteError):  # noqa: N818 - the name is the finding
    """A note key string (verifier or signer) that is not one; the message names the part."""

    code = "invalid_note_key"


class MalformedNote(NoteError):  # noqa: N818 - the name is the finding
    """Bytes that are not a signed note (size, encoding, layout)."""

    code = "invalid_note"


class UnverifiedNote(NoteError):  # noqa: N818 - the name is the finding
    """No signature by the pinned key; ``signers`` are the ``name+id`` pairs that did sign."""

    code = "unverified_note"

    def __init__(self, pinned: str, signers: list[str]) -> None:
        self.pinned = pinned
        self.signers = signers
        seen = ", ".join(signers) or "none"
        super().__init__(
            f"no signature by the pinned key {pinned} (signed by: {seen})",
            detail={"pinned": pinned, "signers": signers},
        )


class BadNoteSignature(NoteError):  # noqa: N818 - the name is the finding
    """A signature line names the pinned key (name and id) but does not verify."""

    code = "bad_note_signature"

    def __init__(self, pinned: str) -> None:
        self.pinned = pinned
        super().__init__(
            f"the signature by {pinned} does not verify: the note was changed or forged",
            detail={"pinned": pinned},
        )


class CheckpointError(AuditVerificationError):
    """A checkpoint of the audit log is refused."""

    code = "invalid_checkpoint"


class MalformedCheckpoint(CheckpointError):  # noqa: N818 - the name is the finding
    """The note's text is not a checkpoint (origin, size, root) of the pinned log."""

    code = "invalid_checkpoint"


class LogRewritten(CheckpointError):  # noqa: N818 - the name is the finding
    """The events do not add up to a checkpoint: ``size`` is the checkpoint's tree size."""

    code = "log_rewritten"

    def __init__(self, size: int, reason: str, **evidence: object) -> None:
        self.size = size
        self.reason = reason
        super().__init__(
            f"the audit log no longer matches the checkpoint of size {size}: {reason}",
            detail={"tree_size": size, **evidence},
        )


class TrustedCheckpointRefused(CheckpointError):  # noqa: N818 - the name is the finding
    """The checkpoint a verifier starts from (saved earlier, ``TrustedLog``) does not open
    with the pinned key; ``cause`` is the error that says why (a ``NoteError`` or
    ``MalformedCheckpoint``)."""

    code = "trusted_checkpoint_refused"

    def __init__(self, cause: AuditVerificationError) -> None:
        self.cause = cause
        super().__init__(
            f"the trusted checkpoint (saved earlier) is refused: {cause}",
            detail={"cause": cause.code, **cause.detail},
        )
