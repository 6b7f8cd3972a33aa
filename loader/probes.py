"""Probe prompts for determinism baselines (docs/loader.md#baselines).

A bundle spec may list its own probes (``probes:`` in modelward.yaml); otherwise the
built-in set below runs: varied lengths, digits, punctuation, code and non-ASCII text so
that a change in numerics shows in at least one probe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BUILTIN_PROBES", "Probe", "resolve_probes"]

BUILTIN_PROBES: tuple[str, ...] = (
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "0 1 2 3 4 5 6 7 8 9",
    "a model release is a software release with a bigger artifact",
    "def add(a, b):\n    return a + b\n",
    "Résumé: naïve café, 東京, emoji 🙂?",
    "serving workers pull verify and boot only attested bundles, every time.",
    "x",
)


@dataclass(frozen=True)
class Probe:
    """One probe: a stable id (``p00``, ``p01``, ...) and its prompt text."""

    id: str
    prompt: str


def resolve_probes(spec_probes: Sequence[str] | None = None) -> tuple[Probe, ...]:
    """The bundle's probes when it lists any, else the built-in set. Empty prompts raise."""
    prompts = tuple(spec_probes) if spec_probes else BUILTIN_PROBES
    for index, prompt in enumerate(prompts):
        if not prompt:
            raise ValueError(f"probe {index} is empty")
    return tuple(Probe(f"p{index:02d}", prompt) for index, prompt in enumerate(prompts))
