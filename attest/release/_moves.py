"""The alias's signed history: the moves its TUF role versions make (docs/release.md).

One function, used by the builder (which move ``--version N`` is) and by the verifier
(which moves a record may claim): a move is a role version whose target for the alias's
path differs from the previous version's. Nothing else counts as a move: the registry's
alias-history rows are its word only, shown in a record as unsigned context.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuf.api.metadata import Metadata, Targets

__all__ = ["named_digest", "signed_moves"]


def named_digest(role: Metadata[Targets], path: str) -> str | None:
    """The bundle digest ``role`` names for the alias target ``path``, or None."""
    target = role.signed.targets.get(path)
    if target is None or "sha256" not in target.hashes:
        return None
    return "sha256:" + str(target.hashes["sha256"])


def signed_moves(path: str, role_versions: Sequence[Metadata[Targets]]) -> list[dict[str, Any]]:
    """The moves of ``path`` made by ``role_versions`` (versions 1, 2, ... in order, each
    verified by the caller), numbered from 1: ``{move, role_version, from_digest,
    to_digest}``, ``to_digest`` None where a version drops the alias.

    Raises ValueError when the versions are not exactly 1, 2, ... (a gap would hide a
    move)."""
    moves: list[dict[str, Any]] = []
    previous: str | None = None
    for expected, md in enumerate(role_versions, start=1):
        if md.signed.version != expected:
            raise ValueError(f"role version {md.signed.version} where {expected} was expected")
        named = named_digest(md, path)
        if named != previous:
            moves.append(
                {
                    "move": len(moves) + 1,
                    "role_version": expected,
                    "from_digest": previous,
                    "to_digest": named,
                }
            )
        previous = named
    return moves
