"""The "did you mean" for a mistyped alias, for every command that takes a reference.

The registry computes the suggestion in one place: the 404 for an alias it does not hold
names the repository's closest aliases (``registry.domains.aliases.service``, ``detail
.suggestions``), and the registry commands print that answer as it is. A command that
resolves an alias through TUF (``pull``, ``boot``, ``replay``, ``verify``, ``baseline
show``) refuses on the signed metadata's word, never the registry's; when that metadata names
no such alias, it asks the same question here and adds the answer to its refusal, which
stands as it was: a suggestion is a hint, never a resolution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from modelward.client.config import Reference
from modelward.client.errors import NotFoundError, RegistryClientError

__all__ = ["AliasReader", "alias_suggestions", "did_you_mean"]


class AliasReader(Protocol):
    """What a suggestion needs of a registry client (``RegistryClient`` and the loader's
    ``RegistrySource`` are)."""

    def resolve(self, ref: Reference) -> str: ...


def alias_suggestions(client: AliasReader, repo: str, alias: str) -> list[str]:
    """``REPO@ALIAS`` of the aliases the registry holds closest to ``alias``, best first;
    empty when it holds ``alias`` itself, knows none close, or cannot be asked (the
    question is a courtesy: it never turns a refusal into another error)."""
    try:
        client.resolve(Reference(repo=repo, alias=alias))  # the registry's word, asked only
    except NotFoundError as exc:
        detail = exc.detail
        names = detail.get("suggestions") if isinstance(detail, Mapping) else None
        if isinstance(names, Sequence) and not isinstance(names, str):
            return [f"{repo}@{n}" for n in names if isinstance(n, str) and n != alias]
        return []
    except RegistryClientError:
        return []
    return []


def did_you_mean(suggestions: Sequence[str]) -> str:
    """``did you mean acme/x@prod?`` (``… or …`` for several), or "" for none."""
    return f"did you mean {' or '.join(suggestions)}?" if suggestions else ""
