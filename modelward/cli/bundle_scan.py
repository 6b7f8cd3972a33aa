"""``modelward bundle scan DIR [--json] [--allow GLOB]``: the safety scanner on a directory.

Every file is classified by content against the allow-list (docs/scanner.md); tree-rule
violations are findings too. Prints one line per finding (``path: rule: reason``), or with
``--json`` a machine-readable report of every file's kind and every finding. Exit 0 clean;
1 with findings; 2 usage (DIR is no directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from modelward.attest.scanner import Finding, ScanLimits, ScanReport, scan_tree
from modelward.cli._apps import bundle_app
from modelward.cli.common import console, err_console, fail


def _finding(finding: Finding) -> dict[str, str]:
    return {"path": finding.path, "rule": finding.rule, "reason": finding.reason}


def report_json(root: Path, report: ScanReport) -> str:
    """The ``--json`` document: root, clean, files with kinds and findings, all findings."""
    document = {
        "root": str(root),
        "clean": report.clean,
        "files": [
            {"path": f.path, "kind": f.kind, "findings": [_finding(x) for x in f.findings]}
            for f in report.files
        ],
        "findings": [_finding(x) for x in report.findings],
    }
    return json.dumps(document, indent=2, ensure_ascii=False, sort_keys=True)


@bundle_app.command("scan")
def scan(
    directory: Annotated[
        Path, typer.Argument(help="The bundle directory.", show_default=False, metavar="DIR")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print a machine-readable JSON report.")
    ] = False,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            metavar="GLOB",
            help="Admit files of unknown format matching GLOB (never a dangerous "
            "format). Repeatable.",
        ),
    ] = None,
) -> None:
    """Classify every file by content; refuse anything not known to be safe."""
    if not directory.is_dir():
        fail(
            f"{directory}: no such directory", code=2, hint="pass the directory holding the bundle"
        )
    report = scan_tree(directory, ScanLimits(allow_globs=tuple(allow or ())))
    if as_json:
        console.file.write(report_json(directory, report) + "\n")
    else:
        for finding in report.findings:
            console.print(str(finding), markup=False)
    if not report.clean:
        if not as_json:
            err_console.print(
                f"{len(report.findings)} finding(s) in {len(report.files)} file(s) scanned",
                markup=False,
            )
        raise typer.Exit(1)
    if not as_json:
        err_console.print(f"clean: {len(report.files)} file(s) scanned", markup=False)
