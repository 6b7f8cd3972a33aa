"""``modelward bundle export|import``: a bundle and its attestations through an OCI layout.

For air gaps (docs/air-gap.md). ``export REPO@REF --oci-layout DIR`` writes the bundle (its
manifest bytes verbatim: the bundle digest is the OCI manifest digest), its blobs and its live
attestations as referrers into an OCI image layout that skopeo and oras read. ``import DIR
REPO`` reads such a layout (ours, skopeo's, oras's), checks all of it on this machine first,
then pushes it through the registry's normal checks. Both talk to the registry only through
``RegistryClient``; the layout itself is read and written by ``attest.oci_layout``.

Heavy modules (httpx, the client, attest) are imported inside the commands.
"""

from __future__ import annotations

import base64
import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.common import console, err_console, fail
from modelward.cli.remote import repo_argument, valid_ref

__all__ = ["bundle_export", "bundle_import", "export_help", "import_help"]

export_help = "Write a bundle and its attestations (as referrers) into an OCI image layout."
import_help = "Push a bundle and its attestations from an OCI image layout into a repository."


@contextlib.contextmanager
def _refusals(layout: Path) -> Iterator[None]:
    """Layout, bundle and disk errors as ``error: ...`` with exit 1 (the client's own errors
    go through ``modelward.cli.remote.reported``)."""
    from modelward.attest.errors import AttestError
    from modelward.attest.oci_layout import LayoutError

    try:
        yield
    except LayoutError as exc:
        where = exc.file if Path(exc.file).is_absolute() else f"{layout}/{exc.file}"
        fail(f"{where}: {exc.reason}")
    except AttestError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or layout}: {exc.strerror or exc}")


def bundle_export(
    ref: Annotated[
        str,
        typer.Argument(
            metavar="REPO@REF",
            help="REPO@ALIAS, REPO:TAG or REPO@sha256:<hex>",
            callback=valid_ref,
        ),
    ],
    oci_layout: Annotated[
        Path,
        typer.Option(
            "--oci-layout",
            help="Layout directory: created, or an existing OCI layout the bundle is added to",
        ),
    ],
    *,
    tag: Annotated[
        str | None,
        typer.Option(help="Tag in the layout (default: the alias of REF, else 'latest')"),
    ] = None,
) -> None:
    """Write a bundle and its attestations (as referrers) into an OCI image layout.

    Steps: (1) resolve REF and fetch the exact manifest bytes, checked against the digest;
    (2) list the bundle's live attestations; (3) stream the config and every layer blob into
    the layout, each checked against its digest and size; (4) add each attestation as a
    referrer; (5) write index.json with the bundle tagged. A new DIR appears only complete;
    into an existing layout, nothing is left behind on failure.
    """
    from modelward.attest.manifest import parse_manifest
    from modelward.attest.oci_layout import ARTIFACT_TYPE_BY_KIND, LayoutWriter, check_tag
    from modelward.cli.remote import registry_client, reported
    from modelward.client.config import parse_reference

    with reported():
        reference = parse_reference(ref)
    chosen = tag or reference.alias or "latest"
    try:
        check_tag(chosen)
    except ValueError as exc:
        fail(f"--tag: {exc}", code=2)
    with reported(), _refusals(oci_layout), registry_client() as client:
        # (1): the manifest bytes, verified against the digest by the client.
        digest = client.resolve(reference)
        raw = client.get_manifest(reference.repo, digest)
        manifest = parse_manifest(raw)
        # (2): the live attestations, exact bytes.
        attestations = client.list_attestations(reference.repo, digest)
        for item in attestations:
            if item.get("kind") not in ARTIFACT_TYPE_BY_KIND:
                fail(
                    f"attestation #{item.get('id')}: no OCI artifactType for its kind "
                    f"{item.get('kind')!r}"
                )
        with LayoutWriter(oci_layout) as writer:
            writer.add_bundle(raw, chosen)  # first: a tag taken in DIR fails before downloads
            # (3): every blob, streamed and verified by download_blob.
            blobs = {manifest.config.digest: manifest.config.size}
            blobs.update((layer.digest, layer.size) for layer in manifest.layers)
            for blob_digest, size in blobs.items():
                fill = functools.partial(_download, client, blob_digest, size=size)
                writer.put_file(blob_digest, size, fill, fill_verifies=True)
            # (4): the attestations as referrers of the bundle manifest.
            for item in attestations:
                data = base64.b64decode(item["data"], validate=True)
                writer.add_attestation(raw, data, item["kind"], item["predicate_type"])
            # (5): index.json last; a new layout appears at once.
            writer.commit()
    console.print(f"exported {reference.repo}@{digest} to {oci_layout} as tag {chosen}")
    console.print(f"blobs: {len(blobs)}, attestations: {len(attestations)}")


