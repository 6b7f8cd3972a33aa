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

from typing import Any, Final

import rfc8785

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
