"""in-toto Statement v1: make, parse strictly, and bind to a bundle (docs/attestations.md).

A statement says "``predicate`` of type ``predicateType`` holds for ``subject``"; our
subject is always a bundle, named by its manifest digest. The exact JSON is::

    {"_type": "https://in-toto.io/Statement/v1",
     "subject": [{"name": "<bundle name>", "digest": {"sha256": "<64 hex>"}}],
     "predicateType": "<URI>", "predicate": {...}}

``PredicateType`` is the one place predicate type names live.

Raises:
    VerificationError: statement bytes break the format (parse_statement).
    SubjectMismatch: a verified statement is about another bundle (require_subject).
    ValueError: caller misuse (a malformed bundle digest or empty subject name).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

import rfc8785

from modelward.attest._json import reject_duplicates
from modelward.attest.errors import SubjectMismatch, VerificationError
from modelward.attest.trust import Subject, VerifiedStatement

__all__ = [
    "STATEMENT_TYPE",
    "PredicateType",
    "make_statement",
    "parse_statement",
    "require_subject",
    "strict_json_loads",
]

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"


class PredicateType:
    """Every predicate type modelward signs or reads. Add new ones here only."""

    PROVENANCE: Final = "https://slsa.dev/provenance/v1"
    BASELINE: Final = "https://modelward.dev/determinism-baseline/v1"
    REPLAY: Final = "https://modelward.dev/replay-result/v1"
    APPROVAL: Final = "https://modelward.dev/approval/v1"
    EVALUATION: Final = "https://modelward.dev/evaluation/v1"
    RELEASE_RECORD: Final = "https://modelward.dev/release-record/v1"
    # a serving worker's fleet report (docs/rollouts.md#fleet-reports): sent to the
    # registry, never attached to a bundle, so not in ALL (the attestation types)
    ROLLOUT_REPORT: Final = "https://modelward.dev/rollout-report/v1"

    ALL: Final = (PROVENANCE, BASELINE, REPLAY, APPROVAL, EVALUATION, RELEASE_RECORD)


_STATEMENT_KEYS = frozenset({"_type", "subject", "predicateType", "predicate"})
# in-toto ResourceDescriptor fields a subject may carry.
_SUBJECT_KEYS = frozenset(
    {"name", "uri", "digest", "content", "downloadLocation", "mediaType", "annotations"}
)
# Hex lengths of the digest algorithms we can check; other algorithm names must still be hex.
_DIGEST_HEX_LENGTHS: Mapping[str, tuple[int, ...]] = {
    "sha256": (64,),
    "sha384": (96,),
    "sha512": (128,),
    "sha1": (40,),
    "sha224": (56,),
    "sha512_224": (56,),
    "sha512_256": (64,),
    "sha3_224": (56,),
    "sha3_256": (64,),
    "sha3_384": (96,),
    "sha3_512": (128,),
    "blake2b": (128,),
    "blake2s": (64,),
    "blake3": (64,),
    "gitCommit": (40, 64),
    "gitTree": (40, 64),
    "gitBlob": (40, 64),
}
_HEX = re.compile(r"[0-9a-f]+")
_SHA256_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 overflows to inf
        raise ValueError(f"non-finite number {text} is not JSON")
    return value


def strict_json_loads(data: bytes, what: str) -> Any:
    """Parse UTF-8 JSON without duplicate keys or non-finite numbers (NaN, 1e400).

    Raises VerificationError naming ``what``.
    """
    try:
        text = data.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=reject_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except UnicodeDecodeError:
        raise VerificationError(f"{what} is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise VerificationError(f"{what} is not valid JSON: {exc}") from None


def _bundle_hex(bundle_digest: str) -> str:
    match = _SHA256_DIGEST.fullmatch(bundle_digest)
    if match is None:
        raise ValueError(
            f"bundle digest must be 'sha256:<64 lowercase hex>', got {bundle_digest!r}"
        )
    return match.group(1)


def make_statement(
    subject_name: str, bundle_digest: str, predicate_type: str, predicate: Mapping[str, Any]
) -> bytes:
    """The RFC 8785 canonical bytes of a Statement v1 about one bundle."""
    if not subject_name:
        raise ValueError("a statement subject needs a non-empty name")
    if not predicate_type:
        raise ValueError("a statement needs a predicate type")
    statement: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": {"sha256": _bundle_hex(bundle_digest)}}],
        "predicateType": predicate_type,
        "predicate": dict(predicate),
    }
    return rfc8785.dumps(statement)


def _parse_subject(index: int, raw: Any) -> Subject:
    where = f"statement subject[{index}]"
    if not isinstance(raw, dict):
        raise VerificationError(f"{where} is not an object")
    unknown = sorted(set(raw) - _SUBJECT_KEYS)
    if unknown:
        raise VerificationError(f"{where} has unknown field(s): {', '.join(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str):
        raise VerificationError(f"{where}.name must be a string")
    digest = raw.get("digest")
    if not isinstance(digest, dict) or not digest:
        raise VerificationError(f"{where}.digest must be a non-empty object")
    for algorithm, value in digest.items():
        if not isinstance(value, str) or _HEX.fullmatch(value) is None:
            raise VerificationError(f"{where}.digest.{algorithm} must be lowercase hex")
        lengths = _DIGEST_HEX_LENGTHS.get(algorithm)
        if lengths is not None and len(value) not in lengths:
            raise VerificationError(
                f"{where}.digest.{algorithm} has {len(value)} hex digits, expected "
                f"{' or '.join(str(n) for n in lengths)}"
            )
    return Subject(name=name, digest=dict(digest))


def parse_statement(payload: bytes) -> tuple[dict[str, Any], str, tuple[Subject, ...]]:
    """Parse a Statement v1 strictly: (statement, predicate type, subjects).

    Raises VerificationError naming the first field at fault.
    """
    # (1): the payload is one JSON object with exactly the Statement v1 fields.
    statement = strict_json_loads(payload, "statement")
    if not isinstance(statement, dict):
        raise VerificationError("statement is not a JSON object")
    unknown = sorted(set(statement) - _STATEMENT_KEYS)
    if unknown:
        raise VerificationError(f"statement has unknown field(s): {', '.join(unknown)}")
    # (2): _type is exactly Statement v1 (no older or newer version is guessed at).
    if statement.get("_type") != STATEMENT_TYPE:
        raise VerificationError(
            f"statement _type must be {STATEMENT_TYPE!r}, got {statement.get('_type')!r}"
        )
    # (3): at least one subject, each a well-formed resource descriptor with a digest.
    raw_subjects = statement.get("subject")
    if not isinstance(raw_subjects, list) or not raw_subjects:
        raise VerificationError("statement subject must be a non-empty list")
    subjects = tuple(_parse_subject(i, raw) for i, raw in enumerate(raw_subjects))
    # (4): predicateType is a non-empty string and predicate an object.
    predicate_type = statement.get("predicateType")
    if not isinstance(predicate_type, str) or not predicate_type:
        raise VerificationError("statement predicateType must be a non-empty string")
    if not isinstance(statement.get("predicate"), dict):
        raise VerificationError("statement predicate must be an object")
    return statement, predicate_type, subjects


def require_subject(stmt: VerifiedStatement, bundle_digest: str) -> None:
    """Raise SubjectMismatch unless a subject of ``stmt`` has sha256 == ``bundle_digest``."""
    expected = _bundle_hex(bundle_digest)
    if any(subject.digest.get("sha256") == expected for subject in stmt.subjects):
        return
    raise SubjectMismatch(
        bundle_digest,
        [
            f"{s.name or '(unnamed)'} "
            + ", ".join(f"{alg}:{value}" for alg, value in sorted(s.digest.items()))
            for s in stmt.subjects
        ],
    )