def _download(client: Any, digest: str, dest: Path, size: int) -> None:
    client.download_blob(digest, dest, size=size)


def bundle_import(
    directory: Annotated[Path, typer.Argument(help="OCI image layout directory")],
    repo: Annotated[
        str,
        typer.Argument(metavar="ORG/NAME", help="ORG/NAME to push into", callback=repo_argument),
    ],
    *,
    tag: Annotated[
        str | None, typer.Option(help="Which tag of the layout (default: its only tag)")
    ] = None,
    alias: Annotated[str | None, typer.Option(help="Move this alias to the bundle")] = None,
    reason: Annotated[str | None, typer.Option(help="Reason recorded with the alias move")] = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="Parallel uploads")] = 4,
) -> None:
    """Push a bundle and its attestations from an OCI image layout into a repository.

    Steps: (1) read the layout strictly: no symlinks, bounded index.json, the tagged manifest
    and each referrer matching its descriptor, known media types only; (2) stream every blob
    through sha256 (nothing leaves the machine before the whole layout checked out);
    (3) upload the blobs the registry lacks; (4) PUT the manifest bytes verbatim with the
    attestations: the registry scans, verifies and applies the repository policy, and records
    all or nothing; (5) a bundle the registry already held gets the attestations it lacks
    attached one by one; (6) move --alias.
    """
    from modelward.attest.oci_layout import open_layout
    from modelward.cli.aliases import warn_unsigned
    from modelward.cli.remote import registry_client, reported
    from modelward.client.api import APIError
    from modelward.client.blobs import BlobSource

    if not directory.is_dir():  # named on the command line: a usage error (docs/cli.md)
        fail(f"{directory}: no such directory", code=2)
    with _refusals(directory):
        # (1)-(2): the whole layout, on this machine, before any request.
        bundle = open_layout(directory).bundle(tag)
        bundle.verify_blobs()
    attestations = [a.data for a in bundle.attestations]
    by_sha = {a.sha256: a.file for a in bundle.attestations}
    refused: list[str] = []
    with reported(), registry_client(workers) as client:
        client.get_repo(repo)  # fail fast: NotFoundError, UnauthorizedError
        # (3): blobs, HEAD first, charged to the repository they are imported into.
        sources = [
            BlobSource(digest=d, size=n, path=p, repository=repo) for d, n, p in bundle.blobs()
        ]
        sent = client.blobs.upload_many(sources)
        # (4): the manifest bytes verbatim, with every attestation.
        answer = client.put_bundle(repo, bundle.digest, bundle.manifest.raw, attestations)
        ignored = list(answer.get("ignored_attestations") or ())
        # (5): an existing bundle: attach what it lacks.
        if not answer.get("created", True):
            for item in ignored:
                data = next(a.data for a in bundle.attestations if a.sha256 == item["sha256"])
                try:
                    client.add_attestation(repo, bundle.digest, data)
                except APIError as exc:  # each is judged alone: report it, try the others
                    refused.append(f"{directory}/{by_sha.get(item['sha256'])}: {exc}")
            ignored = []
        if refused:
            fail(
                f"{repo}@{bundle.digest} is held, but the registry refused attestations:\n  "
                + "\n  ".join(refused)
            )
        # (6): the alias.
        moved = client.set_alias(repo, alias, bundle.digest, reason=reason) if alias else None
    console.print(f"imported {repo}@{bundle.digest} from {directory} (tag {bundle.tag})")
    console.print(
        f"blobs: {sum(sent)} uploaded, {len(sent) - sum(sent)} already present; "
        f"attestations: {len(attestations)}"
    )
    for item in ignored:
        shown = by_sha.get(item.get("sha256", ""), item.get("sha256", "?"))
        err_console.print(
            f"warning: attestation {shown} not recorded: {item.get('reason')}", markup=False
        )
    if moved is not None:
        # the same words as push --alias: a move no TUF role signed is invisible to workers
        unsigned = " UNSIGNED" if warn_unsigned(repo, moved) is not None else ""
        console.print(f"{repo}@{moved['alias']} -> {bundle.digest} (v{moved['version']}){unsigned}")
