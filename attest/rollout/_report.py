"""A fleet report: what a serving worker saw in one interval, signed with its worker key
(docs/rollouts.md#fleet-reports). Pure: bytes in, a parsed report or ReportInvalid out.

A report is a DSSE envelope of an in-toto Statement whose subject is the bundle digest the
worker serves and whose predicate (type ``REPORT_PREDICATE``) is the document below; all
keys are required and nothing else is allowed::

    {"format": "modelward.rollout-report/v1", "repository", "alias",
     "rollout_id": "<32 hex>" | null, "digest": "sha256:<64 hex>", "worker_keyid",
     "seq", "interval_seconds", "requests", "errors", "retries",
     "ttft_ms": {"p50", "p95"}, "itl_p95_ms", "queue_age_p95_ms",
     "task_checks": {"passed", "failed"}, "device_faults", "capacity", "inflight_peak",
     "stable_warm"}

Reports are not attestations: they are never attached to a bundle.

- ``parse_report_predicate``: the predicate document, checked field by field;
- ``open_report``: the report in an envelope, *before* its signature is checked (to find
  the key that must have signed it: ``worker_keyid``); nothing it returns is trusted;
- ``verify_report``: the same envelope verified with that one key (verify-or-raise).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass
from typing import Any, Final

from modelward.attest.dsse import PAYLOAD_TYPE, EnvelopeLimits, verify_envelope
from modelward.attest.errors import UntrustedSigner, VerificationError
from modelward.attest.keys import VerifyingKey, trusted_key
from modelward.attest.rollout._errors import RolloutError
from modelward.attest.statement import PredicateType, parse_statement, strict_json_loads
from modelward.attest.trust import TrustSet

__all__ = [
    "MAX_REPORT_BYTES",
    "REPORT_FORMAT",
    "REPORT_PREDICATE",
    "FleetReport",
    "OpenedReport",
    "ReportInvalid",
    "ReportUntrusted",
    "make_report_predicate",
    "open_report",
    "parse_report_predicate",
    "verify_report",
]

REPORT_PREDICATE: Final = PredicateType.ROLLOUT_REPORT
REPORT_FORMAT: Final = "modelward.rollout-report/v1"
MAX_REPORT_BYTES: Final = 64 * 1024
MAX_INTERVAL_SECONDS: Final = 3600
MAX_COUNT: Final = 10**12
MAX_SEQ: Final = 2**63 - 1  # a BigInteger: a worker may use a clock reading as its seq
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_ID_RE = re.compile(r"[0-9a-f]{32}")
_KEYID_RE = re.compile(r"[0-9a-f]{64}")
_NAME_MAX = 200
_FIELDS: Final = frozenset(
    {
        "format", "repository", "alias", "rollout_id", "digest", "worker_keyid", "seq",
        "interval_seconds", "requests", "errors", "retries", "ttft_ms", "itl_p95_ms",
        "queue_age_p95_ms", "task_checks", "device_faults", "capacity", "inflight_peak",
        "stable_warm",
    }
)  # fmt: skip
_LIMITS: Final = EnvelopeLimits(max_bytes=MAX_REPORT_BYTES, max_signatures=4)


class ReportInvalid(RolloutError):  # noqa: N818 - the name is the finding
    """A fleet report is malformed; ``field`` names what is at fault (``envelope``,
    ``statement``, ``predicateType``, ``ttft_ms.p95`` ...)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"fleet report: {field}: {why}")
        self.field, self.why = field, why


class ReportUntrusted(RolloutError):  # noqa: N818 - the name is the finding
    """A fleet report's envelope does not verify with the worker key it names: ``keyid``
    the key it names, ``why`` what the DSSE verifier found."""

    def __init__(self, keyid: str, why: str) -> None:
        super().__init__(f"fleet report not signed by worker key {keyid}: {why}")
        self.keyid, self.why = keyid, why


@dataclass(frozen=True)
class FleetReport:
    """A parsed report predicate (numbers as given: finite, non-negative)."""

    repository: str
    alias: str
    rollout_id: str | None
    digest: str
    worker_keyid: str
    seq: int
    interval_seconds: float
    requests: int
    errors: int
    retries: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p95_ms: float | None
    queue_age_p95_ms: float | None
    task_checks_passed: int
    task_checks_failed: int
    device_faults: int
    capacity: int
    inflight_peak: int
    stable_warm: bool


@dataclass(frozen=True)
class OpenedReport:
    """A report read out of its envelope, its signature NOT yet checked: ``report`` says
    which key must have signed it; ``subjects`` the statement's sha256 subject digests;
    ``payload`` the statement bytes as received."""

    report: FleetReport
    subjects: tuple[str, ...]
    payload: bytes


