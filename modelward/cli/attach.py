"""``modelward attach REPO@REF FILE...``: attach attestations as OCI referrers through ``/v2``.

The cosign/``oras attach`` shape (docs/oci.md#attach): each FILE (a DSSE envelope of an
in-toto statement: provenance, evaluation, baseline...; a Sigstore bundle; an OMS
``model.sig``) goes up as the one layer of an OCI image manifest whose ``subject`` is the
bundle, so ``oras discover`` and ``GET /v2/R/referrers/DIGEST`` list it. The registry
verifies it exactly as it verifies ``attestation add`` (``oci.manifests.attach_referrer``
hands it to ``attestations.service.attach``: one code path), and refuses what that refuses.

Steps, per file: (1) read it (bounded) and tell its format from its content: the
artifactType (attest.oci_media); (2) resolve REF and fetch the subject's manifest bytes
through ``/v2`` (a bundle, or a manifest pending its attestations), checked against the
digest (its size goes in ``subject``); (3) upload the layer and the
empty config (``POST /v2/R/blobs/uploads/?digest=``); (4) PUT the referrer manifest
(canonical JSON) by the digest of those exact bytes. A refusal prints the registry's
message with exit 1; a malformed REPO@REF or an unreadable or unknown file exits 2.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from modelward.cli.common import console, fail, read_bounded
from modelward.cli.remote import AsJson, registry_client, reported, valid_ref

__all__ = ["attach", "attach_help"]

attach_help = (
    "Attach signatures, provenance or evaluations to a bundle as OCI referrers (through /v2)."
)


def _oci_error(answer: Any) -> str:
    """The message of an OCI error body (``{"errors": [{code, message}]}``), else the status."""
    try:
        errors = json.loads(answer.content)["errors"]
        return "; ".join(f"{e['code']}: {e['message']}" for e in errors)
    except (ValueError, KeyError, TypeError):
        return f"HTTP {answer.status_code} {answer.reason_phrase}"


def attach(
    ref: Annotated[
        str,
        typer.Argument(
            metavar="REPO@REF", help="REPO@ALIAS, REPO:TAG or REPO@sha256:<hex>", callback=valid_ref
        ),
    ],
    files: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE...",
            dir_okay=False,
            help="DSSE envelope (provenance, evaluation, ...), Sigstore bundle or OMS model.sig",
        ),
    ],
    as_json: AsJson = False,
) -> None:
    """Attach signatures, provenance or evaluations to a bundle as OCI referrers (through /v2).

    Each FILE becomes a referrer manifest whose subject is the bundle; the registry verifies
    it as it verifies ``attestation add`` and lists it in ``GET /v2/REPO/referrers/DIGEST``
    (``oras discover``).
    """
    import httpx
    import rfc8785

    from modelward.attest import oci_media as mt
    from modelward.attest.errors import UnknownSignatureFormat
    from modelward.attest.verify import MAX_SIGNATURE_BYTES, detect_kind
    from modelward.client.config import parse_reference
    from modelward.client.deadline import deadline
    from modelward.client.errors import transport_error

    # (1): every file read and told apart before any request.
    layers: list[tuple[Path, bytes, str]] = []
    for path in files:
        data = read_bounded(path, "attestation", MAX_SIGNATURE_BYTES)
        try:
            detected = detect_kind(data)
        except UnknownSignatureFormat as exc:
            fail(f"{path}: {exc}", code=2)
        layers.append((path, data, detected))
    reference = parse_reference(ref)
    repo = reference.repo
    done: list[dict[str, Any]] = []
    with reported(), registry_client() as client:
        digest = client.resolve(reference)
        http = client._http  # /v2 answers OCI error bodies: read them here

        def send(
            method: str,
            url: str,
            body: bytes,
            content_type: str,
            *,
            path: Path | None,
            hint: str | None,
        ) -> httpx.Response:
            # one operation, one deadline for the whole of it (docs/loader.md#deadlines)
            options = client.options
            try:
                header = "Accept" if method == "GET" else "Content-Type"
                with deadline(options.deadline + len(body) / options.min_rate):
                    answer = http.request(
                        method, url, content=body or None, headers={header: content_type}
                    )
            except httpx.HTTPError as exc:
                raise transport_error(exc, method, client.base_url + url) from exc
            if answer.status_code >= 400:
                where = f"{path}: " if path is not None else ""
                fail(f"{where}{method} {url}: {_oci_error(answer)}", hint=hint)
            return answer

        # (2): the subject through /v2 (a bundle, or a manifest pending its attestations),
        # its exact bytes checked against the digest.
        url = f"/v2/{repo}/manifests/{digest}"
        subject = send("GET", url, b"", mt.IMAGE_MANIFEST, path=None, hint=None)
        if "sha256:" + hashlib.sha256(subject.content).hexdigest() != digest:
            fail(f"{repo}@{digest}: the registry served a manifest of other bytes")
        subject_size = len(subject.content)
        for n, (path, data, kind) in enumerate(layers):
            hint = f"the {n} file(s) before it were attached" if n else None
            layer_digest = "sha256:" + hashlib.sha256(data).hexdigest()
            # (3): the layer and the empty config, each by digest.
            for blob, blob_digest in (
                (data, layer_digest),
                (mt.EMPTY_JSON, mt.EMPTY_CONFIG_DIGEST),
            ):
                url = f"/v2/{repo}/blobs/uploads/?digest={blob_digest}"
                send("POST", url, blob, "application/octet-stream", path=path, hint=hint)
            # (4): the referrer manifest, by the digest of the bytes sent.
            manifest = rfc8785.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": mt.IMAGE_MANIFEST,
                    "artifactType": mt.ARTIFACT_TYPE_BY_KIND[kind],
                    "config": {
                        "mediaType": mt.EMPTY_CONFIG_MEDIA_TYPE,
                        "digest": mt.EMPTY_CONFIG_DIGEST,
                        "size": len(mt.EMPTY_JSON),
                    },
                    "layers": [
                        {
                            "mediaType": mt.LAYER_MEDIA_TYPE_BY_KIND[kind],
                            "digest": layer_digest,
                            "size": len(data),
                        }
                    ],
                    "subject": {
                        "mediaType": mt.IMAGE_MANIFEST,
                        "digest": digest,
                        "size": subject_size,
                    },
                }
            )
            manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
            url = f"/v2/{repo}/manifests/{manifest_digest}"
            answer = send("PUT", url, manifest, mt.IMAGE_MANIFEST, path=path, hint=hint)
            done.append(
                {
                    "file": str(path),
                    "kind": kind,
                    "artifact_type": mt.ARTIFACT_TYPE_BY_KIND[kind],
                    "referrer": manifest_digest,
                    "state": answer.headers.get("Modelward-State"),
                    "subject": f"{repo}@{digest}",
                }
            )
    if as_json:
        typer.echo(json.dumps(done, indent=2, sort_keys=True))
        return
    for item in done:
        console.print(
            f"attached {item['file']} to {item['subject']}: referrer {item['referrer']} "
            f"({item['artifact_type']}, {item['state']})",
            markup=False,
        )
