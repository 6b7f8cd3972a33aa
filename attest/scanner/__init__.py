"""The safety scanner: classify every file of a bundle by content against an allow-list.

Anything not recognized as safe is a finding; nothing scanned is ever deserialized,
rendered or executed. See docs/scanner.md for the allow-list, the rule ids and the limits.
"""

from __future__ import annotations

from modelward.attest.scanner._classify import scan_blob
from modelward.attest.scanner._model import FileReport, Finding, ScanLimits, ScanReport
from modelward.attest.scanner._tree import scan_tree

__all__ = ["FileReport", "Finding", "ScanLimits", "ScanReport", "scan_blob", "scan_tree"]
