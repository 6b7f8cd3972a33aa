"""Who signed each move of an alias, read from the signed TUF state itself (docs/tuf.md).

``move_signers`` takes an alias's history rows and the stored versions of its repository's
TUF roles and says, for each move, which signed version first named its target and whose
signatures on it verify. Steps, per move:

1. the signed version: the first stored version of one of the repository's roles that sets
   the alias's target path to the move's digest when the role's version before did not,
   stored after the move was recorded (allowing ``SIGNED_WITHIN`` for a signed move, whose
   row is stored just before its history row) and before the next move was;
2. its signatures that count as evidence: each verifies over the version's signed bytes
   with the key registered under its keyid (``signing_keys``) or, for the registry's own
   online key, the key top-level targets delegates under it; one that does not verify, or
   whose key is unknown, is left out;
3. who: the key's registered principal, or ``registry (online key)``.

Nothing here is a new column: a move that no signed version names has no signers, and a
row a database writer stored is shown only with the signatures that verify on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from securesystemslib.exceptions import UnverifiedSignatureError
from securesystemslib.signer import Key
from sqlalchemy import select
from sqlalchemy.orm import Session
from tuf.api.metadata import Metadata, Targets
from tuf.api.serialization import DeserializationError

from modelward.attest.errors import KeyError_
from modelward.attest.keys import load_public_key
from modelward.attest.tuf import alias_path, protected_role, tuf_key
from modelward.registry.domains.signing.tuf.store import SessionStore
from modelward.registry.models import AliasHistory, Principal, SigningKey

__all__ = ["SIGNED_WITHIN", "SignedVersion", "move_signers"]

# a signed move's role version is stored in the transaction that records its history row,
# just before it: a version stored this long before a move's row still counts as its own
SIGNED_WITHIN = timedelta(seconds=60)
ONLINE_SIGNER = "registry (online key)"


@dataclass(frozen=True)
class SignedVersion:
    """A stored role version that set the alias to ``digest``: its signers (keyid,
    principal) whose signatures verify over its signed bytes."""

    role: str
    version: int
    digest: str
    at: datetime
    signers: tuple[tuple[str, str], ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "version": self.version,
            "signers": [{"keyid": k, "principal": p} for k, p in self.signers],
        }


def _registered(session: Session, keyids: set[str]) -> dict[str, tuple[Key, str]]:
    rows = session.execute(
        select(SigningKey.keyid, SigningKey.public_key_pem, Principal.name)
        .join(Principal, Principal.id == SigningKey.principal_id)
        .where(SigningKey.keyid.in_(keyids))
    ).all()
    keys: dict[str, tuple[Key, str]] = {}
    for keyid, pem, name in rows:
        try:
            keys[keyid] = (tuf_key(load_public_key(pem.encode(), source=f"key {keyid}")), name)
        except KeyError_:
            continue
    return keys


def _versions(
    session: Session, repo_name: str, path: str, delegated: Mapping[str, Key]
) -> list[SignedVersion]:
    """(1) and (2): every stored version of the repository's roles that changed ``path``,
    oldest first, with the signatures on it that verify."""
    prefix = protected_role(repo_name, "")
    rows = SessionStore(session).history(prefix)
    changes: list[tuple[str, int, str, datetime, Metadata[Targets]]] = []
    before: dict[str, str | None] = {}
    for role, version, data, created_at in rows:
        try:
            md = Metadata[Targets].from_bytes(data)
        except (DeserializationError, ValueError):
            continue  # an unparsable row names nothing
        target = md.signed.targets.get(path)
        digest = f"sha256:{target.hashes.get('sha256', '')}" if target is not None else None
        if digest is not None and digest != before.get(role):
            changes.append((role, version, digest, created_at, md))
        before[role] = digest
    keyids = {k for *_, md in changes for k in md.signatures}
    registered = _registered(session, keyids)
    versions = []
    for role, version, digest, at, md in sorted(changes, key=lambda c: (c[3], c[1])):
        signers = []
        for keyid, signature in sorted(md.signatures.items()):
            found = registered.get(keyid)
            key, who = found if found is not None else (delegated.get(keyid), ONLINE_SIGNER)
            if key is None:
                continue
            try:
                key.verify_signature(signature, md.signed_bytes)
            except UnverifiedSignatureError:
                continue
            signers.append((keyid, who))
        versions.append(SignedVersion(role, version, digest, at, tuple(signers)))
    return versions


def move_signers(
    session: Session,
    repo_name: str,
    alias: str,
    moves: Sequence[AliasHistory],
    *,
    online_keys: Mapping[str, Key],
) -> list[SignedVersion | None]:
    """For each of ``moves`` (oldest first), the signed version that signed it (steps
    (1)-(3)), or None when none did. ``online_keys``: the registry's own keys top-level
    targets delegates to, by keyid (their signer is ``registry (online key)``)."""
    versions = _versions(session, repo_name, alias_path(repo_name, alias), online_keys)
    used: set[tuple[str, int]] = set()
    found: list[SignedVersion | None] = []
    for i, move in enumerate(moves):
        start = move.at - SIGNED_WITHIN
        if i > 0:
            start = max(start, moves[i - 1].at)
        end = moves[i + 1].at if i + 1 < len(moves) else None
        match = next(
            (
                v
                for v in versions
                if (v.role, v.version) not in used
                and v.digest == move.to_digest
                and v.at >= start
                and (end is None or v.at < end)
            ),
            None,
        )
        if match is not None:
            used.add((match.role, match.version))
        found.append(match)
    return found
