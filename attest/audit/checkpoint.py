"""Signed checkpoints of the audit log, and the one object that decides "this log only grew":
pure logic, no I/O (docs/registry.md#checkpoints).

A checkpoint is a C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): a signed note
(attest.audit.signed_note) whose text is three lines::

    <origin>
    <tree size, decimal, no leading zeros>
    <base64 of the 32-byte RFC 6962 root hash>

signed by the registry's checkpoint key, whose key name is the origin. The tree is
attest.audit.tree over the events' entries (attest.audit.chain.event_entry), event ``seq``
being leaf ``seq - 1``.

``TrustedLog`` holds a checkpoint verified with a pinned key and moves to a newer one only
after every check passed (the steps are numbered on ``advance``). ``verify_log`` re-hashes the
events in one pass: the hash chain, and the Merkle root over the first ``size`` events against
each checkpoint given. Errors (attest.errors)::

    AuditVerificationError
    ├── NoteError               attest.audit.signed_note: malformed, unsigned or forged notes
    ├── InvalidProof            attest.audit.tree: an inclusion or consistency proof fails
    ├── BrokenChain             attest.audit.chain: the hash chain breaks at a seq
    └── CheckpointError
        ├── MalformedCheckpoint the note's text is not a checkpoint of the pinned log
        ├── LogRewritten        fewer events than a checkpoint counted, or events that do not
        │                       hash to its root (edited, removed or reordered since)
        └── TrustedCheckpointRefused  the checkpoint ``TrustedLog`` starts from does not open
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from modelward.attest.audit.chain import AuditEvent, event_entry, verify_chain
from modelward.attest.audit.signed_note import (
    MAX_NOTE_BYTES,
    MalformedNote,
    NoteSigner,
    NoteVerifier,
    open_note,
    sign_note,
)
from modelward.attest.audit.tree import (
    HASH_SIZE,
    CompactRange,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from modelward.attest.errors import (
    AuditVerificationError,
    CheckpointError,
    LogRewritten,
    MalformedCheckpoint,
    TrustedCheckpointRefused,
)

__all__ = [
    "AuditReport",
    "Checkpoint",
    "CheckpointError",
    "LogRewritten",
    "MalformedCheckpoint",
    "TrustedCheckpointRefused",
    "TrustedLog",
    "checkpoint_text",
    "open_checkpoint",
    "sign_checkpoint",
    "unsafe_read_checkpoint",
    "verify_event_inclusion",
    "verify_log",
]

log = logging.getLogger(__name__)
_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint and the exact note bytes it came from. ``verified_by`` is the label
    (``name+id``) of the pinned key that verified it, or None when read unverified."""

    origin: str
    size: int
    root: bytes
    note: bytes
    verified_by: str | None

    @property
    def root_b64(self) -> str:
        return base64.b64encode(self.root).decode()


@dataclass(frozen=True)
class AuditReport:
    """What an audit verification checked: ``events`` re-hashed; ``checkpoints`` whose roots
    they matched; ``since``: the saved checkpoint the log was proven to extend (or None)."""

    events: int
    checkpoints: tuple[Checkpoint, ...]
    since: Checkpoint | None = None


def checkpoint_text(origin: str, size: int, root: bytes) -> bytes:
    """The note text of a checkpoint (no extension lines)."""
    if size < 0 or len(root) != HASH_SIZE:
        raise ValueError("a checkpoint has a size >= 0 and a 32-byte root")
    return f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n".encode()


def sign_checkpoint(signer: NoteSigner, size: int, root: bytes) -> bytes:
    """The signed checkpoint note for ``(size, root)``; the origin is the key's name."""
    return sign_note(checkpoint_text(signer.name, size, root), signer)