def make_report_predicate(
    *,
    repository: str,
    alias: str,
    rollout_id: str | None,
    digest: str,
    worker_keyid: str,
    seq: int,
    interval_seconds: float,
    requests: int = 0,
    errors: int = 0,
    retries: int = 0,
    ttft_p50_ms: float | None = None,
    ttft_p95_ms: float | None = None,
    itl_p95_ms: float | None = None,
    queue_age_p95_ms: float | None = None,
    task_checks_passed: int = 0,
    task_checks_failed: int = 0,
    device_faults: int = 0,
    capacity: int = 0,
    inflight_peak: int = 0,
    stable_warm: bool = False,
) -> dict[str, Any]:
    """The predicate document of a report, checked as the registry will check it
    (ReportInvalid naming the field)."""
    doc: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "repository": repository,
        "alias": alias,
        "rollout_id": rollout_id,
        "digest": digest,
        "worker_keyid": worker_keyid,
        "seq": seq,
        "interval_seconds": interval_seconds,
        "requests": requests,
        "errors": errors,
        "retries": retries,
        "ttft_ms": {"p50": ttft_p50_ms, "p95": ttft_p95_ms},
        "itl_p95_ms": itl_p95_ms,
        "queue_age_p95_ms": queue_age_p95_ms,
        "task_checks": {"passed": task_checks_passed, "failed": task_checks_failed},
        "device_faults": device_faults,
        "capacity": capacity,
        "inflight_peak": inflight_peak,
        "stable_warm": stable_warm,
    }
    parse_report_predicate(doc)
    return doc


def _text(doc: dict[str, Any], key: str, pattern: re.Pattern[str] | None = None) -> str:
    value = doc[key]
    if not isinstance(value, str) or not value or len(value) > _NAME_MAX:
        raise ReportInvalid(key, f"{value!r} is not a non-empty string of at most {_NAME_MAX}")
    if pattern is not None and not pattern.fullmatch(value):
        raise ReportInvalid(key, f"{value!r} is not of the form {pattern.pattern}")
    return value


