"""The scanner's data: limits passed in, findings and reports handed back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One reason a file may not enter a bundle: the path, a rule id and a precise reason."""

    path: str
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}: {self.reason}"


@dataclass(frozen=True)
class ScanLimits:
    """Bounds on what the scanner reads (docs/scanner.md#limits).

    ``allow_globs`` admit files classified ``unknown`` only (``fnmatch`` patterns on the
    POSIX relative path); a positively dangerous format stays rejected whatever its name.
    ``max_pickle_walk`` and ``max_pickle_ops`` bound the pickle check (bytes read, opcodes
    run: each adds at most one stack or memo cell); still unpickling at either is a pickle.
    """

    max_safetensors_header: int = 100 * 10**6
    max_json_bytes: int = 64 * 2**20
    max_text_bytes: int = 64 * 2**20
    allow_globs: tuple[str, ...] = ()
    max_spec_bytes: int = 2**20
    max_sentencepiece_bytes: int = 64 * 2**20
    probe_bytes: int = 64 * 2**10
    max_zip_members: int = 100_000
    max_zip_directory: int = 64 * 2**20
    max_pickle_walk: int = 64 * 2**20
    max_pickle_ops: int = 1_000_000

    def __post_init__(self) -> None:
        for name in (
            "max_safetensors_header",
            "max_json_bytes",
            "max_text_bytes",
            "max_spec_bytes",
            "max_sentencepiece_bytes",
            "probe_bytes",
            "max_zip_members",
            "max_zip_directory",
            "max_pickle_walk",
            "max_pickle_ops",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"ScanLimits.{name} must be positive")
        if isinstance(self.allow_globs, str):
            raise TypeError("ScanLimits.allow_globs must be a tuple of patterns, not a string")


@dataclass(frozen=True)
class FileReport:
    """What one file is (``kind``) and every finding about it; no findings means admitted."""

    path: str
    kind: str
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class ScanReport:
    """The reports of every file scanned and all findings, tree-rule findings included."""

    files: tuple[FileReport, ...]
    findings: tuple[Finding, ...]

    @property
    def clean(self) -> bool:
        """True when nothing was found: every file is on the allow-list and the tree is sound."""
        return not self.findings
