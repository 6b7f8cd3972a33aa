"""The registry's side of the bundle verdict: which trust, and reading stored blobs.

The verdict itself is attest.verifier's (``verify_bundle``), the same one the loader and
``bundle verify`` use; this module only supplies what the registry knows:

- trust: an attestation *verifies* when signed by the policy's signers or by any registered
  key or identity (so a serving worker's signed baseline verifies); signers that *count*
  towards the policy's threshold are the policy's own plus, when
  ``trust_registered_signers``, those of the principals allowed to publish to the
  repository;
- a ``BlobReader`` over the blob store (hard links into a temporary tree on a file store
  when an OMS signature needs the files as a tree);
- ``state.verdicts`` (registry/domains/_verdict_cache.py), where the evidence of a bundle
  already judged with the same attestations and trust is recalled instead of paid again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from sqlalchemy.orm import Session

from modelward.attest.errors import AttestError, BundleError, UntrustedSigner
from modelward.attest.policy import PolicyDenied, policy_trust_set
from modelward.attest.verifier import (
    TrustedBundle,
    VerifiedAttestation,
    verify_bundle,
    verify_one_attestation,
)
from modelward.registry.domains._state import AppState
from modelward.registry.domains.repos.service import all_registered_trust, registered_trust
from modelward.registry.errors import BadRequest, InvalidManifest, Refused
from modelward.registry.models import Repository
from modelward.registry.storage.file import FileStore

if TYPE_CHECKING:
    from modelward.attest.manifest import Layer, Manifest
    from modelward.attest.policy import Policy
    from modelward.attest.scanner import Finding
    from modelward.attest.trust import TrustSet

__all__ = [
    "StoreReader",
    "Trust",
    "findings_to_json",
    "judge",
    "trust_for",
    "verify_attachment",
]


@dataclass(frozen=True)
class Trust:
    verify: TrustSet  # what an attestation may be signed by to be accepted at all
    extra: TrustSet  # registered signers the policy may count (publishers and admins)


def trust_for(session: Session, repo: Repository, policy: Policy, state: AppState) -> Trust:
    """The trust to verify with and the registered signers the policy may count.

    Files a policy names resolve only for the operator's default policy (``--policy``),
    relative to its directory; a stored policy is self-contained (repos.parse_stored_policy).
    Raises BadRequest (invalid_policy) when the policy's signers cannot be loaded.
    """
    from modelward.attest.errors import PolicyError

    base_dir = None if repo.policy_yaml else state.default_policy_dir
    try:
        own = policy_trust_set(policy, base_dir, source=f"{repo.name} policy")
    except PolicyError as exc:
        raise BadRequest(str(exc), code="invalid_policy") from exc
    extra = registered_trust(session, repo)
    return Trust(verify=own.merged(all_registered_trust(session)), extra=extra)


@dataclass(frozen=True)
class StoreReader:
    """attest.verifier.BlobReader over the registry's blob store."""

    state: AppState
    manifest: Manifest

    def open(self, layer: Layer) -> contextlib.AbstractContextManager[BinaryIO]:
        return self.state.store.open(layer.digest)

    def local_path(self, layer: Layer) -> Path | None:
        store = self.state.store
        return store.blob_path(layer.digest) if isinstance(store, FileStore) else None

    @contextlib.contextmanager
    def tree(self) -> Iterator[Path]:
        """The bundle's files as a tree (hard links on a file store), for OMS verification."""
        store = self.state.store
        base = store.root / "_tmp" if isinstance(store, FileStore) else None
        tmp = Path(tempfile.mkdtemp(prefix="tree-", dir=base))
        try:
            for layer in self.manifest.layers:
                target = tmp / layer.path
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(store, FileStore):
                    try:
                        os.link(store.blob_path(layer.digest), target)
                        continue
                    except OSError:
                        pass
                with target.open("wb") as out:
                    for chunk in store.read(layer.digest):
                        out.write(chunk)
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def judge(
    state: AppState,
    *,
    manifest: Manifest,
    attestations: Sequence[bytes],
    policy: Policy,
    trust: Trust,
) -> TrustedBundle:
    """attest.verifier.verify_bundle over the stored blobs, with the registry's trust.

    Raises Refused (``policy_denied``, detail: every check) when the policy denies, and
    InvalidManifest when the manifest is over the policy's limit.
    """
    try:
        return verify_bundle(
            manifest.raw,
            attestations,
            policy=policy,
            trust=trust.verify,
            registered=trust.extra,
            reader=StoreReader(state, manifest),
            expected_digest=manifest.digest,
            memo=state.verdicts,  # a later move or dry run of this bundle recalls it
        )
    except PolicyDenied as exc:
        raise Refused(
            "policy denied the bundle: " + "; ".join(exc.decision.reasons),
            detail=exc.decision.as_dict(),
            code="policy_denied",
        ) from exc
    except BundleError as exc:
        raise InvalidManifest(f"invalid manifest: {exc}", detail=str(exc)) from exc


def verify_attachment(
    state: AppState, *, manifest: Manifest, data: bytes, trust: Trust
) -> VerifiedAttestation:
    """One attestation for a stored bundle, through the verifier's step (4).

    Raises Refused: ``attestation_untrusted`` when no registered or policy signer signed it
    (the registry keeps only statements somebody it knows vouched for), and
    ``attestation_rejected`` for a bad signature, another bundle's statement or bad bytes.
    """
    try:
        return verify_one_attestation(
            manifest, data, trust=trust.verify, reader=StoreReader(state, manifest)
        )
    except UntrustedSigner as exc:
        raise Refused(
            f"attestation not attached: no registered or policy signer signed it: {exc}",
            detail={"reasons": [str(exc)]},
            code="attestation_untrusted",
        ) from exc
    except AttestError as exc:
        raise Refused(
            f"attestation rejected: {exc}",
            detail={"reasons": [str(exc)]},
            code="attestation_rejected",
        ) from exc


def findings_to_json(findings: Sequence[Finding]) -> str:
    return json.dumps([{"path": f.path, "rule": f.rule, "reason": f.reason} for f in findings])
