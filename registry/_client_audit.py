"""``modelward audit verify``: fetch the audit log (through the API, or straight from a
database) and hand the bytes to the pure checkers (docs/registry.md#checkpoints).

- ``events_from_api`` / ``events_from_database`` yield ``attest.audit.chain.AuditEvent`` in
  sequence order.
- ``verify_through_api`` / ``verify_database`` re-hash the log
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
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from modelward.attest.audit.chain import AuditEvent, event_from_json
from modelward.attest.audit.checkpoint import (
    Checkpoint,
    TrustedLog,
    open_checkpoint,
    unsafe_read_checkpoint,
    verify_log,
)
from modelward.attest.audit.signed_note import NoteVerifier, parse_verifier_key
from modelward.attest.audit.tree import fold, perfect_cover

if TYPE_CHECKING:
    from modelward.registry.client import RegistryClient

__all__ = [
    "AuditReport",
    "CheckpointSource",
    "checkpoint_from_answer",
    "events_from_api",
    "events_from_database",
    "proof_from_answer",
    "verify_database",
    "verify_through_api",
    "witness_checkpoint",
]


@dataclass(frozen=True)
class AuditReport:
    """What ``audit verify`` checked: ``events`` re-hashed; ``checkpoints`` whose roots they
    matched; ``since``: the saved checkpoint the log was proven to extend (or None)."""

    events: int
    checkpoints: tuple[Checkpoint, ...]
    since: Checkpoint | None = None


def events_from_api(client: RegistryClient, page: int = 500) -> Iterator[AuditEvent]:
    """Every event from GET /v1/audit, page by page. Raises ValueError for a malformed event."""
    for obj in client.iter_audit(after=0, page=page):
        yield event_from_json(obj)


def events_from_database(url: str) -> Iterator[AuditEvent]:
    """Every row of ``audit_events`` ordered by seq, read with SQLAlchemy (read-only use)."""
    import sqlalchemy as sa

    from modelward.registry.models import AuditRow

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(AuditRow.__table__).order_by(AuditRow.seq))
            for row in rows:
                try:
                    details = json.loads(row.details)
                except ValueError as exc:
                    raise ValueError(f"seq {row.seq}: details are not JSON ({exc})") from exc
                if not isinstance(details, dict):
                    raise TypeError(f"seq {row.seq}: details are not an object")
                yield AuditEvent(
                    seq=int(row.seq),
                    at=str(row.at),
                    actor=str(row.actor),
                    action=str(row.action),
                    subject=str(row.subject),
                    details=details,
                    prev_hash=str(row.prev_hash),
                    hash=str(row.hash),
                )
    finally:
        engine.dispose()


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


def _database_tree(url: str) -> tuple[int, bytes, list[tuple[str, str]]]:
    """(tree size, root from the stored nodes, stored checkpoints as (key, note)) of a
    database."""
    import sqlalchemy as sa

    from modelward.registry.domains.audit.tree import TreeIncomplete
    from modelward.registry.models import AuditCheckpointRow, AuditNode

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            last = conn.execute(
                sa.select(sa.func.max(AuditNode.idx)).where(AuditNode.level == 0)
            ).scalar()
            size = 0 if last is None else int(last) + 1
            wanted = perfect_cover(0, size) if size else []
            found: dict[tuple[int, int], bytes] = {}
            for lv, ix in wanted:
                digest = conn.execute(
                    sa.select(AuditNode.hash).where(AuditNode.level == lv, AuditNode.idx == ix)
                ).scalar()
                if digest is not None:
                    found[(lv, ix)] = bytes(digest)
            if set(wanted) - set(found):
                raise TreeIncomplete(set(wanted) - set(found))
            notes = [
                (str(key), str(note))
                for key, note in conn.execute(
                    sa.select(AuditCheckpointRow.key, AuditCheckpointRow.note).order_by(
                        AuditCheckpointRow.id
                    )
                )
            ]
    finally:
        engine.dispose()
    return size, fold([found[n] for n in wanted]), notes


def verify_database(
    url: str, *, verifier: NoteVerifier | None, since: bytes | None = None
) -> AuditReport:
    """Re-hash the events of the database at ``url`` against its stored Merkle tree, against
    every checkpoint stored there that the pinned ``verifier`` signed, and against ``since``
    (a saved checkpoint; needs ``verifier``). Raises as ``verify_through_api``, TreeIncomplete
    and SQLAlchemy errors."""
    old: Checkpoint | None = None
    if since is not None:
        if verifier is None:
            raise ValueError("checking a log against a saved checkpoint needs the pinned key")
        old = TrustedLog(since, verifier).trusted
    size, root, notes = _database_tree(url)
    stored = Checkpoint("the database's stored tree", size, root, b"", None)
    checkpoints: list[Checkpoint] = [stored]
    if verifier is not None:  # checkpoints stored as signed by other keys are ignored
        checkpoints += [
            open_checkpoint(note.encode(), verifier) for key, note in notes if key == verifier.label
        ]
    if old is not None:
        checkpoints.append(old)
    count = verify_log(events_from_database(url), checkpoints)
    return AuditReport(count, tuple(checkpoints), old)


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
