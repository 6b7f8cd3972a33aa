"""Scan a bundle directory: tree rules first, then every file by content."""

from __future__ import annotations

from pathlib import Path

from modelward.attest._fileio import open_regular, read_regular
from modelward.attest.scanner._classify import scan_blob
from modelward.attest.scanner._model import FileReport, Finding, ScanLimits, ScanReport
from modelward.attest.scanner._serving import MAX_MODEL_CONFIG_BYTES, SERVING_FILES, check_serving
from modelward.attest.tree import walk_bundle


def scan_tree(root: Path, limits: ScanLimits = ScanLimits()) -> ScanReport:
    """Scan the bundle at ``root``: every tree-rule violation and file finding.

    Tree violations (docs/bundle-format.md#tree-rules) become findings with the same rule
    ids; files with an executable bit are scanned too. Files are opened without following
    symlinks and must still be regular files when opened. Then the serving configuration
    is checked against the model's (``check_serving``). Raises ``NotADirectoryError``
    when ``root`` is not a directory.
    """
    files, violations = walk_bundle(root)
    findings = [Finding(v.path, v.rule, v.reason) for v in violations]
    targets = [(f.path, f.abspath) for f in files]
    targets += [(v.path, root / v.path) for v in violations if v.rule == "tree.executable"]
    reports: list[FileReport] = []
    for path, abspath in sorted(targets, key=lambda t: t[0].encode()):
        report = _scan_file(path, abspath, limits)
        reports.append(report)
        findings.extend(report.findings)
    findings.extend(serving_findings(root, {f.path for f in files}))
    findings.sort(key=lambda f: (f.path.encode(), f.rule))
    return ScanReport(files=tuple(reports), findings=tuple(findings))


def serving_findings(root: Path, paths: set[str]) -> tuple[Finding, ...]:
    """``check_serving`` over the serving files of the directory ``root`` (bounded reads;
    one that cannot be read is a finding)."""
    files: dict[str, bytes] = {}
    for name in SERVING_FILES:
        if name not in paths:
            continue
        data = read_regular(root / name, MAX_MODEL_CONFIG_BYTES + 1)
        if data is None:
            return (Finding(name, "tree.unreadable", "cannot open it to check serving"),)
        files[name] = data
    return check_serving(files, paths)


def _scan_file(path: str, abspath: Path, limits: ScanLimits) -> FileReport:
    try:
        opened = open_regular(abspath)
    except OSError as exc:
        return FileReport(
            path, "unreadable", (Finding(path, "tree.unreadable", f"cannot open: {exc.strerror}"),)
        )
    if opened is None:
        return FileReport(
            path, "special", (Finding(path, "tree.special", "not a regular file when opened"),)
        )
    handle, size = opened
    with handle:
        try:
            report = scan_blob(path, handle, size, limits)
        except OSError as exc:
            return FileReport(
                path,
                "unreadable",
                (Finding(path, "tree.unreadable", f"read failed: {exc.strerror or exc}"),),
            )
    if report.kind == "safetensors" and not report.findings:
        problem = library_problem(abspath)
        if problem is not None:
            return FileReport(path, report.kind, (Finding(path, "scan.safetensors", problem),))
    return report


def library_problem(abspath: Path) -> str | None:
    """Defence in depth: the safetensors library must open what our checks admitted."""
    import safetensors

    try:
        with safetensors.safe_open(abspath, framework="numpy") as handle:
            handle.keys()
    except (safetensors.SafetensorError, OSError, ValueError) as exc:
        return f"the safetensors library rejects the file: {exc}"
    return None
