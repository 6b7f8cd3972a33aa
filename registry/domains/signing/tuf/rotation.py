"""Key rotation without an unverifiable alias (docs/tuf.md#rotating-a-signers-key).

A delegation names one key per principal, her newest (``signing.tuf.state``). Switching a
role to a signer's new key the moment she registers it would leave the role's signed
version short of its threshold (its signatures are by her old key), and every worker would
refuse its aliases. So:

- ``wanted_delegations`` makes the delegations the database asks for and, for each role
  whose signed version would fall below its threshold by the switch, keeps naming the
  signers' older, still active keys that signed it (``hold_signed_keys``): the role switches
  once its signers re-sign it (``modelward trust resign``). A revoked key is never kept.
- ``signatures_lost`` is the one answer to "which aliases, rollout plans and quarantines
  would lose their valid signatures (and would the quarantine role keep enough keys) if the
  delegations became these": every change of who may sign (a key revoked, a role changed,
  a principal disabled, a publisher or member removed, a policy's approvals changed) and
  ``trust sign`` of a targets proposal check it (``registry.domains.signing.impact``);
- ``short_of_threshold`` answers "which roles are short of their threshold now"
  (``GET /v1/tuf/status``).

Both count signatures as a worker does: keys the role names whose signature verifies over
the version's signed bytes, at least the role's threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from securesystemslib.exceptions import UnverifiedSignatureError
from securesystemslib.signer import Key
from sqlalchemy.orm import Session
from tuf.api.exceptions import UnsignedMetadataError
from tuf.api.metadata import DelegatedRole, Delegations, Metadata, Targets

from modelward.attest.tuf import QUARANTINE_ROLE
from modelward.registry.domains.signing.tuf.keys import ALIAS_KEY, OnlineKeys
from modelward.registry.domains.signing.tuf.repository import MetadataRepository, MetadataRowRefused
from modelward.registry.domains.signing.tuf.roles import delegations
from modelward.registry.domains.signing.tuf.state import (
    key_owners,
    repository_trusts,
    reviewer_keys,
)

__all__ = [
    "ShortRole",
    "SignaturesLost",
    "hold_signed_keys",
    "kind_of",
    "short_of_threshold",
    "signatures_lost",
    "signed_version",
    "valid_keyids",
    "wanted_delegations",
]

SignedVersion = Callable[[str], "Metadata[Targets] | None"]


def kind_of(path: str) -> str:
    """What a target path is, for a person: ``alias``, ``rollout plan``, ``rollout step``,
    ``quarantine`` (docs/tuf.md#roles, docs/rollouts.md#signed-state)."""
    for marker, kind in (
        ("/aliases/", "alias"),
        ("/rollouts/", "rollout plan"),
        ("/rollout-steps/", "rollout step"),
    ):
        if marker in path:
            return kind
    return "quarantine" if path.startswith("quarantine/") else "target"


def _what(path: str, digest: str) -> str:
    """``ORG/NAME@ALIAS``, ``rollout plan of ORG/NAME@ALIAS``, ``rollout step of
    ORG/NAME@ALIAS``, ``quarantine of sha256:...``, or the path itself."""
    kind = kind_of(path)
    if kind == "quarantine":
        return f"quarantine of {digest}"
    for marker in ("/aliases/", "/rollouts/", "/rollout-steps/"):
        repo, sep, alias = path.partition(marker)
        if sep:
            return f"{repo}@{alias}" if kind == "alias" else f"{kind} of {repo}@{alias}"
    return path


_CONSEQUENCE = {
    "alias": "workers will refuse it",
    "rollout plan": "workers will refuse the rollout's plan (and the alias it rolls out)",
    "rollout step": "workers will refuse the rollout's step",
    "quarantine": "workers will no longer see the quarantine",
    "role": "nothing it decides can be signed until enough signers are back",
}


@dataclass(frozen=True)
class SignaturesLost:
    """A target (an alias, a rollout plan, a quarantine) whose signed version would no
    longer verify: ``remaining`` of the ``threshold`` signatures a worker needs. Or, with
    ``path`` empty, a role (the quarantine) that would name fewer keys than its threshold:
    ``remaining`` keys."""

    path: str
    role: str
    version: int
    digest: str
    remaining: int
    threshold: int

    @property
    def kind(self) -> str:
        return kind_of(self.path) if self.path else "role"

    @property
    def name(self) -> str:
        """``ORG/NAME@ALIAS`` for an alias, ``rollout plan of ORG/NAME@ALIAS``,
        ``quarantine of sha256:...``, ``role quarantine`` (module ``_what``)."""
        return _what(self.path, self.digest) if self.path else f"role {self.role}"

    @property
    def line(self) -> str:
        """What a preview prints, e.g. ``acme/tiny@prod: 0 of 1 signatures would remain;
        workers will refuse it``."""
        counted = "keys" if self.kind == "role" else "signatures"
        return (
            f"{self.name}: {self.remaining} of {self.threshold} {counted} would remain; "
            f"{_CONSEQUENCE.get(self.kind, 'workers will refuse it')}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.name,
            "kind": self.kind,
            "path": self.path,
            "role": self.role,
            "version": self.version,
            "digest": self.digest,
            "remaining": self.remaining,
            "threshold": self.threshold,
            "message": self.line,
        }


@dataclass(frozen=True)
class ShortRole:
    """A delegated role short of its threshold now: the version workers get (``version``,
    0: none yet) carries ``valid`` signatures by keys the role names, or the role names
    only ``keys`` keys, fewer than ``threshold``; ``decides``: what it signs (its targets'
    names, else its path patterns)."""

    role: str
    threshold: int
    valid: int
    keys: int
    version: int
    decides: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "threshold": self.threshold,
            "valid_signers": self.valid,
            "keys": self.keys,
            "version": self.version,
            "decides": list(self.decides),
        }


