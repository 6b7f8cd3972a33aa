"""Signed statements a worker writes and reads: baselines and replay results.

A worker signs with its own key (``--worker-key``); the registry stores the DSSE
envelope as an attestation of the bundle. Reading back, each envelope is verified
against the worker's trust (its policy's signers plus the worker key's public half):
a baseline nobody trusted signed is never compared against.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelward.attest.errors import AttestError
from modelward.attest.trust import TrustSet, VerifiedStatement
from modelward.loader.baseline import Baseline

__all__ = ["SignedBaseline", "WorkerKey", "find_baselines", "load_worker_key", "sign_predicate"]


@dataclass(frozen=True)
class WorkerKey:
    key: Any
    trust: TrustSet  # the public half, as a TrustSet


@dataclass(frozen=True)
class SignedBaseline:
    baseline: Baseline
    signers: tuple[str, ...]


def load_worker_key(path: Path) -> WorkerKey:
    """Load the worker's private key (``KeyError_`` when unreadable)."""
    from modelward.attest.keys import load_private_key, trusted_key

    key = load_private_key(path)
    return WorkerKey(key, TrustSet(keys=(trusted_key(f"worker:{path.name}", key.public_key()),)))


def sign_predicate(
    worker: WorkerKey, repo: str, digest: str, predicate_type: str, predicate: dict[str, Any]
) -> bytes:
    """A DSSE envelope over an in-toto statement about ``repo@digest``."""
    from modelward.attest.dsse import sign_envelope
    from modelward.attest.statement import make_statement

    payload = make_statement(repo, digest, predicate_type, predicate)
    return sign_envelope(payload, [worker.key])


def find_baselines(
    attestations: Sequence[dict[str, Any]], trust: TrustSet, digest: str
) -> tuple[list[SignedBaseline], list[str]]:
    """Every trusted baseline statement about ``digest``; and one note per skipped one."""
    from modelward.attest.statement import PredicateType
    from modelward.attest.verify import verify_attestation

    found: list[SignedBaseline] = []
    skipped: list[str] = []
    for item in attestations:
        if item.get("predicate_type") != PredicateType.BASELINE:
            continue
        try:
            data = base64.b64decode(str(item["data"]), validate=True)
            stmt: VerifiedStatement = verify_attestation(data, trust, bundle_digest=digest)
            baseline = Baseline.from_predicate(stmt.statement["predicate"])
        except (AttestError, ValueError, KeyError) as exc:
            skipped.append(f"baseline attestation {item.get('id')}: {exc}")
            continue
        if baseline.bundle_digest != digest:
            skipped.append(f"baseline attestation {item.get('id')}: about another bundle")
            continue
        found.append(SignedBaseline(baseline, tuple(s.name for s in stmt.signers)))
    return found, skipped
