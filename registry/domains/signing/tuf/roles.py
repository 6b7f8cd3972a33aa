"""The top-level targets role's delegations: who may sign which alias (docs/tuf.md#roles).

Pure; no I/O, no database. Names come from ``attest.tuf``. The top-level ``targets`` role
delegates, in this order (TUF visits delegations in order, and every one is terminating, so
a path is decided by the first role whose patterns match it):

1. ``quarantine``: paths ``quarantine/*``, the reviewers' keys, threshold 1. A target
   ``quarantine/<hex>`` means "the bundle sha256:<hex> is quarantined". It is delegated from
   the first targets on; until its first version exists the snapshot does not list it, which
   workers read as "nothing is quarantined" (``loader.tuf_resolve``). (An alias role without
   metadata refuses its aliases, which is right: nothing signed names them.)
2. per repository ``ORG/NAME``, per protected alias rule ``PATTERN`` (from the repository's
   policy): role ``ORG:NAME@PATTERN`` (``attest.tuf.protected_role``: ``ORG:NAME@=PATTERN``
   for ``online``, ``*`` and patterns starting with ``=``, so it is never the name of
   another kind's role), paths ``ORG/NAME/aliases/PATTERN``, the reviewers' keys, threshold
   = the rule's ``approvals``. The reviewers' signatures are the approvals.
3. per repository, the aliases the policy lets the registry move on its own (``online:
   true`` rules, e.g. ``dev-*``): role ``ORG:NAME@online``, the registry's online key,
   threshold 1.
4. per repository, every other alias: role ``ORG:NAME@*``, paths ``ORG/NAME/aliases/*``,
   the repository's publishers' keys, threshold 1.

An alias target ``ORG/NAME/aliases/ALIAS`` describes the bundle's manifest bytes: their
length and sha256, which *is* the bundle digest (docs/bundle-format.md#digest).

Two roles with one name are refused (``RoleNameCollision``), never resolved by keeping the
last: that is how a protected ``*`` once replaced the reviewers' role by the publishers'.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from securesystemslib.signer import Key
from tuf.api.metadata import DelegatedRole, Delegations

from modelward.attest.rollout.paths import rollout_paths, rollout_role, step_paths
from modelward.attest.tuf import QUARANTINE_ROLE, alias_path, online_role, open_role, protected_role

__all__ = ["ProtectedRule", "RepositoryTrust", "RoleNameCollision", "delegations"]


class RoleNameCollision(ValueError):  # noqa: N818 - a domain name, like StaleProposal
    """Two delegations would be one role: the policy or the naming is at fault."""

    def __init__(self, name: str, first: Sequence[str], second: Sequence[str]) -> None:
        super().__init__(
            f"TUF role {name!r} would delegate both {list(first)} and {list(second)}: "
            "two alias rules map to one role; make their patterns distinct (docs/tuf.md#roles)"
        )
        self.name, self.first, self.second = name, list(first), list(second)


@dataclass(frozen=True)
class ProtectedRule:
    """A protected alias pattern of a repository and the approvals it needs."""

    pattern: str
    approvals: int


@dataclass(frozen=True)
class RepositoryTrust:
    """What the delegations of one repository are made of."""

    repo: str
    protected: Sequence[ProtectedRule]
    online_patterns: Sequence[str]
    publisher_keys: Sequence[Key]


def _role(name: str, keys: Iterable[Key], threshold: int, paths: list[str]) -> DelegatedRole:
    if threshold < 1:
        raise ValueError(f"role {name}: threshold must be at least 1, not {threshold}")
    return DelegatedRole(
        name=name,
        keyids=sorted({key.keyid for key in keys}),
        threshold=threshold,
        terminating=True,
        paths=paths,
    )


def delegations(
    repositories: Sequence[RepositoryTrust],
    *,
    reviewer_keys: Sequence[Key],
    online_key: Key | None,
    quarantine: bool,
) -> Delegations:
    """The top-level targets role's delegations for ``repositories`` (order as documented);
    ``quarantine``: whether the quarantine role has a first version to delegate to;
    ``online_key``: the registry's key for ``online:`` aliases (None: it has none)."""
    keys: dict[str, Key] = {key.keyid: key for key in reviewer_keys}
    roles = [_role(QUARANTINE_ROLE, reviewer_keys, 1, ["quarantine/*"])] if quarantine else []
    for trust in sorted(repositories, key=lambda r: r.repo):
        for rule in trust.protected:
            roles.append(
                _role(
                    protected_role(trust.repo, rule.pattern),
                    reviewer_keys,
                    rule.approvals,
                    [alias_path(trust.repo, rule.pattern), rollout_paths(trust.repo, rule.pattern)],
                )
            )
        if trust.online_patterns:
            if online_key is None:
                raise ValueError(
                    f"{trust.repo}: online aliases {list(trust.online_patterns)} need the "
                    "registry's online alias key, and this registry has none"
                )
            keys[online_key.keyid] = online_key
            roles.append(
                _role(
                    online_role(trust.repo),
                    [online_key],
                    1,
                    [alias_path(trust.repo, p) for p in trust.online_patterns]
                    + [rollout_paths(trust.repo, p) for p in trust.online_patterns],
                )
            )
        if online_key is not None:  # the rollout steps (docs/rollouts.md#signed-state)
            keys[online_key.keyid] = online_key
            roles.append(_role(rollout_role(trust.repo), [online_key], 1, [step_paths(trust.repo)]))
        keys.update({key.keyid: key for key in trust.publisher_keys})
        roles.append(
            _role(
                open_role(trust.repo),
                trust.publisher_keys,
                1,
                [alias_path(trust.repo, "*"), rollout_paths(trust.repo, "*")],
            )
        )
    return Delegations(keys=keys, roles=_by_name(roles))


def _by_name(roles: Sequence[DelegatedRole]) -> dict[str, DelegatedRole]:
    """``roles`` by name; two roles with one name are refused, never one overwriting the
    other (the second would silently take the first's place, keys and threshold)."""
    named: dict[str, DelegatedRole] = {}
    for role in roles:
        first = named.get(role.name)
        if first is not None:
            raise RoleNameCollision(role.name, first.paths or [], role.paths or [])
        named[role.name] = role
    return named
