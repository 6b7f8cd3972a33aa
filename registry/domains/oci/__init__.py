"""OCI Distribution Spec v1.1 under ``/v2`` (docs/oci.md): the token flow, blobs and uploads
over the registry's one blob store and upload sessions, manifests judged by the one bundle
verifier, tags as aliases, attestations as referrers."""
