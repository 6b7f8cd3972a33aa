"""attest.audit.signed_note and attest.audit.checkpoint: the C2SP formats against a reference
vector, and one test per way a verifier holding an earlier checkpoint could be fooled."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from modelward.attest.audit.chain import AuditEvent, BrokenChain, event_hash, next_event
from modelward.attest.audit.checkpoint import (
    Checkpoint,
    LogRewritten,
    MalformedCheckpoint,
    TrustedCheckpointRefused,
    TrustedLog,
    checkpoint_text,
    open_checkpoint,
    sign_checkpoint,
    unsafe_read_checkpoint,
    verify_event_inclusion,
    verify_log,
)
from modelward.attest.audit.signed_note import (
    BadNoteSignature,
    MalformedKey,
    MalformedNote,
    NoteSigner,
    UnverifiedNote,
    generate_signer_key,
    open_note,
    parse_signer_key,
    parse_verifier_key,
    sign_note,
)
from modelward.attest.audit.tree import (
    CompactRange,
    InvalidProof,
    consistency_ranges,
    fold,
    inclusion_ranges,
    leaf_hash,
    node_hash,
)

# golang.org/x/mod/sumdb/note's documented example key pair and signed note
GO_SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VERIFIER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    b"If you think cryptography is the answer to your problem,\n"
    b"then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT
    + (
        "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKv"
        "qfqdngotpRZb6KE6RyyBwJnAM=\n"
    ).encode()
)
ORIGIN = "registry.example/audit"


# -- the formats -----------------------------------------------------------------------------
def test_keys_and_signatures_match_the_go_reference() -> None:
    signer = parse_signer_key(GO_SIGNER)
    assert signer.key_string == GO_SIGNER
    assert signer.verifier.key_string == GO_VERIFIER
    assert parse_verifier_key(GO_VERIFIER) == signer.verifier
    assert sign_note(GO_TEXT, signer) == GO_NOTE  # Ed25519 is deterministic
    assert open_note(GO_NOTE, parse_verifier_key(GO_VERIFIER)) == GO_TEXT


def test_malformed_keys_are_refused() -> None:
    name, hash16, data = GO_VERIFIER.split("+")
    not_ed25519 = base64.b64encode(bytes([2]) + bytes(32)).decode()
    for bad in (
        f"{name}+{hash16}",
        f"{name}+c74f20a4+{data}",  # the id is not the key's
        f"{name}+C74F20A3+{data}",
        f"Peter Neumann+{hash16}+{data}",
        f"{name}+{hash16}+{data[:-4]}",
        f"{name}+{hash16}+{not_ed25519}",
    ):
        with pytest.raises(MalformedKey):
            parse_verifier_key(bad)
    with pytest.raises(MalformedKey):
        parse_signer_key(GO_SIGNER.replace("PRIVATE+KEY", "PUBLIC+KEY"))
    with pytest.raises(MalformedKey):
        generate_signer_key("has space")


def test_checkpoint_format() -> None:
    signer = parse_signer_key(GO_SIGNER)
    root = bytes(range(32))
    note = sign_checkpoint(signer, 20852163, root)
    text, _, sigs = note.partition(b"\n\n")
    assert text + b"\n" == checkpoint_text("PeterNeumann", 20852163, root)
    assert text.decode().split("\n") == [
        "PeterNeumann",
        "20852163",
        base64.b64encode(root).decode(),
    ]
    assert sigs.decode().startswith("\u2014 PeterNeumann ")
    checkpoint = open_checkpoint(note, signer.verifier)
    assert (checkpoint.origin, checkpoint.size, checkpoint.root) == ("PeterNeumann", 20852163, root)
    assert checkpoint.note == note
    assert checkpoint.verified_by == "PeterNeumann+c74f20a3"


@pytest.mark.parametrize(
    "text",
    [
        b"o\n01\nAAAA\n",  # leading zero
        b"o\n-1\nAAAA\n",
        b"o\n1\n",  # no root
        b"o\n1\nAAAA\n",  # root not 32 bytes
        b"o\n1\n\n" + base64.b64encode(bytes(32)) + b"\n",  # empty line
    ],
)
def test_a_malformed_checkpoint_is_refused(text: bytes) -> None:
    signer = parse_signer_key(GO_SIGNER)
    note = sign_note(text.replace(b"o\n", b"PeterNeumann\n", 1), signer)
    with pytest.raises((MalformedCheckpoint, MalformedNote)):
        open_checkpoint(note, signer.verifier)


def test_a_malformed_note_is_refused() -> None:
    verifier = parse_verifier_key(GO_VERIFIER)
    for bad in (
        GO_NOTE.replace(b"\n\n", b"\n"),  # no blank line
        GO_NOTE[:-1],  # signature block does not end in a newline
        GO_NOTE.replace(b"If", b"If\x07"),  # a control character
        GO_NOTE.replace("\u2014".encode(), b"-"),  # not an em dash
        GO_NOTE + b"\xff\n",
        GO_NOTE * 2000,
    ):
        with pytest.raises(MalformedNote):
            open_note(bad, verifier)


# -- attacks ------------------------------------------------------------------------------
def _signer(name: str = ORIGIN) -> NoteSigner:
    return generate_signer_key(name)


def test_note_signed_by_another_key_of_the_same_name_is_refused() -> None:
    pinned, other = _signer(), _signer()
    note = sign_checkpoint(other, 3, bytes(32))
    with pytest.raises(UnverifiedNote) as info:
        open_checkpoint(note, pinned.verifier)
    assert info.value.signers == [other.verifier.label]


def test_forged_signature_claiming_the_pinned_key_is_refused() -> None:
    pinned, other = _signer(), _signer()
    forged = sign_checkpoint(other, 3, bytes(32))
    # the attacker relabels its signature with the pinned key's id
    text, _, line = forged.partition(b"\n\n")
    blob = base64.b64decode(line.decode().split(" ")[2])
    relabelled = pinned.verifier.key_id.to_bytes(4, "big") + blob[4:]
    note = text + b"\n\n" + f"\u2014 {ORIGIN} {base64.b64encode(relabelled).decode()}\n".encode()
    with pytest.raises(BadNoteSignature):
        open_checkpoint(note, pinned.verifier)


def test_a_checkpoint_changed_after_signing_is_refused() -> None:
    signer = _signer()
    note = sign_checkpoint(signer, 3, bytes(32))
    with pytest.raises(BadNoteSignature):
        open_checkpoint(note.replace(b"\n3\n", b"\n4\n", 1), signer.verifier)


def test_unknown_cosignatures_are_ignored() -> None:
    signer, witness = _signer(), _signer("witness.example")
    note = sign_checkpoint(signer, 3, bytes(32))
    text = note.partition(b"\n\n")[0] + b"\n"
    cosigned = note + sign_note(text, witness).partition(b"\n\n")[2]
    assert open_checkpoint(cosigned, signer.verifier).size == 3


def test_checkpoint_of_another_log_is_refused() -> None:
    signer = _signer("another.example/log")
    note = sign_note(checkpoint_text(ORIGIN, 1, bytes(32)), signer)
    with pytest.raises(MalformedCheckpoint, match="is for log"):
        open_checkpoint(note, signer.verifier)


def _log(n: int, tag: str = "") -> list[AuditEvent]:
    events: list[AuditEvent] = []
    prev = None
    for i in range(n):
        prev = next_event(
            prev,
            at=f"2026-12-16T10:00:{i:02d}.000000Z",
            actor="admin",
            action="alias.set",
            subject=f"acme/tiny@prod{tag}",
            details={"n": i},
        )
        events.append(prev)
    return events


def _checkpoint(signer: NoteSigner, events: list[AuditEvent], size: int) -> bytes:
    tree = CompactRange()
    for event in events[:size]:
        tree.append(leaf_hash(_entry(event)))
    return sign_checkpoint(signer, size, tree.root())


def _entry(event: AuditEvent) -> bytes:
    from modelward.attest.audit.chain import event_entry

    return event_entry(event)


def _proof(events: list[AuditEvent], old: int, new: int) -> list[bytes]:
    leaves = [leaf_hash(_entry(e)) for e in events[:new]]

    def mth(a: int, b: int) -> bytes:
        if b - a == 1:
            return leaves[a]
        k = 1 << ((b - a - 1).bit_length() - 1)
        return node_hash(mth(a, a + k), mth(a + k, b))

    return [mth(a, b) for a, b in consistency_ranges(old, new)]


def test_the_log_that_only_grew_is_trusted() -> None:
    signer, events = _signer(), _log(13)
    trusted = TrustedLog(_checkpoint(signer, events, 5), signer.verifier)
    new = trusted.advance(_checkpoint(signer, events, 13), _proof(events, 5, 13))
    assert trusted.trusted == new
    assert verify_log(events, [new]) == 13


def test_consistency_proof_for_a_forked_log_is_refused() -> None:
    signer = _signer()
    ours = _log(9)
    # the same first 4 events, then another history (a restored backup, or a log kept
    # for one client while another sees the real one)
    theirs = ours[:4] + _log(12, tag="-fork")[4:]
    theirs = _rechain(theirs)
    trusted = TrustedLog(_checkpoint(signer, ours, 6), signer.verifier)
    fork = _checkpoint(signer, theirs, 12)
    with pytest.raises(InvalidProof, match="rewritten or forked"):
        trusted.advance(fork, _proof(theirs, 6, 12))
    with pytest.raises(InvalidProof):
        trusted.advance(fork, _proof(ours, 6, 9))
    assert trusted.trusted.size == 6  # nothing changed


def test_forged_saved_checkpoint_is_refused_as_the_trusted_one() -> None:
    signer, events = _signer(), _log(5)
    good = _checkpoint(signer, events, 5)
    forged = good.replace(b"\n5\n", b"\n4\n", 1)
    for note, cause in ((forged, BadNoteSignature), (good[:40], MalformedNote)):
        with pytest.raises(TrustedCheckpointRefused) as info:
            TrustedLog(note, signer.verifier)
        assert isinstance(info.value.cause, cause)
        assert info.value.detail["cause"] == cause.code
        assert str(info.value).startswith("the trusted checkpoint (saved earlier) is refused: ")


def test_truncated_log_is_refused() -> None:
    signer, events = _signer(), _log(9)
    trusted = TrustedLog(_checkpoint(signer, events, 9), signer.verifier)
    with pytest.raises(LogRewritten, match="removed"):
        trusted.advance(_checkpoint(signer, events, 7), [])
    with pytest.raises(LogRewritten, match="removed"):
        verify_log(events[:7], [trusted.trusted])


def _rechain(events: list[AuditEvent]) -> list[AuditEvent]:
    out: list[AuditEvent] = []
    for event in events:
        prev_hash = out[-1].hash if out else event.prev_hash
        fields = {
            "seq": event.seq,
            "at": event.at,
            "actor": event.actor,
            "action": event.action,
            "subject": event.subject,
            "details": event.details,
            "prev_hash": prev_hash,
        }
        out.append(AuditEvent(**fields, hash=event_hash(**fields)))
    return out


def test_edited_event_with_recomputed_chain_fails_the_checkpoint_root() -> None:
    signer, events = _signer(), _log(10)
    checkpoint = open_checkpoint(_checkpoint(signer, events, 8), signer.verifier)
    edited = list(events)
    edited[3] = dataclasses.replace(edited[3], actor="mallory")
    edited = _rechain(edited)
    assert verify_log(edited) == 10  # the chain alone cannot tell
    with pytest.raises(LogRewritten, match="seq 8") as info:
        verify_log(edited, [checkpoint])
    assert info.value.size == 8
    with pytest.raises(BrokenChain):  # an edit without re-chaining is named by the chain
        verify_log([*events[:3], edited[3], *events[4:]], [checkpoint])


def test_inclusion_of_one_event() -> None:
    signer, events = _signer(), _log(11)
    checkpoint = open_checkpoint(_checkpoint(signer, events, 11), signer.verifier)
    leaves = [leaf_hash(_entry(e)) for e in events]

    def mth(a: int, b: int) -> bytes:
        nodes = []
        while a < b:
            width = 1 << ((b - a).bit_length() - 1)
            tree = CompactRange()
            for leaf in leaves[a : a + width]:
                tree.append(leaf)
            nodes.append(tree.root())
            a += width
        return fold(nodes)

    proof = [mth(a, b) for a, b in inclusion_ranges(6, 11)]
    verify_event_inclusion(events[6], proof, checkpoint)
    with pytest.raises(InvalidProof):
        verify_event_inclusion(dataclasses.replace(events[6], actor="mallory"), proof, checkpoint)


def test_unverified_reading_is_only_for_display() -> None:
    signer = _signer()
    checkpoint = unsafe_read_checkpoint(sign_checkpoint(signer, 2, bytes(32)))
    assert isinstance(checkpoint, Checkpoint)
    assert checkpoint.verified_by is None
    assert checkpoint.size == 2
