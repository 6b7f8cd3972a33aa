"""Where rollouts live in the TUF repository (docs/rollouts.md#signed-state). Pure.

- ``ORG/NAME/rollouts/ALIAS``: the plan, a target in the role that decides the alias (its
  reviewers, publishers or the online key sign it as they sign a move); the target's bytes
  are the plan's canonical JSON, so its sha256 *is* the plan's sha256, and its signed
  ``custom`` carries ``{"plan": <that JSON as a string>}``.
- ``ORG/NAME/rollout-steps/ALIAS``: the current step, a target in ``ORG:NAME@=rollout``, a
  role only the registry's online alias key signs; ``custom``: ``{"step": <its JSON>}``.

``signed_custom`` is the one reader of those ``custom`` bytes (the registry, every worker
and ``release verify`` use it, so they cannot disagree on what a target signs).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuf.api.metadata import TargetFile

__all__ = [
    "rollout_path",
    "rollout_paths",
    "rollout_role",
    "signed_custom",
    "step_path",
    "step_paths",
]


def signed_custom(target: TargetFile | None, key: str) -> bytes | None:
    """The string ``custom[key]`` of a signed target as bytes, when they are the bytes the
    target's sha256 and length name (what the signature covers, both ways); None otherwise
    (no target, no such string, or other bytes)."""
    if target is None:
        return None
    custom: Any = target.unrecognized_fields.get("custom")
    value = custom.get(key) if isinstance(custom, dict) else None
    if not isinstance(value, str):
        return None
    data = value.encode()
    if len(data) != target.length or hashlib.sha256(data).hexdigest() != target.hashes.get(
        "sha256"
    ):
        return None
    return data


def _repo_parts(repo: str) -> tuple[str, str]:
    org, sep, name = repo.partition("/")
    if not sep or not org or not name or "/" in name:
        raise ValueError(f"not a repository name: {repo!r} (expected ORG/NAME)")
    return org, name


def rollout_path(repo: str, alias: str) -> str:
    """The target path of ``repo@alias``'s rollout plan."""
    _repo_parts(repo)
    return f"{repo}/rollouts/{alias}"


def rollout_paths(repo: str, pattern: str) -> str:
    """The plan paths a role deciding alias ``pattern`` is delegated too."""
    return rollout_path(repo, pattern)


def step_path(repo: str, alias: str) -> str:
    """The target path of ``repo@alias``'s current rollout step."""
    _repo_parts(repo)
    return f"{repo}/rollout-steps/{alias}"


def step_paths(repo: str) -> str:
    return step_path(repo, "*")


def rollout_role(repo: str) -> str:
    """``ORG:NAME@=rollout``: the role the registry's online key signs the steps in. No
    alias rule maps to this name (``attest.tuf.protected_role`` writes ``=`` only before
    ``online``, ``*`` and patterns starting with ``=``, which become ``==...``), so a
    protected alias named ``rollout`` keeps its own role ``ORG:NAME@rollout``."""
    org, name = _repo_parts(repo)
    return f"{org}:{name}@=rollout"
