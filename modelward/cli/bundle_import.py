"""``modelward bundle import-hf REPO_ID --revision REV --out DIR``.

Fetches a Hugging Face model repository at one commit, only the file formats the scanner
can vouch for, scans the result, and records where it came from in
``DIR/.modelward/source.json`` (outside the bundle: attest.tree ignores ``.modelward/``)::

    {"version": 1, "type": "huggingface", "repo_id": "org/name", "uri": "hf://org/name",
     "requested_revision": "main", "commit": "<40 hex>", "files": ["config.json", ...]}

A branch or tag is resolved to its commit and recorded, never kept as the pin; sign with
``modelward bundle sign DIR --source hf://org/name --source-revision <commit>``.
Nothing partial is left behind: the files land in a temporary sibling directory that is
renamed into place only after the scan passed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from modelward.cli._apps import bundle_app
from modelward.cli.common import console, fail

# The formats the scanner parses and vouches for (docs/bundle-format.md); everything else
# (pickles, *.bin, *.pt, *.py remote code, archives) is never fetched.
HF_ALLOW_PATTERNS: tuple[str, ...] = (
    "*.safetensors",
    "*.json",
    "tokenizer.model",
    "*.tiktoken",
    "*.txt",
    "*.md",
    "*.jinja",
    "LICENSE*",
    "NOTICE*",
)
SOURCE_RECORD = Path(".modelward") / "source.json"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")


def _download(
    repo_id: str, revision: str, cache_dir: Path | None, offline: bool
) -> tuple[Path, str]:
    """snapshot_download into the HF cache; returns (snapshot folder, resolved commit)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=cache_dir,
            allow_patterns=list(HF_ALLOW_PATTERNS),
            local_files_only=offline,
        )
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as exc:
        fail(f"hf://{repo_id}@{revision}: cannot fetch: {exc}")
    snapshot = Path(folder)
    commit = snapshot.name
    if not _COMMIT.fullmatch(commit):
        fail(f"hf://{repo_id}@{revision}: did not resolve to a 40-hex commit (got {commit!r})")
    if _COMMIT.fullmatch(revision) and revision != commit:
        fail(f"hf://{repo_id}: asked for commit {revision}, got {commit}")
    return snapshot, commit


def _copy_allowed(snapshot: Path, dest: Path) -> list[str]:
    """Copy the allowed regular files of a snapshot (following its links into the cache)."""
    storage = snapshot.parent.parent.resolve()  # models--org--name: snapshots/ and blobs/
    copied: list[str] = []
    for dirpath, dirnames, filenames in os.walk(snapshot):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for filename in sorted(filenames):
            source = Path(dirpath) / filename
            rel = source.relative_to(snapshot).as_posix()
            if not any(fnmatch.fnmatch(rel, p) for p in HF_ALLOW_PATTERNS):
                continue
            real = source.resolve()
            if not real.is_relative_to(storage) or not real.is_file():
                fail(f"{rel}: cache entry points outside the repository cache ({real})")
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(real, target)
            copied.append(rel)
    if not copied:
        fail(f"{snapshot}: no files of an allowed format ({', '.join(HF_ALLOW_PATTERNS)})")
    return copied


@bundle_app.command("import-hf")
def import_hf(
    repo_id: Annotated[str, typer.Argument(help="Hugging Face repository, e.g. org/name")],
    *,
    revision: Annotated[str, typer.Option(help="branch, tag or 40-hex commit")],
    out: Annotated[Path, typer.Option("--out", help="new bundle directory")],
    cache_dir: Annotated[Path | None, typer.Option(help="Hugging Face cache directory")] = None,
    offline: Annotated[bool, typer.Option(help="use only the local cache")] = False,
) -> None:
    """Import a Hugging Face model at a pinned commit, safe formats only."""
    from modelward.attest.scanner import scan_tree

    if not _REPO_ID.fullmatch(repo_id):
        fail(f"{repo_id!r}: not a Hugging Face repository id (org/name)", code=2)
    if not revision or "/.." in revision or revision.startswith("."):
        fail(f"--revision {revision!r}: not a valid revision", code=2)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"{out}: exists and is not an empty directory", code=2)
    # (1): fetch the snapshot and resolve the revision to a commit.
    snapshot, commit = _download(repo_id, revision, cache_dir, offline)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        # (2): copy only allowed formats, then (3) scan what arrived.
        files = _copy_allowed(snapshot, staging)
        report = scan_tree(staging)
        if report.findings:
            lines = "\n".join(f"  {f.path}: {f.rule}: {f.reason}" for f in report.findings)
            fail(f"hf://{repo_id}@{commit}: the scanner refused the snapshot:\n{lines}")
        # (4): record the source, then move into place.
        record = {
            "version": 1,
            "type": "huggingface",
            "repo_id": repo_id,
            "uri": f"hf://{repo_id}",
            "requested_revision": revision,
            "commit": commit,
            "files": files,
        }
        (staging / SOURCE_RECORD).parent.mkdir()
        (staging / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        if out.exists():
            out.rmdir()
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    console.print(f"imported {len(files)} file(s) from hf://{repo_id} at {commit}", markup=False)
    console.print(str(out), markup=False)
    console.print(
        f"next: modelward bundle sign {out} --key KEY --source hf://{repo_id} "
        f"--source-revision {commit} --out {out}.provenance.json",
        markup=False,
    )
