"""modelward.attest: the pure trust library (no network, no database, no environment).

The public surface is these names; the submodules are the implementation and may change.
The one place that says "this bundle is trusted" is ``verify_bundle`` (docs/policy.md#the-verdict).

Errors (every one carries its evidence)::

    AttestError
    ├── BundleError            a bundle tree or manifest is not acceptable
    ├── VerificationError      a signature, envelope or statement does not verify
    │   └── UntrustedSigner    no signature claims a trusted signer (ignored, not tampering)
    ├── PolicyError            a policy document or the trust flags are invalid
    └── PolicyDenied           the policy denied a bundle; ``decision`` holds every check
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelward._exports import lazy_exports

if TYPE_CHECKING:
    from modelward.attest.errors import (
        AttestError,
        BundleError,
        PolicyError,
        UntrustedSigner,
        VerificationError,
    )
    from modelward.attest.manifest import Manifest, build_bundle, bundle_digest, parse_manifest
    from modelward.attest.policy import (
        Decision,
        Policy,
        PolicyDenied,
        TrustFlags,
        policy_from_flags,
    )
    from modelward.attest.trust import TrustSet, VerifiedStatement
    from modelward.attest.verifier import (
        BlobReader,
        BundleVerdict,
        DirectoryReader,
        TrustedBundle,
        verify_bundle,
        verify_bundle_result,
    )

__all__ = [
    "AttestError",
    "BlobReader",
    "BundleError",
    "BundleVerdict",
    "Decision",
    "DirectoryReader",
    "Manifest",
    "Policy",
    "PolicyDenied",
    "PolicyError",
    "TrustFlags",
    "TrustSet",
    "TrustedBundle",
    "UntrustedSigner",
    "VerificationError",
    "VerifiedStatement",
    "build_bundle",
    "bundle_digest",
    "parse_manifest",
    "policy_from_flags",
    "verify_bundle",
    "verify_bundle_result",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "AttestError": "modelward.attest.errors",
        "BundleError": "modelward.attest.errors",
        "PolicyError": "modelward.attest.errors",
        "UntrustedSigner": "modelward.attest.errors",
        "VerificationError": "modelward.attest.errors",
        "Manifest": "modelward.attest.manifest",
        "build_bundle": "modelward.attest.manifest",
        "bundle_digest": "modelward.attest.manifest",
        "parse_manifest": "modelward.attest.manifest",
        "Decision": "modelward.attest.policy",
        "Policy": "modelward.attest.policy",
        "PolicyDenied": "modelward.attest.policy",
        "TrustFlags": "modelward.attest.policy",
        "policy_from_flags": "modelward.attest.policy",
        "TrustSet": "modelward.attest.trust",
        "VerifiedStatement": "modelward.attest.trust",
        "BlobReader": "modelward.attest.verifier",
        "BundleVerdict": "modelward.attest.verifier",
        "DirectoryReader": "modelward.attest.verifier",
        "TrustedBundle": "modelward.attest.verifier",
        "verify_bundle": "modelward.attest.verifier",
        "verify_bundle_result": "modelward.attest.verifier",
    },
)
