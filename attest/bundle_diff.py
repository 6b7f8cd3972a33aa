"""The difference between two bundles, as a reviewer reads a promotion: files added, removed
and changed (by digest), and unified text diffs of the files that decide how a model serves.

No I/O: callers hand in the two manifests and a function that reads a file's text (None when
absent, binary or over the caller's bound)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from modelward.attest.manifest import Manifest

__all__ = ["REVIEWED_FILES", "BundleDiff", "diff_bundles"]

# config, generation config, tokenizer config, chat template, serving arguments
REVIEWED_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "modelward.yaml",
)
MAX_DIFF_LINES = 400


@dataclass(frozen=True)
class BundleDiff:
    old: str | None
    new: str
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    unchanged: int = 0
    text: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "text_diffs": self.text,
        }


def diff_bundles(
    old: Manifest | None, new: Manifest, read: Callable[[Manifest, str], str | None]
) -> BundleDiff:
    """``new`` against ``old`` (None: an alias with no target yet, every file is added)."""
    before = {la.path: la for la in old.layers} if old is not None else {}
    after = {la.path: la for la in new.layers}
    added = [
        {"path": p, "size": after[p].size, "digest": after[p].digest}
        for p in sorted(after.keys() - before.keys())
    ]
    removed = [
        {"path": p, "size": before[p].size, "digest": before[p].digest}
        for p in sorted(before.keys() - after.keys())
    ]
    both = sorted(before.keys() & after.keys())
    changed = [
        {
            "path": p,
            "old_size": before[p].size,
            "new_size": after[p].size,
            "old_digest": before[p].digest,
            "new_digest": after[p].digest,
        }
        for p in both
        if before[p].digest != after[p].digest
    ]
    text: list[dict[str, Any]] = []
    for path in REVIEWED_FILES:
        was = read(old, path) if old is not None and path in before else None
        now = read(new, path) if path in after else None
        if path not in before and path not in after:
            continue
        if path in before and path in after and before[path].digest == after[path].digest:
            continue
        if (path in before and was is None) or (path in after and now is None):
            text.append({"path": path, "lines": [], "note": "not text, or too large to diff"})
            continue
        lines = list(
            difflib.unified_diff(
                (was or "").splitlines(),
                (now or "").splitlines(),
                fromfile=f"a/{path}",
                tofile=f"b/{path}",
                lineterm="",
            )
        )
        note = None
        if len(lines) > MAX_DIFF_LINES:
            note = f"first {MAX_DIFF_LINES} of {len(lines)} lines"
            lines = lines[:MAX_DIFF_LINES]
        text.append({"path": path, "lines": lines, "note": note})
    return BundleDiff(
        old=old.digest if old is not None else None,
        new=new.digest,
        added=added,
        removed=removed,
        changed=changed,
        unchanged=len(both) - len(changed),
        text=text,
    )