def _count(value: object, field: str, most: int = MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ReportInvalid(field, f"{value!r} is not a whole number from 0 to {most}")
    return value


def _number(value: object, field: str, *, nullable: bool) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        want = "a number or null" if nullable else "a number"
        raise ReportInvalid(field, f"{value!r} is not {want}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ReportInvalid(field, f"{value!r} is not a finite, non-negative number")
    return number


def _pair(doc: dict[str, Any], key: str, names: tuple[str, str]) -> dict[str, Any]:
    value = doc[key]
    if not isinstance(value, dict) or set(value) != set(names):
        raise ReportInvalid(key, f"must be an object with exactly {list(names)}")
    return value


def parse_report_predicate(doc: object) -> FleetReport:
    """The report in the predicate ``doc`` (ReportInvalid naming the field otherwise).

    1. an object of format REPORT_FORMAT with exactly the report's keys;
    2. names and ids: repository, alias, rollout_id (32 hex or null), digest
       (``sha256:<64 hex>``), worker_keyid (64 hex);
    3. counts are whole numbers >= 0, ``errors`` at most ``requests``, ``seq`` >= 0;
       ``interval_seconds`` in (0, 3600]; latencies finite, >= 0, or null;
       ``stable_warm`` a boolean.
    """
    # (1): the document's shape
    if not isinstance(doc, dict):
        raise ReportInvalid("predicate", "is not a JSON object")
    if doc.get("format") != REPORT_FORMAT:
        raise ReportInvalid("format", f"{doc.get('format')!r} is not {REPORT_FORMAT!r}")
    missing, unknown = sorted(_FIELDS - set(doc)), sorted(set(doc) - _FIELDS)
    if missing:
        raise ReportInvalid(missing[0], "is missing (every report field is required)")
    if unknown:
        raise ReportInvalid(unknown[0], "is not a report field")
    # (2): names and ids
    rollout_id = doc["rollout_id"]
    if rollout_id is not None and not (
        isinstance(rollout_id, str) and _ID_RE.fullmatch(rollout_id)
    ):
        raise ReportInvalid("rollout_id", f"{rollout_id!r} is neither 32 hex nor null")
    # (3): the figures
    interval = _number(doc["interval_seconds"], "interval_seconds", nullable=False)
    assert interval is not None  # noqa: S101 - not nullable
    if not 0 < interval <= MAX_INTERVAL_SECONDS:
        raise ReportInvalid("interval_seconds", f"{interval} is not in (0, {MAX_INTERVAL_SECONDS}]")
    requests = _count(doc["requests"], "requests")
    errors = _count(doc["errors"], "errors")
    if errors > requests:
        raise ReportInvalid("errors", f"{errors} errors out of {requests} requests")
    ttft = _pair(doc, "ttft_ms", ("p50", "p95"))
    checks = _pair(doc, "task_checks", ("passed", "failed"))
    if not isinstance(doc["stable_warm"], bool):
        raise ReportInvalid("stable_warm", f"{doc['stable_warm']!r} is not true or false")
    return FleetReport(
        repository=_text(doc, "repository"),
        alias=_text(doc, "alias"),
        rollout_id=rollout_id,
        digest=_text(doc, "digest", _DIGEST_RE),
        worker_keyid=_text(doc, "worker_keyid", _KEYID_RE),
        seq=_count(doc["seq"], "seq", MAX_SEQ),
        interval_seconds=interval,
        requests=requests,
        errors=errors,
        retries=_count(doc["retries"], "retries"),
        ttft_p50_ms=_number(ttft["p50"], "ttft_ms.p50", nullable=True),
        ttft_p95_ms=_number(ttft["p95"], "ttft_ms.p95", nullable=True),
        itl_p95_ms=_number(doc["itl_p95_ms"], "itl_p95_ms", nullable=True),
        queue_age_p95_ms=_number(doc["queue_age_p95_ms"], "queue_age_p95_ms", nullable=True),
        task_checks_passed=_count(checks["passed"], "task_checks.passed"),
        task_checks_failed=_count(checks["failed"], "task_checks.failed"),
        device_faults=_count(doc["device_faults"], "device_faults"),
        capacity=_count(doc["capacity"], "capacity"),
        inflight_peak=_count(doc["inflight_peak"], "inflight_peak"),
        stable_warm=doc["stable_warm"],
    )


def _envelope_payload(envelope: bytes) -> bytes:
    """The statement bytes inside a DSSE envelope, read without checking a signature."""
    if len(envelope) > MAX_REPORT_BYTES:
        raise ReportInvalid("envelope", f"{len(envelope)} bytes, more than {MAX_REPORT_BYTES}")
    try:
        obj = strict_json_loads(envelope, "envelope")
    except VerificationError as exc:
        raise ReportInvalid("envelope", str(exc)) from exc
    if not isinstance(obj, dict) or set(obj) != {"payloadType", "payload", "signatures"}:
        raise ReportInvalid("envelope", "not a DSSE envelope {payloadType, payload, signatures}")
    if obj["payloadType"] != PAYLOAD_TYPE:
        raise ReportInvalid("envelope.payloadType", f"{obj['payloadType']!r} is not {PAYLOAD_TYPE}")
    if not isinstance(obj["signatures"], list) or not obj["signatures"]:
        raise ReportInvalid("envelope.signatures", "must be a non-empty list")
    payload = obj["payload"]
    if not isinstance(payload, str):
        raise ReportInvalid("envelope.payload", "is not a base64 string")
    try:
        return base64.b64decode(payload.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError, binascii.Error) as exc:
        raise ReportInvalid("envelope.payload", f"not base64: {exc}") from exc


def open_report(envelope: bytes) -> OpenedReport:
    """The report in ``envelope``, read before any signature is checked (ReportInvalid).

    1. a DSSE envelope of at most MAX_REPORT_BYTES with an in-toto payload;
    2. a Statement v1 of predicate type REPORT_PREDICATE with one sha256 subject;
    3. its predicate parses (``parse_report_predicate``).

    Nothing returned is trusted: ``verify_report`` decides whether the worker key it names
    signed it.
    """
    # (1): the envelope
    payload = _envelope_payload(envelope)
    # (2): the statement
    try:
        statement, predicate_type, subjects = parse_statement(payload)
    except VerificationError as exc:
        raise ReportInvalid("statement", str(exc)) from exc
    if predicate_type != REPORT_PREDICATE:
        raise ReportInvalid("predicateType", f"{predicate_type!r} is not {REPORT_PREDICATE!r}")
    digests = tuple(f"sha256:{s.digest['sha256']}" for s in subjects if "sha256" in s.digest)
    if len(subjects) != 1 or len(digests) != 1:
        raise ReportInvalid("subject", "a report has exactly one subject, with a sha256 digest")
    # (3): the predicate
    return OpenedReport(parse_report_predicate(statement["predicate"]), digests, payload)


def verify_report(envelope: bytes, opened: OpenedReport, public_key: VerifyingKey) -> FleetReport:
    """``opened.report`` when ``envelope`` carries a valid signature by ``public_key`` over
    the payload ``opened`` was read from; ReportUntrusted otherwise (no signature by the
    key, a signature claiming it that fails, other bytes)."""
    trust = TrustSet(keys=(trusted_key(f"worker {opened.report.worker_keyid}", public_key),))
    try:
        verified = verify_envelope(envelope, trust, _LIMITS)
    except (UntrustedSigner, VerificationError) as exc:
        raise ReportUntrusted(opened.report.worker_keyid, str(exc).splitlines()[0]) from exc
    if verified.payload != opened.payload:  # the same bytes: never a re-serialization
        raise ReportUntrusted(opened.report.worker_keyid, "the signed payload is other bytes")
    return opened.report
