"""Errors raised by loader/.

Every refusal carries its evidence (the argument, the digest, the probe). The tree::

    LoaderError
    ├── RefusedError              the worker refuses to pull or boot (reason in the message)
    │   ├── UnsafeArgument        extra vLLM arguments that would weaken the hardening
    │   ├── EngineVersionMismatch running vLLM is not the bundle's pinned engine
    │   ├── BundleQuarantined     the registry marks the bundle quarantined or tombstoned
    │   ├── TrustMetadataRefused  (loader.tuf_resolve) the registry's TUF metadata failed a
    │   │                         check or names no such alias
    │   └── BaselineDivergence    outputs differ from the recorded baseline (policy: enforce)
    ├── EngineUnavailable         vLLM is not installed (names what to install)
    ├── EngineFailed              vLLM failed to start or to generate
    └── InputError                a requests/outputs file or reference is malformed (names it)

attest/ errors (``AttestError``) pass through unchanged: they already carry their evidence
(bytes on disk or from the registry that do not match their digest are
``attest.errors.DigestMismatch``, not a loader error of their own).
Registry client errors (``RegistryClientError``, client.errors) pass through too;
the registry's own answer to a quarantined bundle is ``registry.errors.Quarantined`` (409
``bundle_quarantined``); the worker refuses such a bundle as ``BundleQuarantined``.
Caller misuse is a plain ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BaselineDivergence",
    "BundleQuarantined",
    "EngineFailed",
    "EngineUnavailable",
    "EngineVersionMismatch",
    "InputError",
    "LoaderError",
    "RefusedError",
    "UnsafeArgument",
]

INSTALL_HINT = "pip install 'modelward[vllm]'"


class LoaderError(Exception):
    """Root of every error loader/ raises."""


class RefusedError(LoaderError):
    """The worker refuses to pull or boot a bundle; the message says why."""


class UnsafeArgument(RefusedError):  # noqa: N818 - the name is the evidence
    """Extra engine arguments that would weaken the pinned, hardened configuration."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  {arg}: {reason}" for arg, reason in self.problems)
        super().__init__(f"refused {len(self.problems)} extra engine argument(s):\n{lines}")


class EngineVersionMismatch(RefusedError):  # noqa: N818
    """The running engine is not the version the bundle pins."""

    def __init__(self, name: str, pinned: str, running: str) -> None:
        self.name = name
        self.pinned = pinned
        self.running = running
        super().__init__(f"bundle pins {name} {pinned} but this worker runs {name} {running}")


class BundleQuarantined(RefusedError):  # noqa: N818
    """The bundle is quarantined or tombstoned in the registry.

    ``signed``: the verified TUF quarantine role lists the digest, and ``reason`` is the one
    its reviewer signed (None when the listing carries none); otherwise ``reason`` is the
    registry's answer. ``withheld``: the listing says the reason is withheld because only
    private repositories hold the bundle (the role is served to every reader; a reader of
    such a repository sees it in the registry). Shown with control characters replaced, at
    most 500 characters.
    """

    def __init__(
        self, digest: str, reason: str | None, *, signed: bool = False, withheld: bool = False
    ) -> None:
        self.digest = digest
        self.reason = reason
        self.signed = signed
        self.withheld = withheld
        shown = _printable(reason) if reason else None
        if signed:
            why = f"reason (signed): {shown}" if shown else "no reason signed"
            if withheld and not shown:
                why = (
                    "reason withheld: only private repositories hold the bundle, so the role "
                    "every reader is served does not carry it; a reader of one of them sees it "
                    f"with `modelward bundle show ORG/NAME@{digest}`"
                )
            text = f"bundle {digest} is quarantined: listed by the signed quarantine role; {why}"
        else:
            text = f"bundle {digest} is quarantined: {shown or 'no reason given'}"
        super().__init__(text)


def _printable(text: str, limit: int = 500) -> str:
    shown = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return shown + ("..." if len(text) > limit else "")


class BaselineDivergence(RefusedError):  # noqa: N818
    """Outputs differ from the recorded baseline and the policy enforces baselines."""


class EngineUnavailable(LoaderError):  # noqa: N818
    """vLLM cannot be imported; the message names what to install."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"vLLM is not installed ({detail}); install it with: {INSTALL_HINT}")


class EngineFailed(LoaderError):  # noqa: N818
    """vLLM failed to start or to generate."""


class InputError(LoaderError):
    """A requests file, outputs file or bundle reference is malformed; names the place."""
