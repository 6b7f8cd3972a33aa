"""The registry's trust decisions about one bundle, in one place: scan the stored layers,
verify attestations, evaluate the repository policy (attest.policy.evaluate decides).

Trust for *verifying* an attestation is the policy's signers plus every registered key and
identity (so a serving worker's signed baseline verifies); signers that *count* toward the
policy's threshold are the policy's own plus, when ``trust_registered_signers``, those of the
principals allowed to publish to the repository (``extra_trust``).
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
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState
from modelward.registry.domains.repos.service import all_registered_trust, registered_trust
from modelward.registry.errors import BadRequest
from modelward.registry.models import Repository
from modelward.registry.storage.file import FileStore

if TYPE_CHECKING:
    from modelward.attest.manifest import Manifest
    from modelward.attest.policy import Decision, Policy
    from modelward.attest.scanner import Finding
    from modelward.attest.trust import TrustSet, VerifiedStatement

__all__ = [
    "Trust",
    "Verified",
    "evaluate",
    "findings_from_json",
    "scan_layers",
    "trust_for",
    "verify_all",
]


@dataclass(frozen=True)
class Trust:
    verify: TrustSet  # what an attestation may be signed by to be accepted at all
    extra: TrustSet  # registered signers the policy may count (publishers and admins)


@dataclass(frozen=True)
class Verified:
    accepted: tuple[tuple[bytes, VerifiedStatement], ...]
    rejected: tuple[str, ...]

    @property
    def statements(self) -> list[VerifiedStatement]:
        return [stmt for _, stmt in self.accepted]


def trust_for(session: Session, repo: Repository, policy: Policy, state: AppState) -> Trust:
    """The trust to verify with and the registered signers the policy may count.

    Files a policy names resolve only for the operator's default policy (``--policy``),
    relative to its directory; a stored policy is self-contained (repos.parse_stored_policy).
    Raises BadRequest (invalid_policy) when the policy's signers cannot be loaded.
    """
    from modelward.attest.errors import PolicyError
    from modelward.attest.policy import policy_trust_set

    base_dir = None if repo.policy_yaml else state.default_policy_dir
    try:
        own = policy_trust_set(policy, base_dir, source=f"{repo.name} policy")
    except PolicyError as exc:
        raise BadRequest(str(exc), code="invalid_policy") from exc
    extra = registered_trust(session, repo)
    return Trust(verify=own.merged(all_registered_trust(session)), extra=extra)


def scan_layers(state: AppState, manifest: Manifest, policy: Policy) -> list[Finding]:
    """Run the content scanner over every stored layer blob (streamed from the store)."""
    from modelward.attest.policy import policy_scan_limits
    from modelward.attest.scanner import scan_blob

    limits = policy_scan_limits(policy)
    findings: list[Finding] = []
    for layer in manifest.layers:
        with state.store.open(layer.digest) as stream:
            report = scan_blob(layer.path, stream, layer.size, limits)
        findings.extend(report.findings)
    return findings


@contextlib.contextmanager
def _materialized(state: AppState, manifest: Manifest) -> Iterator[Path]:
    """The bundle's files as a tree (hard links on a file store), for OMS verification."""
    base = state.store.root / "_tmp" if isinstance(state.store, FileStore) else None
    tmp = Path(tempfile.mkdtemp(prefix="tree-", dir=base))
    try:
        for layer in manifest.layers:
            target = tmp / layer.path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(state.store, FileStore):
                try:
                    os.link(state.store.blob_path(layer.digest), target)
                    continue
                except OSError:
                    pass
            with target.open("wb") as out:
                for chunk in state.store.read(layer.digest):
                    out.write(chunk)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def verify_all(
    state: AppState, manifest: Manifest, datas: Sequence[bytes], trust: TrustSet
) -> Verified:
    """Verify each attestation against ``trust`` and bind it to the bundle; never raises for a
    bad attestation: its reason goes to ``rejected``."""
    from modelward.attest.errors import AttestError
    from modelward.attest.verify import detect_kind, verify_attestation

    accepted: list[tuple[bytes, VerifiedStatement]] = []
    rejected: list[str] = []
    for index, data in enumerate(datas):
        try:
            if detect_kind(data) == "oms":
                with _materialized(state, manifest) as root:
                    stmt = verify_attestation(data, trust, bundle_digest=manifest.digest, root=root)
            else:
                stmt = verify_attestation(data, trust, bundle_digest=manifest.digest)
        except AttestError as exc:
            rejected.append(f"attestation {index}: {exc}")
            continue
        accepted.append((data, stmt))
    return Verified(tuple(accepted), tuple(rejected))


def evaluate(
    policy: Policy,
    manifest: Manifest,
    verified: Verified,
    findings: Sequence[Finding],
    trust: Trust,
) -> Decision:
    from modelward.attest.policy import evaluate as policy_evaluate

    return policy_evaluate(
        policy,
        manifest=manifest,
        statements=verified.statements,
        rejected=verified.rejected,
        findings=findings,
        extra_trust=trust.extra,
    )


def findings_to_json(findings: Sequence[Finding]) -> str:
    return json.dumps([{"path": f.path, "rule": f.rule, "reason": f.reason} for f in findings])


def findings_from_json(text: str) -> list[Finding]:
    from modelward.attest.scanner import Finding

    raw: list[dict[str, Any]] = json.loads(text)
    return [Finding(path=f["path"], rule=f["rule"], reason=f["reason"]) for f in raw]
