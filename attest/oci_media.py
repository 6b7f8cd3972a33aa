"""Media types and artifact types modelward uses on the OCI side (docs/oci.md#media-types),
and the one maker of referrer manifests.

The bundle itself is an OCI image manifest following the CNCF ModelPack model-spec
(attest.manifest: ``MANIFEST_MEDIA_TYPE``, ``ARTIFACT_TYPE``, ``CONFIG_MEDIA_TYPE``). An
attestation travels as a referrer: an OCI image manifest with ``subject`` (the bundle),
``artifactType`` naming the attestation's format, the empty config, and exactly one layer
holding the attestation's bytes verbatim. ``/v2`` (registry/domains/oci) and the OCI layout
export/import (attest/oci_layout.py) both use this module, so a referrer has one digest on
both doors and across an air gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import rfc8785

from modelward.attest.errors import ManifestError
from modelward.attest.tree import check_name

__all__ = [
    "ANNOTATION_KIND",
    "ANNOTATION_PREDICATE_TYPE",
    "ARTIFACT_TYPE_BY_KIND",
    "ATTESTATION_ARTIFACT_TYPES",
    "EMPTY_CONFIG_DIGEST",
    "EMPTY_CONFIG_MEDIA_TYPE",
    "EMPTY_JSON",
    "IMAGE_INDEX",
    "IMAGE_MANIFEST",
    "INTOTO_DSSE",
    "KINDS_BY_ARTIFACT_TYPE",
    "LAYER_MEDIA_TYPE_BY_KIND",
    "MODEL_ARTIFACT_TYPE",
    "MODEL_CONFIG",
    "OMS_MODEL_SIG",
    "SIGSTORE_BUNDLE",
    "TITLE_ANNOTATION",
    "check_referrer",
    "referrer_manifest",
]

IMAGE_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
IMAGE_INDEX: Final = "application/vnd.oci.image.index.v1+json"
MODEL_ARTIFACT_TYPE: Final = "application/vnd.cncf.model.manifest.v1+json"
MODEL_CONFIG: Final = "application/vnd.cncf.model.config.v1+json"

# The OCI 1.1 empty descriptor: a referrer's config (two bytes, ``{}``).
EMPTY_CONFIG_MEDIA_TYPE: Final = "application/vnd.oci.empty.v1+json"
EMPTY_JSON: Final = b"{}"
EMPTY_CONFIG_DIGEST: Final = (
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
)

# Attestation formats (attest.trust.SignatureKind -> artifactType and layer media type).
INTOTO_DSSE: Final = "application/vnd.in-toto+json"  # a DSSE envelope of an in-toto statement
SIGSTORE_BUNDLE: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
# OpenSSF Model Signing ``model.sig`` (a Sigstore bundle around a DSSE envelope whose
# statement lists the model's files): its own artifactType so ``?artifactType=`` tells it
# from other Sigstore bundles; its layer keeps the Sigstore bundle media type.
OMS_MODEL_SIG: Final = "application/vnd.dev.modelward.oms.model-sig.v1+json"

ARTIFACT_TYPE_BY_KIND: Final = {
    "dsse": INTOTO_DSSE,
    "sigstore": SIGSTORE_BUNDLE,
    "oms": OMS_MODEL_SIG,
}
LAYER_MEDIA_TYPE_BY_KIND: Final = {
    "dsse": INTOTO_DSSE,
    "sigstore": SIGSTORE_BUNDLE,
    "oms": SIGSTORE_BUNDLE,
}
# The artifactTypes a pushed referrer may declare for each verified kind (an OMS signature
# is a Sigstore bundle too, so it may arrive under either name).
KINDS_BY_ARTIFACT_TYPE: Final = {
    INTOTO_DSSE: frozenset({"dsse"}),
    SIGSTORE_BUNDLE: frozenset({"sigstore", "oms"}),
    OMS_MODEL_SIG: frozenset({"oms"}),
}
ATTESTATION_ARTIFACT_TYPES: Final = frozenset(KINDS_BY_ARTIFACT_TYPE)

# Annotations on a referrer descriptor (the verified statement's kind and predicate type).
ANNOTATION_KIND: Final = "dev.modelward.attestation.kind"
ANNOTATION_PREDICATE_TYPE: Final = "dev.modelward.attestation.predicate-type"


def referrer_manifest(
    *,
    kind: str,
    predicate_type: str,
    attestation_digest: str,
    attestation_size: int,
    subject_digest: str,
    subject_size: int,
) -> bytes:
    """The referrer manifest modelward makes for a stored attestation (canonical JSON,
    RFC 8785, no timestamps): the same attestation of the same bundle always has the same
    manifest digest, on ``/v2`` and in an exported OCI layout.

    Raises KeyError for a kind that is not ``dsse``, ``sigstore`` or ``oms``.
    """
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": IMAGE_MANIFEST,
        "artifactType": ARTIFACT_TYPE_BY_KIND[kind],
        "config": {
            "mediaType": EMPTY_CONFIG_MEDIA_TYPE,
            "digest": EMPTY_CONFIG_DIGEST,
            "size": len(EMPTY_JSON),
            "data": "e30=",
        },
        "layers": [
            {
                "mediaType": LAYER_MEDIA_TYPE_BY_KIND[kind],
                "digest": attestation_digest,
                "size": attestation_size,
            }
        ],
        "subject": {"mediaType": IMAGE_MANIFEST, "digest": subject_digest, "size": subject_size},
        "annotations": {ANNOTATION_KIND: kind, ANNOTATION_PREDICATE_TYPE: predicate_type},
    }
    return rfc8785.dumps(doc)


# The OCI title annotation: the file name an OCI client (oras) writes a pulled layer to.
TITLE_ANNOTATION: Final = "org.opencontainers.image.title"
MAX_TITLE_BYTES: Final = 255


def check_referrer(doc: Mapping[str, Any], artifact_type: str) -> None:
    """Check that a pushed referrer manifest is what it claims (docs/oci.md#referrers), by
    the rules a bundle manifest's descriptors follow (attest.manifest); raise
    ``ManifestError`` naming the first problem:

    (1) its config is the OCI empty descriptor: digest ``EMPTY_CONFIG_DIGEST``, size 2,
        media type the empty type (or ``artifact_type``, as older clients write it), and
        inline ``data``, when present, ``e30=``: a config that claims to be empty names no
        other blob;
    (2) its layers' annotations are strings, and a title (the name a client writes the
        layer to) is one safe file name: no ``/``, ``\\``, ``.``/``..``, control or bidi
        character, NFC-normalized (``attest.tree.check_name``, as a bundle's paths), at most
        ``MAX_TITLE_BYTES`` bytes.
    """
    # (1) the empty config, really empty.
    config = doc.get("config")
    if not isinstance(config, Mapping):
        raise ManifestError("referrer: config: must be a descriptor")
    media = config.get("mediaType")
    if media not in (EMPTY_CONFIG_MEDIA_TYPE, artifact_type):
        raise ManifestError(
            f"referrer: config.mediaType {str(media)[:120]!r}: must be {EMPTY_CONFIG_MEDIA_TYPE}"
        )
    if config.get("digest") != EMPTY_CONFIG_DIGEST or config.get("size") != len(EMPTY_JSON):
        raise ManifestError(
            f"referrer: config claims {str(media)[:120]} but names "
            f"{str(config.get('digest'))[:80]} of {str(config.get('size'))[:20]} bytes: a "
            f"referrer's config is the empty descriptor ({EMPTY_CONFIG_DIGEST}, 2 bytes)"
        )
    if "data" in config and config["data"] != "e30=":
        raise ManifestError("referrer: config.data: the empty descriptor's data is 'e30='")
    # (2) layer annotations: strings, and a title that is one safe file name.
    layers = doc.get("layers")
    for index, layer in enumerate(layers if isinstance(layers, list) else []):
        where = f"referrer: layers[{index}]"
        annotations = layer.get("annotations", {}) if isinstance(layer, Mapping) else {}
        if not isinstance(annotations, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
        ):
            raise ManifestError(f"{where}.annotations: must map strings to strings")
        title = annotations.get(TITLE_ANNOTATION)
        if title is None:
            continue
        if len(title.encode("utf-8", "surrogatepass")) > MAX_TITLE_BYTES:
            raise ManifestError(f"{where}: {TITLE_ANNOTATION} longer than {MAX_TITLE_BYTES} bytes")
        problem = check_name(title)
        if problem is not None:
            raise ManifestError(
                f"{where}: {TITLE_ANNOTATION} {title[:200]!r} is not a safe file name: "
                f"{problem.reason}"
            )