def _parse_text(text: bytes) -> tuple[str, int, bytes]:
    """(origin, size, root) of a checkpoint text; raises MalformedCheckpoint."""
    lines = text.decode().split("\n")
    # the text ends in a newline: at least origin, size, root and the empty tail
    if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
        raise MalformedCheckpoint(
            "a checkpoint's text is at least three non-empty lines (origin, size, root hash)"
        )
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if not _SIZE.fullmatch(size_text):
        raise MalformedCheckpoint(f"tree size {size_text[:40]!r} is not a decimal number")
    try:
        root = base64.b64decode(root_text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedCheckpoint(f"root hash {root_text[:60]!r} is not base64") from exc
    if len(root) != HASH_SIZE:
        raise MalformedCheckpoint(f"root hash is {len(root)} bytes, not {HASH_SIZE}")
    return origin, int(size_text), root


def open_checkpoint(
    note: bytes, verifier: NoteVerifier, *, max_bytes: int = MAX_NOTE_BYTES
) -> Checkpoint:
    """Verify a checkpoint note with the pinned key. Raises NoteError subclasses and
    MalformedCheckpoint."""
    # (1): a signed note with a valid signature by the pinned key (attest.audit.signed_note).
    text = open_note(note, verifier, max_bytes=max_bytes)
    # (2): its text is a checkpoint.
    origin, size, root = _parse_text(text)
    # (3): of the pinned log: the origin is the key's name.
    if origin != verifier.name:
        raise MalformedCheckpoint(
            f"the checkpoint is for log {origin[:200]!r}, the pinned key is {verifier.name!r}'s"
        )
    return Checkpoint(origin, size, root, note, verifier.label)


def unsafe_read_checkpoint(note: bytes, *, max_bytes: int = MAX_NOTE_BYTES) -> Checkpoint:
    """Read a checkpoint WITHOUT checking any signature (for display, or to compare roots when
    no key is pinned); logs a warning. Raises MalformedNote / MalformedCheckpoint."""
    log.warning("reading an audit checkpoint without a pinned key: its signature is not checked")
    if len(note) > max_bytes:
        raise MalformedNote(f"the note is {len(note)} bytes, more than the {max_bytes} allowed")
    split = note.rfind(b"\n\n")
    if split < 0:
        raise MalformedNote("the note has no blank line before its signatures")
    try:
        origin, size, root = _parse_text(note[: split + 1])
    except UnicodeDecodeError as exc:
        raise MalformedNote("the note is not UTF-8") from exc
    return Checkpoint(origin, size, root, note, None)


class TrustedLog:
    """The audit log as far as a verifier has checked it: a checkpoint verified with the
    pinned key. ``advance`` is the only way to move it, and only forward."""

    def __init__(
        self, trusted_note: bytes, verifier: NoteVerifier, *, max_bytes: int = MAX_NOTE_BYTES
    ) -> None:
        """Start from a checkpoint saved earlier; raises TrustedCheckpointRefused (its
        ``cause`` is the error ``open_checkpoint`` raised)."""
        self.verifier = verifier
        self.max_bytes = max_bytes
        try:
            self.trusted = open_checkpoint(trusted_note, verifier, max_bytes=max_bytes)
        except AuditVerificationError as exc:
            raise TrustedCheckpointRefused(exc) from exc

    def advance(self, note: bytes, consistency_proof: Sequence[bytes]) -> Checkpoint:
        """Trust a newer checkpoint if the log only grew since the trusted one; return it.

        1. the new note is a checkpoint of the same log signed by the pinned key;
        2. its tree is not smaller than the trusted one's (smaller: events were removed);
        3. the consistency proof from the trusted size to the new size verifies against both
           roots (RFC 9162 §2.1.4.2): an event edited at or before the trusted size, or a
           fork, fails here.

        Raises NoteError, MalformedCheckpoint, LogRewritten or InvalidProof; nothing changes
        then.
        """
        old = self.trusted
        # (1): signed by the pinned key, for the pinned log.
        new = open_checkpoint(note, self.verifier, max_bytes=self.max_bytes)
        # (2): the log did not shrink.
        if new.size < old.size:
            raise LogRewritten(
                old.size,
                f"the registry's log now has {new.size} events, fewer than the {old.size} "
                "this checkpoint counted: events were removed (truncated)",
                now=new.size,
            )
        # (3): the new tree extends the trusted one.
        verify_consistency(old.size, new.size, old.root, new.root, consistency_proof)
        self.trusted = new
        return new


def verify_log(events: Iterable[AuditEvent], checkpoints: Sequence[Checkpoint] = ()) -> int:
    """Re-hash the whole log in one pass; return the number of events.

    1. the hash chain (attest.audit.chain.verify_chain) names the first broken link;
    2. the Merkle root over the first ``size`` events equals each checkpoint's root;
    3. the log has at least as many events as every checkpoint counted.

    Raises BrokenChain or LogRewritten.
    """
    pending = sorted(checkpoints, key=lambda c: c.size)
    tree = CompactRange()

    def check_reached() -> None:
        while pending and pending[0].size == tree.size:
            checkpoint = pending.pop(0)
            actual = tree.root()
            if actual != checkpoint.root:
                raise LogRewritten(
                    checkpoint.size,
                    f"the first {checkpoint.size} events hash to root "
                    f"{base64.b64encode(actual).decode()}, the checkpoint says "
                    f"{checkpoint.root_b64}: an event at or before seq {checkpoint.size} was "
                    "changed, removed or reordered (and the hash chain recomputed)",
                    expected=checkpoint.root_b64,
                    actual=base64.b64encode(actual).decode(),
                )

    def hashed(source: Iterable[AuditEvent]) -> Iterator[AuditEvent]:
        for event in source:
            yield event
            # verify_chain asks for the next event only after this one passed (1)
            tree.append(leaf_hash(event_entry(event)))
            check_reached()

    check_reached()  # a checkpoint of the empty log
    count = verify_chain(hashed(events))  # (1), (2)
    # (3): nothing is missing at the end.
    if pending:
        missing = pending[-1]
        raise LogRewritten(
            missing.size,
            f"the log has {tree.size} events, the checkpoint counted {missing.size}: "
            "events were removed (truncated)",
            now=tree.size,
        )
    return count


def verify_event_inclusion(
    event: AuditEvent, proof: Sequence[bytes], checkpoint: Checkpoint
) -> None:
    """The event (re-hashed here) is leaf ``seq - 1`` of the checkpoint's tree.

    Raises InvalidProof.
    """
    verify_inclusion(
        leaf_hash(event_entry(event)), event.seq - 1, checkpoint.size, proof, checkpoint.root
    )