def valid_keyids(role: DelegatedRole, keys: Mapping[str, Key], md: Metadata[Targets]) -> set[str]:
    """The keys ``role`` names whose signature on ``md`` verifies over its signed bytes."""
    valid = set()
    for keyid in role.keyids:
        signature, key = md.signatures.get(keyid), keys.get(keyid)
        if signature is None or key is None:
            continue
        try:
            key.verify_signature(signature, md.signed_bytes)
        except UnverifiedSignatureError:
            continue
        valid.add(keyid)
    return valid


def signed_version(repo: MetadataRepository, role: str) -> Metadata[Targets] | None:
    """``role``'s newest version that verifies under the current delegations, or None."""
    try:
        md = repo.verified(role)
    except (UnsignedMetadataError, MetadataRowRefused):
        return None
    return md


def hold_signed_keys(
    wanted: Delegations,
    current: Delegations | None,
    signed: SignedVersion,
    owners: Mapping[str, int],
) -> Delegations:
    """``wanted`` with each role whose signed version would fall below its threshold by
    a switch to its signers' newer keys naming, instead, the older key of each such signer
    that signed it, while that key is active (in ``owners``: keyid -> principal) and its
    owner still has a key in the role. One key per principal per role, always."""
    if current is None or not current.roles or not wanted.roles:
        return wanted
    roles = dict(wanted.roles)
    keys = dict(wanted.keys or {})
    held = False
    for name, role in wanted.roles.items():
        before = current.roles.get(name)
        if before is None or sorted(before.keyids) == sorted(role.keyids):
            continue
        md = signed(name)
        if md is None:
            continue
        now = valid_keyids(before, current.keys or {}, md)
        if len(now & set(role.keyids)) >= role.threshold:
            continue
        keyids = list(role.keyids)
        for old in sorted(now - set(role.keyids)):
            owner = owners.get(old)
            newer = [k for k in keyids if owner is not None and owners.get(k) == owner]
            if not newer:
                continue  # revoked, or its owner left the role: a real removal
            keyids = [k for k in keyids if k not in newer] + [old]
            keys[old] = (current.keys or {})[old]
        if sorted(keyids) != sorted(role.keyids):
            roles[name] = DelegatedRole(
                name=role.name,
                keyids=sorted(keyids),
                threshold=role.threshold,
                terminating=role.terminating,
                paths=role.paths,
                path_hash_prefixes=role.path_hash_prefixes,
            )
            held = True
    if not held:
        return wanted
    used = {k for r in roles.values() for k in r.keyids}
    return Delegations(keys={k: v for k, v in sorted(keys.items()) if k in used}, roles=roles)


def _deciding(delegations_: Delegations, path: str) -> str | None:
    return next((name for name, _ in delegations_.get_roles_for_target(path)), None)


