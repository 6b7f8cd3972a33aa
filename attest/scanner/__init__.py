"""The safety scanner: classify every file of a bundle by content against an allow-list.

Anything not recognized as safe is a finding; nothing scanned is ever deserialized,
rendered or executed. ``check_serving`` checks the bundle's serving configuration
(modelward.yaml) against the model's own (config.json, generation_config.json). See
docs/scanner.md for the allow-list, the rule ids and the limits.
"""

from __future__ import annotations

from modelward.attest.scanner._classify import scan_blob
from modelward.attest.scanner._model import FileReport, Finding, ScanLimits, ScanReport
from modelward.attest.scanner._serving import MAX_MODEL_CONFIG_BYTES, SERVING_FILES, check_serving
from modelward.attest.scanner._tree import scan_tree

__all__ = [
    "MAX_MODEL_CONFIG_BYTES",
    "SERVING_FILES",
    "FileReport",
    "Finding",
    "ScanLimits",
    "ScanReport",
    "check_serving",
    "scan_blob",
    "scan_tree",
]
