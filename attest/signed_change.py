"""What signing a proposed TUF role version changes, read from the bytes to be signed and the
last version the signer verified itself (docs/tuf.md#what-a-signer-checks). Pure.

A signer is a verifier too. The registry hands a signer a proposal: bytes to sign and its
own description of them (the target, the digest, a rollout plan as it shows it). The
description is a hint to compare, never the thing shown; what is shown and signed is
computed here, from

- ``payload``: the proposed next version of ``role``, the exact bytes the signature covers;
- ``previous``: the version of ``role`` the signer's own client verified from its pinned
  root (None: the role has no verified version yet);
- ``delegation``: the delegation of ``role`` in the top-level targets the signer verified
  (None for the top-level targets itself),

in this order:

1. the payload is TUF targets metadata;
2. its version follows the verified one (TUF: a new version is higher);
3. every target it lists lies inside the paths ``role`` is delegated; a delegated role
   delegates nothing further;
4. what it does to each target: path, digest before and after; a rollout plan target's
   plan read from its signed ``custom`` bytes (which must be the bytes its sha256 names and
   a canonical plan); a quarantine target's signed reason;
5. for the top-level targets: what it does to who may sign, role by role (roles added or
   removed, keys added, removed or replaced, thresholds, paths, terminating); each key
   must carry its modelward keyid (``attest.tuf.public_key_of``).

A failed step raises ``ProposalRefused`` naming it; the changes come back as data, and the
words for them are the caller's (``describe_signer_change`` gives one line each).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tuf.api.metadata import DelegatedRole, Metadata, Targets

from modelward.attest.rollout import PlanInvalid, RolloutPlan
from modelward.attest.rollout.signed import plan_in
from modelward.attest.tuf import TargetChange, public_key_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tuf.api.metadata import TargetFile

__all__ = [
    "WEAKENING",
    "ProposalRefused",
    "ProposedVersion",
    "SignerChange",
    "describe_signer_change",
    "proposed_change",
]


class ProposalRefused(ValueError):  # noqa: N818 - a refusal, named as one
    """The proposed bytes fail a check a signer makes before signing (names the check)."""


# The kinds of change to who may sign that need the signer's own confirmation
# (``trust sign --accept-signer-changes``): each lets other keys, or fewer of them, sign.
WEAKENING = frozenset(
    {
        "role added",
        "role removed",
        "key added",
        "key removed",
        "key replaced",
        "threshold lowered",
        "paths widened",
        "no longer terminating",
    }
)


@dataclass(frozen=True)
class SignerChange:
    """One change to who may sign ``role``: ``kind`` (``WEAKENING`` lists those that need a
    confirmation), and what, as data (keyids, thresholds, paths)."""

    role: str
    kind: str
    before: str = ""
    after: str = ""

    @property
    def needs_confirmation(self) -> bool:
        return self.kind in WEAKENING


@dataclass(frozen=True)
class ProposedVersion:
    """What signing the payload does, computed from bytes the signer checked."""

    role: str
    version: int
    previous_version: int | None
    expires: datetime
    targets: tuple[TargetChange, ...]
    plans: Mapping[str, RolloutPlan]  # target path -> the plan its signed custom carries
    reasons: Mapping[str, str]  # quarantine target path -> its signed reason
    signers: tuple[SignerChange, ...]

    @property
    def needs_confirmation(self) -> tuple[SignerChange, ...]:
        return tuple(c for c in self.signers if c.needs_confirmation)


def _targets(data: bytes, what: str) -> Metadata[Targets]:
    try:
        md = Metadata[Targets].from_bytes(data)
    except Exception as exc:  # noqa: BLE001 - python-tuf raises many types for bad input
        raise ProposalRefused(f"{what} is not TUF targets metadata: {exc}") from None
    if not isinstance(md.signed, Targets):
        raise ProposalRefused(f"{what} is TUF {md.signed.type} metadata, not targets")
    return md


def _digest(target: TargetFile) -> str:
    return "sha256:" + str(target.hashes.get("sha256", ""))


def _plan(path: str, target: TargetFile) -> RolloutPlan:
    try:
        return plan_in(target)
    except PlanInvalid as exc:
        raise ProposalRefused(f"target {path}: the signed rollout plan is refused: {exc}") from exc


def _roles(md: Metadata[Targets] | None) -> dict[str, DelegatedRole]:
    delegations = md.signed.delegations if md is not None else None
    if delegations is None or delegations.roles is None:
        return {}
    return dict(delegations.roles)


def _keys(md: Metadata[Targets] | None) -> dict[str, dict[str, Any]]:
    delegations = md.signed.delegations if md is not None else None
    if delegations is None or delegations.keys is None:
        return {}
    return {keyid: key.to_dict() for keyid, key in delegations.keys.items()}


def _check_keys(md: Metadata[Targets]) -> None:
    delegations = md.signed.delegations
    for keyid, key in ((delegations.keys or {}) if delegations else {}).items():
        if public_key_of(key) is None:
            raise ProposalRefused(
                f"delegated key {keyid}: not a key modelward signs with, or its keyid is not "
                "the key's (the hex sha256 of its SubjectPublicKeyInfo)"
            )


def _short(keyids: set[str] | list[str]) -> str:
    return ", ".join(sorted(k[:16] for k in keyids)) or "(none)"


def _signer_changes(
    payload: Metadata[Targets], previous: Metadata[Targets] | None
) -> tuple[SignerChange, ...]:
    # (5): who may sign, role by role
    before, after = _roles(previous), _roles(payload)
    keys_before, keys_after = _keys(previous), _keys(payload)
    changes: list[SignerChange] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if new is None:
            assert old is not None  # noqa: S101 - in one of the two
            changes.append(
                SignerChange(name, "role removed", f"{old.threshold} of {_short(old.keyids)}")
            )
            continue
        if old is None:
            changes.append(
                SignerChange(
                    name,
                    "role added",
                    after=f"{new.threshold} of {_short(new.keyids)}; paths "
                    + ", ".join(new.paths or []),
                )
            )
            continue
        added, removed = set(new.keyids) - set(old.keyids), set(old.keyids) - set(new.keyids)
        if added:
            changes.append(SignerChange(name, "key added", after=_short(added)))
        if removed:
            changes.append(SignerChange(name, "key removed", before=_short(removed)))
        replaced = {
            k for k in set(new.keyids) & set(old.keyids) if keys_before.get(k) != keys_after.get(k)
        }
        if replaced:
            changes.append(SignerChange(name, "key replaced", _short(replaced), _short(replaced)))
        if new.threshold != old.threshold:
            kind = "threshold lowered" if new.threshold < old.threshold else "threshold raised"
            changes.append(SignerChange(name, kind, str(old.threshold), str(new.threshold)))
        old_paths = set(old.paths or []) | {f"#{p}" for p in old.path_hash_prefixes or []}
        new_paths = set(new.paths or []) | {f"#{p}" for p in new.path_hash_prefixes or []}
        if new_paths - old_paths:
            changes.append(
                SignerChange(
                    name,
                    "paths widened",
                    ", ".join(sorted(old_paths)),
                    ", ".join(sorted(new_paths)),
                )
            )
        elif old_paths - new_paths:
            changes.append(
                SignerChange(
                    name,
                    "paths narrowed",
                    ", ".join(sorted(old_paths)),
                    ", ".join(sorted(new_paths)),
                )
            )
        if old.terminating and not new.terminating:
            changes.append(SignerChange(name, "no longer terminating"))
    return tuple(changes)


def proposed_change(
    payload: bytes,
    previous: bytes | None,
    *,
    role: str,
    delegation: DelegatedRole | None,
    now: datetime,
) -> ProposedVersion:
    """What signing ``payload`` as the next version of ``role`` changes against
    ``previous``, the version the signer verified (steps in the module docstring).
    ``delegation``: ``role``'s delegation in the verified top-level targets (None only for
    ``targets`` itself). Raises ``ProposalRefused`` naming the failed check."""
    # (1): targets metadata
    md = _targets(payload, f"the proposed {role}")
    before = _targets(previous, f"the verified {role}") if previous is not None else None
    # (2): the version follows the verified one
    version = md.signed.version
    if before is not None and version <= before.signed.version:
        raise ProposalRefused(
            f"the proposed {role} is version {version}, not after the version this machine "
            f"verified ({before.signed.version}): a replayed or rolled-back proposal"
        )
    if md.signed.expires <= now:
        raise ProposalRefused(f"the proposed {role} v{version} expired at {md.signed.expires}")
    # (3): inside the delegation; nothing delegated further by a delegated role
    if role != Targets.type:
        if delegation is None:
            raise ProposalRefused(
                f"role {role} is not delegated by the top-level targets this machine "
                "verified: its signatures would count for nothing"
            )
        outside = sorted(p for p in md.signed.targets if not delegation.is_delegated_path(p))
        if outside:
            raise ProposalRefused(
                f"the proposed {role} lists {', '.join(outside)}, outside the paths the role "
                f"is delegated ({', '.join(delegation.paths or [])})"
            )
        if _roles(md) or _keys(md):
            raise ProposalRefused(
                f"the proposed {role} delegates to other keys or roles: a delegated role of "
                "this registry delegates nothing"
            )
    # (4): the targets
    after_targets = md.signed.targets
    before_targets = before.signed.targets if before is not None else {}
    changes: list[TargetChange] = []
    plans: dict[str, RolloutPlan] = {}
    reasons: dict[str, str] = {}
    for path in sorted(set(before_targets) | set(after_targets)):
        old, new = before_targets.get(path), after_targets.get(path)
        if old is not None and new is not None and old.to_dict() == new.to_dict():
            continue
        changes.append(
            TargetChange(
                path,
                _digest(old) if old is not None else None,
                _digest(new) if new is not None else None,
            )
        )
        if new is None:
            continue
        if "/rollouts/" in path:
            plans[path] = _plan(path, new)
        custom: Any = new.unrecognized_fields.get("custom")
        reason = custom.get("reason") if isinstance(custom, dict) else None
        if path.startswith("quarantine/") and isinstance(reason, str):
            reasons[path] = reason
    # (5): who may sign (the top-level targets)
    signers: tuple[SignerChange, ...] = ()
    if role == Targets.type:
        _check_keys(md)
        signers = _signer_changes(md, before)
    return ProposedVersion(
        role=role,
        version=version,
        previous_version=before.signed.version if before is not None else None,
        expires=md.signed.expires,
        targets=tuple(changes),
        plans=plans,
        reasons=reasons,
        signers=signers,
    )


def describe_signer_change(change: SignerChange) -> str:
    """One line for a change to who may sign."""
    text = f"role {change.role}: {change.kind}"
    if change.before and change.after and change.before != change.after:
        return f"{text}: {change.before} -> {change.after}"
    if change.after:
        return f"{text}: {change.after}"
    if change.before:
        return f"{text}: {change.before}"
    return text