def signatures_lost(
    current: Delegations | None, wanted: Delegations, signed: SignedVersion
) -> list[SignaturesLost]:
    """Every target signed now (its role's version verifies under ``current``) whose
    signatures would fall below the threshold of the role deciding it under ``wanted``,
    by target path. Empty when nothing would."""
    if current is None or not current.roles or current.to_dict() == wanted.to_dict():
        return []
    lost = []
    for name, before in current.roles.items():
        md = signed(name)
        if md is None or len(valid_keyids(before, current.keys or {}, md)) < before.threshold:
            continue
        for path, target in md.signed.targets.items():
            if _deciding(current, path) != name:
                continue  # another role decides it: this one signs nothing a worker reads
            digest = f"sha256:{target.hashes.get('sha256', '')}"
            after = _deciding(wanted, path)
            role = (wanted.roles or {}).get(after) if after is not None else None
            if role is None:
                remaining, threshold = 0, before.threshold
            else:
                other = md if after == name else signed(role.name)
                named = other.signed.targets.get(path) if other is not None else None
                same = named is not None and named.hashes == target.hashes
                threshold = role.threshold
                remaining = (
                    len(valid_keyids(role, wanted.keys or {}, other))
                    if other is not None and same
                    else 0
                )
            if remaining < threshold:
                lost.append(
                    SignaturesLost(path, name, md.signed.version, digest, remaining, threshold)
                )
    return sorted(lost, key=lambda x: x.path) + _quarantine_short(current, wanted)


def _quarantine_short(current: Delegations, wanted: Delegations) -> list[SignaturesLost]:
    """The quarantine role, when it names enough keys now and would not: nobody could
    quarantine a bundle any more (whether or not anything is quarantined now)."""
    before = (current.roles or {}).get(QUARANTINE_ROLE)
    after = (wanted.roles or {}).get(QUARANTINE_ROLE)
    if before is None or after is None or len(before.keyids) < before.threshold:
        return []
    if len(after.keyids) >= after.threshold:
        return []
    return [SignaturesLost("", QUARANTINE_ROLE, 0, "", len(after.keyids), after.threshold)]


def short_of_threshold(repo: MetadataRepository) -> list[ShortRole]:
    """Every role the published top-level targets delegates that is short of its threshold
    now, as a worker counts: the version the registry's snapshot lists, signed by fewer of
    the keys the role names than its threshold, or a role naming fewer keys than its
    threshold (nothing it decides can be signed). Reads only."""
    if Targets.type not in repo.store.latest_versions():
        return []
    current = repo.targets().delegations
    if current is None or not current.roles:
        return []
    short = []
    for name, role in current.roles.items():
        version = repo.accepted_version(name) or 0
        data = repo.store.read(name, version) if version else None
        md: Metadata[Targets] | None = None
        if data is not None:
            try:
                md = Metadata[Targets].from_bytes(data)
            except (ValueError, TypeError, KeyError):  # a stored row that does not parse
                md = None
        valid = len(valid_keyids(role, current.keys or {}, md)) if md is not None else 0
        if md is not None and not md.signed.targets:
            md = None  # it signs nothing a worker reads: only its keys matter
        if md is None and len(role.keyids) >= role.threshold:
            continue
        if md is not None and valid >= role.threshold:
            continue
        decides = (
            tuple(
                _what(path, f"sha256:{target.hashes.get('sha256', '')}")
                for path, target in sorted(md.signed.targets.items())
            )
            if md is not None
            else tuple(role.paths or ())
        )
        short.append(
            ShortRole(name, role.threshold, valid, len(role.keyids), version, decides[:50])
        )
    return sorted(short, key=lambda r: r.role)


def wanted_delegations(
    session: Session,
    repo: MetadataRepository,
    keys: OnlineKeys,
    default_policy_yaml: str | None,
    *,
    only: str | None = None,
    excluded: Collection[str] = (),
    hold: bool = True,
) -> Delegations:
    """The delegations the database asks for (``signing.tuf.roles.delegations`` over the
    sealed rows; ``only``: that repository's roles and the quarantine; ``excluded``: keys
    about to be revoked), each role's signed version kept verifiable (``hold_signed_keys``)
    unless ``hold`` is False (what a role becomes once its signers re-sign it)."""
    online = keys.signer(ALIAS_KEY).public_key if keys.has(ALIAS_KEY) else None
    seals = keys.row_seals()
    wanted = delegations(
        repository_trusts(session, default_policy_yaml, seals, only=only, excluded=excluded),
        reviewer_keys=reviewer_keys(session, seals, excluded),
        online_key=online,
        quarantine=True,
    )
    if not hold or Targets.type not in repo.store.latest_versions():
        return wanted
    current = repo.targets().delegations
    before = (current.roles or {}) if current is not None else {}
    if not any(
        name in before and sorted(before[name].keyids) != sorted(role.keyids)
        for name, role in (wanted.roles or {}).items()
    ):
        return wanted  # no role changes its keys: nothing to hold (the common case)
    return hold_signed_keys(
        wanted,
        current,
        lambda role: signed_version(repo, role),
        key_owners(session, seals, excluded),
    )
