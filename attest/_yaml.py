"""The one strict YAML reader for documents modelward accepts (bundle specs, policies).

``load_strict_yaml`` runs an event pass first, so an anchor or alias (entity-expansion
blow-up, and a way to make one value stand in two places) is refused before anything is
built; then it builds with a safe loader (libyaml's where available: iterative, nesting
capped) that refuses duplicate and unhashable mapping keys. Every failure is one
``StrictYAMLError`` whose message is ``line L, column C: problem`` on one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

__all__ = ["SafeLoader", "StrictYAMLError", "load_strict_yaml"]

if TYPE_CHECKING:
    SafeLoader = yaml.SafeLoader
else:  # libyaml: iterative, caps nesting at 1000 levels; the pure-Python parser recurses
    SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictYAMLError(ValueError):
    """The text is not YAML modelward accepts; the message says where and why."""


class _StrictLoader(SafeLoader):
    """A safe loader that refuses duplicate and unhashable mapping keys."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            problem = (
                "unhashable key"
                if isinstance(key, list | dict)
                else f"duplicate key {key!r}"
                if key in seen
                else None
            )
            if problem is not None:
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


def _refuse_anchors(text: str | bytes) -> None:
    for event in yaml.parse(text, Loader=SafeLoader):
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent) or anchor is not None:
            raise StrictYAMLError(
                f"{_where(event.start_mark)}YAML anchors and aliases are not allowed"
            )


def load_strict_yaml(text: str | bytes) -> Any:
    """The document in ``text``; raises ``StrictYAMLError`` (anchors and aliases, duplicate
    keys, syntax errors, nesting too deep, values the constructors refuse such as an integer
    of more than 4300 digits)."""
    try:
        _refuse_anchors(text)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a safe loader
    except StrictYAMLError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise StrictYAMLError(f"{_where(mark)}{problem}".replace("\n", " ")) from exc
    except RecursionError as exc:  # the pure-Python parser recurses once per level
        raise StrictYAMLError("nested too deeply") from exc
    except ValueError as exc:  # a value the constructors refuse: an int past 4300 digits ...
        raise StrictYAMLError(f"a value cannot be read: {str(exc)[:200]}") from exc
