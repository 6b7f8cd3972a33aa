"""``modelward admin gc [--dry-run] [--json]`` and ``modelward repo quota show|set|clear`` over
HTTP (docs/registry.md#storage-hygiene).

``admin gc`` asks the registry (an admin token) to collect blobs no held bundle names and
upload sessions abandoned for longer than its GC window; ``--dry-run`` reports what it would
collect and deletes nothing. It exits 1 when a blob could not be deleted from the store (the
row stays; a later run retries). ``repo quota`` reads (admins and the repository's publishers)
or sets (admins) a repository's storage quota in bytes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import typer

from modelward.cli.remote import RepoArg

__all__ = ["gc", "quota_app"]

quota_app = typer.Typer(
    name="quota",
    help="A repository's storage quota in bytes (set by admins).",
    no_args_is_help=True,
)

AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout")]
UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
MAX_QUOTA = 2**62


def _human(n: int | None) -> str:
    if n is None:
        return "none"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n} bytes ({n / size:.1f} {unit})"
    return f"{n} bytes"


def parse_bytes(text: str) -> int:
    """``1000``, ``10GB``, ``1.5GiB`` ... -> bytes; a usage error (exit 2) naming it otherwise."""
    raw = text.strip().lower().replace("_", "")
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(number) :]
    value: float | None = None
    if unit in UNITS and number:
        try:
            value = float(number) * UNITS[unit] if "." in number else int(number) * UNITS[unit]
        except ValueError:
            value = None
    if value is None:
        raise typer.BadParameter(
            f"{text!r} is not a size: bytes, or a number with KB/MB/GB/TB or KiB/MiB/GiB/TiB",
            param_hint="BYTES",
        )
    if not 0 <= value <= MAX_QUOTA:
        raise typer.BadParameter(f"{text!r} is out of range (0 to 2^62 bytes)", param_hint="BYTES")
    return int(value)


def _repo_path(repo: str) -> str:
    org, sep, name = repo.partition("/")
    if not sep or not org or not name or "/" in name:
        raise typer.BadParameter(f"{repo!r} is not ORG/NAME", param_hint="REPO")
    return f"/v1/repos/{quote(org, safe='')}/{quote(name, safe='')}/quota"


def _call(method: str, path: str, body: Any = None) -> Any:
    from modelward.cli.remote import registry_client, reported

    with reported(), registry_client() as client:
        return client._json(method, path, json_body=body)


def _show_quota(answer: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(answer, indent=2, sort_keys=True))
        return
    typer.echo(
        f"{answer['repository']}\n  quota: {_human(answer['quota_bytes'])}\n"
        f"  used:  {_human(answer['usage_bytes'])}"
    )


def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be collected; delete nothing")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Collect unreferenced blobs and abandoned uploads older than the GC window (admins)."""
    report = _call("POST", "/v1/admin/gc", {"dry_run": dry_run})
    if as_json:
        typer.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        verb = "would delete" if dry_run else "deleted"
        typer.echo(
            f"{verb} {report['blobs']} blob(s), {_human(report['blob_bytes'])}; "
            f"{report['uploads']} abandoned upload session(s), "
            f"{_human(report['upload_bytes'])}; {report['leases']} expired lease(s); "
            f"{report['stray_blobs']} stray blob(s) and {report['stray_uploads']} stray "
            f"upload(s) the database did not record, {_human(report['stray_bytes'])} "
            f"(window {report['window_seconds']} s: nothing newer than {report['cutoff']})"
        )
    for failure in report.get("failures") or []:
        typer.echo(f"error: could not delete {failure['digest']}: {failure['error']}", err=True)
    if report.get("failures"):
        raise typer.Exit(1)


@quota_app.command("show")
def show(repo: RepoArg, as_json: AsJson = False) -> None:
    """Show a repository's quota and the bytes charged to it."""
    _show_quota(_call("GET", _repo_path(repo)), as_json)


@quota_app.command("set")
def set_(
    repo: RepoArg,
    size: Annotated[str, typer.Argument(metavar="BYTES", help="Bytes, or e.g. 500MB, 10GiB")],
    as_json: AsJson = False,
) -> None:
    """Set a repository's quota (admins); new uploads past it are refused with 413."""
    answer = _call("PUT", _repo_path(repo), {"quota_bytes": parse_bytes(size)})
    quota, used = answer.get("quota_bytes"), answer.get("usage_bytes")
    if isinstance(quota, int) and isinstance(used, int) and used > quota:
        typer.echo(
            f"warning: {answer['repository']} uses {_human(used)}, above the "
            f"new quota {_human(quota)}: new pushes to it are refused until "
            "usage falls below (nothing stored is removed)",
            err=True,
        )
    _show_quota(answer, as_json)


@quota_app.command("clear")
def clear(repo: RepoArg, as_json: AsJson = False) -> None:
    """Remove a repository's quota (admins)."""
    _show_quota(_call("PUT", _repo_path(repo), {"quota_bytes": None}), as_json)
