"""C2SP signed notes with Ed25519 keys (https://c2sp.org/signed-note): pure logic, no I/O.

A signed note is a text ending in a newline, a blank line, then one or more signature lines
``— <key name> <base64(key id || signature)>`` (em dash U+2014, space). The signature is
Ed25519 over the text, final newline included. Key strings are golang.org/x/mod/sumdb/note's:

- verifier key: ``<name>+<key id as 8 hex digits>+<base64(0x01 || 32-byte public key)>``
- signer key: ``PRIVATE+KEY+<name>+<key id>+<base64(0x01 || 32-byte seed)>`` (a secret)
- key id: the first 4 bytes, big-endian, of ``SHA-256(name || 0x0A || 0x01 || public key)``

``open_note`` checks a note against one pinned verifier key, in the spec's order. Signatures by
other keys are ignored (an unknown signer is not tampering); a signature that names the pinned
key and fails to verify is. Errors (attest.errors)::

    AuditVerificationError
    └── NoteError               root of everything a note or key string can be wrong about
        ├── MalformedKey        a key string that is not one (names the part)
        ├── MalformedNote       not a signed note (size, encoding, layout)
        ├── UnverifiedNote      no signature by the pinned key (names the keys that did sign)
        └── BadNoteSignature    a signature by the pinned key's name and id that fails
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from modelward.attest.errors import (
    BadNoteSignature,
    MalformedKey,
    MalformedNote,
    NoteError,
    UnverifiedNote,
)

__all__ = [
    "ALG_ED25519",
    "MAX_NOTE_BYTES",
    "MAX_SIGNATURES",
    "BadNoteSignature",
    "MalformedKey",
    "MalformedNote",
    "NoteError",
    "NoteSigner",
    "NoteVerifier",
    "UnverifiedNote",
    "generate_signer_key",
    "key_id",
    "open_note",
    "parse_signer_key",
    "parse_verifier_key",
    "sign_note",
]

ALG_ED25519 = 0x01
SIG_PREFIX = "\u2014 "  # em dash, space
MAX_NOTE_BYTES = 64 * 1024
MAX_SIGNATURES = 100  # the spec asks verifiers to accept at least 16
_SPACE = re.compile(r"\s")


def _valid_name(name: str) -> bool:
    return bool(name) and not _SPACE.search(name) and "+" not in name


def key_id(name: str, public_key: bytes) -> int:
    """``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` as a big-endian integer."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedKey(f"{what} is not base64") from exc


@dataclass(frozen=True)
class NoteVerifier:
    """One Ed25519 note key, public half: what a verifier pins."""

    name: str
    key_id: int
    public_key: bytes  # 32 bytes

    @property
    def key_string(self) -> str:
        """The verifier key string ``<name>+<id>+<base64(0x01 || key)>``."""
        data = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id:08x}+{data}"

    @property
    def label(self) -> str:
        return f"{self.name}+{self.key_id:08x}"

    def verify(self, text: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, text)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class NoteSigner:
    """One Ed25519 note key, private half. Its ``verifier`` is what to hand out for pinning."""

    name: str
    seed: bytes  # 32 bytes

    @property
    def verifier(self) -> NoteVerifier:
        public = (
            Ed25519PrivateKey.from_private_bytes(self.seed)
            .public_key()
            .public_bytes(Encoding.Raw, PublicFormat.Raw)
        )
        return NoteVerifier(self.name, key_id(self.name, public), public)

    @property
    def key_string(self) -> str:
        """The secret signer key string ``PRIVATE+KEY+<name>+<id>+<base64(0x01 || seed)>``."""
        data = base64.b64encode(bytes([ALG_ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id:08x}+{data}"

    def sign(self, text: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(text)


def _split_key(text: str, parts: int, what: str) -> list[str]:
    fields = text.strip().split("+", parts - 1)
    if len(fields) != parts:
        raise MalformedKey(f"{what} is not {'+'.join(['...'] * parts)}")
    return fields


def _key_material(name: str, hash16: str, data64: str, what: str) -> tuple[int, bytes]:
    if not _valid_name(name):
        raise MalformedKey(f"{what}: the key name {name!r} is empty or has a space or '+'")
    if not re.fullmatch(r"[0-9a-f]{8}", hash16):
        raise MalformedKey(f"{what}: the key id {hash16!r} is not 8 lower-case hex digits")
    raw = _b64decode(data64, f"{what}: the key data")
    if len(raw) != 33 or raw[0] != ALG_ED25519:
        raise MalformedKey(f"{what}: the key data is not 0x01 followed by a 32-byte Ed25519 key")
    return int(hash16, 16), raw[1:]


def parse_verifier_key(text: str) -> NoteVerifier:
    """Parse ``<name>+<id>+<base64>``; raises MalformedKey (also when the id does not match)."""
    name, hash16, data64 = _split_key(text, 3, "the verifier key")
    claimed, public = _key_material(name, hash16, data64, "the verifier key")
    if key_id(name, public) != claimed:
        raise MalformedKey(f"the verifier key: id {hash16} is not the id of its name and key")
    return NoteVerifier(name, claimed, public)


def parse_signer_key(text: str) -> NoteSigner:
    """Parse ``PRIVATE+KEY+<name>+<id>+<base64>``; raises MalformedKey."""
    private, key, name, hash16, data64 = _split_key(text, 5, "the signer key")
    if (private, key) != ("PRIVATE", "KEY"):
        raise MalformedKey("the signer key does not start with PRIVATE+KEY+")
    claimed, seed = _key_material(name, hash16, data64, "the signer key")
    signer = NoteSigner(name, seed)
    if signer.verifier.key_id != claimed:
        raise MalformedKey(f"the signer key: id {hash16} is not the id of its name and key")
    return signer


def generate_signer_key(name: str) -> NoteSigner:
    """A new random Ed25519 note key named ``name``; raises MalformedKey for a bad name."""
    if not _valid_name(name):
        raise MalformedKey(f"the key name {name!r} is empty or has a space or '+'")
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    return NoteSigner(name, seed)


def sign_note(text: bytes, signer: NoteSigner) -> bytes:
    """The signed note: ``text`` (which must end in a newline), a blank line, one signature."""
    if not text.endswith(b"\n"):
        raise ValueError("a note text ends in a newline")
    verifier = signer.verifier
    blob = verifier.key_id.to_bytes(4, "big") + signer.sign(text)
    line = f"{SIG_PREFIX}{signer.name} {base64.b64encode(blob).decode()}\n"
    return text + b"\n" + line.encode()


def open_note(msg: bytes, verifier: NoteVerifier, *, max_bytes: int = MAX_NOTE_BYTES) -> bytes:
    """Verify ``msg`` against the pinned ``verifier``; return the note text (with its final
    newline). Raises MalformedNote, UnverifiedNote or BadNoteSignature.
    """
    # (1): bounded, valid UTF-8, no control character but the newline.
    if len(msg) > max_bytes:
        raise MalformedNote(f"the note is {len(msg)} bytes, more than the {max_bytes} allowed")
    try:
        decoded = msg.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedNote(f"the note is not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    if any(ch < " " and ch != "\n" for ch in decoded):
        raise MalformedNote("the note holds a control character other than newline")
    # (2): the text ends at the last blank line; the signature block ends in a newline.
    split = msg.rfind(b"\n\n")
    if split < 0:
        raise MalformedNote("the note has no blank line before its signatures")
    text, block = msg[: split + 1], msg[split + 2 :]
    if not block or not block.endswith(b"\n"):
        raise MalformedNote("the note's signature block is empty or does not end in a newline")
    lines = block.decode().split("\n")[:-1]
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"the note has more than {MAX_SIGNATURES} signatures")
    # (3): parse every signature line; only the pinned key's (name and id) are checked.
    others: list[str] = []
    verified = False
    for line in lines:
        if not line.startswith(SIG_PREFIX):
            raise MalformedNote(f"signature line {line[:80]!r} does not start with an em dash")
        name, _, b64 = line[len(SIG_PREFIX) :].partition(" ")
        try:
            blob = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MalformedNote(f"the signature by {name!r} is not base64") from exc
        if not _valid_name(name) or len(blob) < 5:
            raise MalformedNote(f"signature line {line[:80]!r} is malformed")
        signer_id = int.from_bytes(blob[:4], "big")
        if (name, signer_id) != (verifier.name, verifier.key_id):
            others.append(f"{name}+{signer_id:08x}")  # an unknown key: ignored
            continue
        # (4): a signature by the pinned key must verify.
        if not verifier.verify(text, blob[4:]):
            raise BadNoteSignature(verifier.label)
        verified = True
    # (5): at least one signature by the pinned key.
    if not verified:
        raise UnverifiedNote(verifier.label, others)
    return text
