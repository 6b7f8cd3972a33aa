"""``modelward bundle diff OLD NEW``: what a promotion from OLD to NEW changes.

Both references (REPO@ALIAS, REPO:TAG or REPO@sha256:...) are resolved through the registry;
each manifest is fetched as exact bytes and checked against its digest, and the reviewed
text files (config, generation config, tokenizer config, chat template, ``modelward.yaml``)
are fetched as blobs checked against their digests (at most ``MAX_TEXT_BYTES`` each). The
diff itself is ``attest.bundle_diff.diff_bundles``, the one the reviewer console shows.
Human output: the files added, removed and changed, then unified diffs; ``--json`` prints
``{old, new, added, removed, changed, unchanged, text_diffs}``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from modelward.attest.bundle_diff import REVIEWED_FILES, BundleDiff, diff_bundles
from modelward.attest.manifest import Manifest, parse_manifest
from modelward.cli.remote import AsJson, registry_client, reported, valid_ref
from modelward.client.api import RegistryClient
from modelward.client.config import parse_reference

__all__ = ["MAX_TEXT_BYTES", "bundle_diff", "diff_lines"]

MAX_TEXT_BYTES = 256 * 2**10  # the same bound as the console's (registry/ui/bundle_view.py)

Old = Annotated[
    str,
    typer.Argument(
        metavar="OLD", help="REPO@ALIAS, REPO:TAG or REPO@sha256:<hex>", callback=valid_ref
    ),
]
New = Annotated[
    str,
    typer.Argument(
        metavar="NEW", help="REPO@ALIAS, REPO:TAG or REPO@sha256:<hex>", callback=valid_ref
    ),
]


def _manifest(client: RegistryClient, ref: str) -> tuple[Manifest, dict[str, str]]:
    r = parse_reference(ref)
    digest = client.resolve(r)
    manifest = parse_manifest(client.get_manifest(r.repo, digest))
    texts: dict[str, str] = {}
    for layer in manifest.layers:
        if layer.path in REVIEWED_FILES and layer.size <= MAX_TEXT_BYTES:
            try:
                texts[layer.path] = client.get_blob(layer.digest).decode("utf-8")
            except UnicodeDecodeError:
                continue
    return manifest, texts


def diff_lines(diff: BundleDiff) -> list[str]:
    """The human rendering: a summary, one line per file, then the text diffs."""
    out = [
        f"{diff.old} -> {diff.new}",
        f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed, "
        f"{diff.unchanged} unchanged",
    ]
    out += [f"+ {f['path']}  ({f['size']} bytes)" for f in diff.added]
    out += [f"- {f['path']}  ({f['size']} bytes)" for f in diff.removed]
    out += [f"~ {f['path']}  ({f['old_size']} -> {f['new_size']} bytes)" for f in diff.changed]
    for text in diff.text:
        out.append("")
        if text["note"]:
            out.append(f"{text['path']}: {text['note']}")
        out += text["lines"]
    return out


def bundle_diff(old: Old, new: New, as_json: AsJson = False) -> None:
    """Compare two bundles: files added, removed and changed; text diffs of config,
    generation and tokenizer config, chat template and modelward.yaml."""
    with reported(), registry_client() as client:
        before, before_texts = _manifest(client, old)
        after, after_texts = _manifest(client, new)
    texts = {before.digest: before_texts, after.digest: after_texts}

    def read(manifest: Manifest, path: str) -> str | None:
        return texts[manifest.digest].get(path)

    diff = diff_bundles(before, after, read)
    if as_json:
        answer: dict[str, Any] = diff.to_json()
        typer.echo(json.dumps(answer, indent=2, sort_keys=True))
        return
    for line in diff_lines(diff):
        typer.echo(line)
