"""``modelward audit verify`` through the API: fetch the audit log and hand the bytes to the
pure checkers (docs/registry.md#checkpoints). Reading a database directly is the server
wing's (``modelward.registry.domains.audit.offline``).

- ``events_from_api`` yields ``attest.audit.chain.AuditEvent`` in sequence order.
- ``verify_through_api`` re-hashes the log
  (``attest.audit.checkpoint.verify_log``: the hash chain and the Merkle roots) against the
  checkpoints they gather, and, given a checkpoint saved earlier and the pinned key, prove the
  log only grew since (``attest.audit.checkpoint.TrustedLog``).
- ``witness_checkpoint``: what a serving worker records of the checkpoint it saw at boot.

Nothing here decides: every verdict is raised by attest.audit (checkpoint, tree, signed_note,
chain) as an ``attest.errors.AuditVerificationError`` with its evidence; the CLI reports it
(exit 1), never as a crash.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from modelward.attest.audit.chain import AuditEvent, event_from_json
from modelward.attest.audit.checkpoint import (
    AuditReport,
    Checkpoint,
    TrustedLog,
    open_checkpoint,
    unsafe_read_checkpoint,
    verify_log,
)
from modelward.attest.audit.signed_note import NoteVerifier, parse_verifier_key

if TYPE_CHECKING:
    from modelward.client.api import RegistryClient

__all__ = [
    "CheckpointSource",
    "checkpoint_from_answer",
    "events_from_api",
    "proof_from_answer",
    "verify_through_api",
    "witness_checkpoint",
]


def events_from_api(client: RegistryClient, page: int = 500) -> Iterator[AuditEvent]:
    """Every event from GET /v1/audit, page by page. Raises ValueError for a malformed event."""
    for obj in client.iter_audit(after=0, page=page):
        yield event_from_json(obj)


def checkpoint_from_answer(answer: Mapping[str, Any]) -> bytes:
    """The signed note bytes of a GET /v1/audit/checkpoint answer (nothing else in the answer
    is used). Raises ValueError."""
    note = answer.get("checkpoint") if isinstance(answer, Mapping) else None
    if not isinstance(note, str):
        raise ValueError("the checkpoint answer has no 'checkpoint' note")  # noqa: TRY004
    return note.encode()


def proof_from_answer(answer: Mapping[str, Any]) -> list[bytes]:
    """The hashes of a proof answer's ``proof`` list. Raises ValueError."""
    items = answer.get("proof") if isinstance(answer, Mapping) else None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValueError("the proof answer has no 'proof' list of base64 strings")
    try:
        return [base64.b64decode(i, validate=True) for i in items]
    except binascii.Error as exc:
        raise ValueError(f"a proof hash is not base64: {exc}") from exc


def _open(note: bytes, verifier: NoteVerifier | None) -> Checkpoint:
    return open_checkpoint(note, verifier) if verifier else unsafe_read_checkpoint(note)


def verify_through_api(
    client: RegistryClient, *, verifier: NoteVerifier | None, since: bytes | None = None
) -> AuditReport:
    """Re-hash the log served by ``client`` into its current checkpoint (signature checked
    when ``verifier`` is given) and, with ``since`` (a saved checkpoint; needs ``verifier``),
    prove the log only grew since. Raises AuditVerificationError (BrokenChain, LogRewritten,
    InvalidProof, NoteError, MalformedCheckpoint; TrustedCheckpointRefused for ``since``),
    ValueError (malformed answers), client errors."""
    trusted: TrustedLog | None = None
    if since is not None:
        if verifier is None:
            raise ValueError("checking a log against a saved checkpoint needs the pinned key")
        trusted = TrustedLog(since, verifier)
    note = checkpoint_from_answer(client.audit_checkpoint())
    current = _open(note, verifier)
    old: Checkpoint | None = None
    if trusted is not None:
        old = trusted.trusted
        proof: list[bytes] = []
        if current.size >= old.size:  # a smaller log: advance() names it without a proof
            proof = proof_from_answer(client.audit_consistency_proof(old.size, current.size))
        current = trusted.advance(note, proof)
    same = old is not None and (old.size, old.root) == (current.size, current.root)
    checkpoints = (current,) if old is None or same else (old, current)
    count = verify_log(events_from_api(client), checkpoints)
    return AuditReport(count, checkpoints, old)


class CheckpointSource(Protocol):
    def audit_checkpoint(self) -> dict[str, Any]: ...


def witness_checkpoint(source: CheckpointSource, verifier_key: str | None) -> dict[str, Any]:
    """What a serving worker records of the registry's current checkpoint: origin, size,
    root, the note itself, and whether the pinned key verified it. With ``verifier_key`` a
    checkpoint that does not verify raises (NoteError, MalformedCheckpoint); without one it is
    recorded unverified. Raises client errors and ValueError for a malformed answer."""
    note = checkpoint_from_answer(source.audit_checkpoint())
    checkpoint = _open(note, parse_verifier_key(verifier_key) if verifier_key else None)
    return {
        "origin": checkpoint.origin,
        "tree_size": checkpoint.size,
        "root_hash": checkpoint.root_b64,
        "verified_by": checkpoint.verified_by,
        "checkpoint": note.decode(),
    }
