"""Fleet reports: what a serving worker tells the registry about the bundle it serves
(docs/loader.md#following-a-rollout, docs/rollouts.md).

Every ``--report-interval`` seconds the worker:

1. scrapes the engine's Prometheus text at ``/metrics`` (vLLM's metric names; parsed with
   ``prometheus_client``'s parser) and keeps the largest ``vllm:num_requests_running`` seen
   between reports (``sample``, called about once a second);
2. diffs the counters and histogram buckets against the previous scrape of the same engine
   (a new engine starts from zero; a counter that went down is an engine restart: its value
   is the whole interval's): requests and errors, admission rejections (``retries``), and
   the TTFT, inter-token latency and queue time histograms, whose quantiles are read from
   the diffed buckets (``histogram_quantile``: linear inside the bucket, as Prometheus's
   ``histogram_quantile`` does);
3. builds the predicate (``attest.rollout.make_report_predicate``), signs it with the worker
   key (``loader.statements.sign_predicate``: a DSSE envelope of an in-toto statement about
   the digest served) and sends it (``RegistryClient.send_report``). ``seq`` is taken from a
   file per worker key in the cache, written *before* the send, and starts no lower than
   the centisecond clock: a restart (or a lost file) never reuses one. A failed send is
   logged and the figures go with the next report's, under a new seq; serving never waits
   on the registry.

``Reporter`` raises ``ReportSetupError`` at construction (a cache directory it cannot
write); ``report`` raises only what building the predicate (``ReportInvalid``) or writing the
seq file (``OSError``) may, which the follow loop logs without stopping.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from modelward.loader.errors import InputError
from modelward.loader.statements import WorkerKey, sign_predicate

__all__ = [
    "MAX_METRICS_BYTES",
    "VLLM",
    "Figures",
    "ReportSender",
    "ReportSetupError",
    "Reporter",
    "Scrape",
    "SeqFile",
    "Serving",
    "capacity_from_args",
    "diff_scrapes",
    "histogram_quantile",
    "parse_metrics",
]

log = logging.getLogger("modelward.loader")

MAX_METRICS_BYTES = 4 << 20  # a /metrics page larger than this is refused as a scrape


class VLLM:
    """The vLLM metric names a report is built from (vLLM's v1 engine)."""

    SUCCESS = "vllm:request_success"  # counter, label finished_reason
    CORRUPTED = "vllm:corrupted_requests"  # counter
    ADMISSION_REJECTIONS = "vllm:admission_rejections"  # counter, label reason
    RUNNING = "vllm:num_requests_running"  # gauge
    TTFT = "vllm:time_to_first_token_seconds"  # histogram
    ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    QUEUE = "vllm:request_queue_time_seconds"  # histogram
    ERROR_REASONS = frozenset({"error"})  # finished_reason values counted as errors


class ReportSetupError(InputError):
    """The reporter cannot keep its sequence numbers (the cache directory is not writable)."""


Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), sorted


@dataclass(frozen=True)
class Scrape:
    """One ``/metrics`` page, summed over every label but the ones a report splits by."""

    counters: Mapping[str, float] = field(default_factory=dict)  # name or name{label=value}
    histograms: Mapping[str, Buckets] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)


def parse_metrics(text: str) -> Scrape:
    """The Prometheus text ``text`` as a ``Scrape`` (``ValueError`` if it does not parse)."""
    counters: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    gauges: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value = float(sample.value)
            if not math.isfinite(value) and not math.isinf(value):
                continue  # NaN: not a count
            if family.type == "counter" and sample.name.endswith("_total"):
                counters[family.name] = counters.get(family.name, 0.0) + value
                for label in ("finished_reason", "reason"):
                    if label in sample.labels:
                        key = f"{family.name}{{{label}={sample.labels[label]}}}"
                        counters[key] = counters.get(key, 0.0) + value
            elif family.type == "histogram" and sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                per = buckets.setdefault(family.name, {})
                per[bound] = per.get(bound, 0.0) + value
            elif family.type == "gauge":
                gauges[family.name] = gauges.get(family.name, 0.0) + value
    histograms = {name: tuple(sorted(per.items())) for name, per in buckets.items()}
    return Scrape(counters=counters, histograms=histograms, gauges=gauges)


def _delta(now: float, before: float) -> float:
    """A counter's increase; a counter that went down was reset (the engine restarted)."""
    return now - before if now >= before else now


def _diff_buckets(now: Buckets, before: Buckets | None) -> Buckets:
    previous = dict(before or ())
    if any(count < previous.get(bound, 0.0) for bound, count in now):
        previous = {}  # reset
    return tuple((bound, count - previous.get(bound, 0.0)) for bound, count in now)


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """The ``q`` quantile of cumulative ``buckets`` (upper bound, count), as Prometheus's
    ``histogram_quantile``: find the bucket holding the rank ``q * total`` and interpolate
    linearly inside it (from 0 for the first bucket); a rank in the ``+Inf`` bucket is the
    largest finite bound. None when no observation fell in the interval."""
    if not buckets or not 0.0 <= q <= 1.0:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank and count > below:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below)
        if not math.isinf(bound):
            lower = bound
        below = count
    return lower


@dataclass(frozen=True)
class Figures:
    """One interval's figures, in the report's units (milliseconds)."""

    requests: int
    errors: int
    retries: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p95_ms: float | None
    queue_age_p95_ms: float | None


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def _quantile(q: float, name: str | tuple[str, ...], now: Scrape, before: Scrape) -> float | None:
    names = (name,) if isinstance(name, str) else name
    for one in names:
        if one in now.histograms:
            buckets = _diff_buckets(now.histograms[one], before.histograms.get(one))
            return _ms(histogram_quantile(q, buckets))
    return None


def diff_scrapes(now: Scrape, before: Scrape) -> Figures:
    """The figures of the interval between two scrapes of one engine (``before``: an empty
    ``Scrape`` for an engine just started). Requests: every finished request
    (``vllm:request_success`` over all finish reasons, plus ``vllm:corrupted_requests``);
    errors: those that finished with reason ``error``, plus corrupted ones; retries:
    ``vllm:admission_rejections`` (requests turned away at admission, which callers retry)."""

    def counter(key: str) -> float:
        return _delta(now.counters.get(key, 0.0), before.counters.get(key, 0.0))

    finished = counter(VLLM.SUCCESS)
    corrupted = counter(VLLM.CORRUPTED)
    errors = sum(counter(f"{VLLM.SUCCESS}{{finished_reason={r}}}") for r in VLLM.ERROR_REASONS)
    requests = round(finished + corrupted)
    return Figures(
        requests=requests,
        errors=min(requests, round(errors + corrupted)),
        retries=round(counter(VLLM.ADMISSION_REJECTIONS)),
        ttft_p50_ms=_quantile(0.5, VLLM.TTFT, now, before),
        ttft_p95_ms=_quantile(0.95, VLLM.TTFT, now, before),
        itl_p95_ms=_quantile(0.95, VLLM.ITL, now, before),
        queue_age_p95_ms=_quantile(0.95, VLLM.QUEUE, now, before),
    )


class SeqFile:
    """The last report seq of one worker key, kept at ``<cache>/reports/<keyid>.seq``."""

    def __init__(self, cache_root: Path, worker_keyid: str) -> None:
        self.path = cache_root / "reports" / f"{worker_keyid.removeprefix('sha256:')[:32]}.seq"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportSetupError(
                f"{self.path.parent}: cannot keep the report sequence numbers: {exc.strerror}"
            ) from exc

    def next(self, clock: int) -> int:
        """The next seq, written before it is used: above the last kept and ``clock`` (a
        whole count of centiseconds: below the report's bound of 10**12 for ages)."""
        try:
            last = int(self.path.read_text().strip() or "-1")
        except FileNotFoundError:
            last = -1
        except (OSError, ValueError):
            last = -1  # unreadable: the clock still keeps it above anything sent before
        seq = max(last + 1, clock)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(f"{seq}\n")
        temporary.replace(self.path)
        return seq


class ReportSender(Protocol):
    """What the reporter needs from a registry (``RegistryClient``)."""

    def send_report(self, repo: str, alias: str, envelope: bytes) -> dict[str, Any]: ...


@dataclass
class Serving:
    """What the worker serves now, as a report states it (the follow loop updates it)."""

    digest: str
    rollout_id: str | None = None
    stable_warm: bool = False
    capacity: int = 0


class Reporter:
    """Scrapes one engine's ``/metrics`` and sends a signed report per interval."""

    def __init__(
        self,
        client: ReportSender,
        *,
        repo: str,
        alias: str,
        worker_key: WorkerKey,
        cache_root: Path,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from modelward.attest.keys import keyid

        self.client = client
        self.repo = repo
        self.alias = alias
        self.worker_key = worker_key
        self.worker_keyid = keyid(worker_key.key.public_key())
        self.seq = SeqFile(cache_root, self.worker_keyid)
        self.interval = interval
        self.clock = clock
        self.sent = 0
        self.failed = 0
        self._http = httpx.Client(timeout=5.0, trust_env=False)
        self._metrics_url: str | None = None
        self._before = Scrape()
        self._peak = 0
        self._last = clock()  # the end of the last interval reported
        self._attempted = self._last  # the last attempt, sent or not

    def close(self) -> None:
        self._http.close()

    def engine_started(self, metrics_url: str) -> None:
        """A new engine serves from now on: its counters start from zero."""
        self._metrics_url = metrics_url
        self._before = Scrape()
        self._peak = 0

    def _scrape(self) -> Scrape | None:
        if self._metrics_url is None:
            return None
        try:
            with self._http.stream("GET", self._metrics_url) as answer:
                answer.raise_for_status()
                body = _read_bounded(answer.iter_bytes(), MAX_METRICS_BYTES)
            scrape = parse_metrics(body.decode("utf-8", errors="replace"))
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            log.warning("metrics at %s could not be read: %s", self._metrics_url, exc)
            return None
        self._peak = max(self._peak, round(scrape.gauges.get(VLLM.RUNNING, 0.0)))
        return scrape

    def sample(self) -> None:
        """Read the engine's in-flight gauge (the report's ``inflight_peak`` is the largest
        seen since the last report)."""
        self._scrape()

    def due(self) -> bool:
        """Whether an interval passed since the last attempt (a failed one included)."""
        return self.clock() - self._attempted >= self.interval

    def report(self, serving: Serving) -> dict[str, Any] | None:
        """Build, sign and send the interval's report; the registry's answer, or None when
        it was not sent (logged; the figures go with the next one)."""
        from modelward.attest.rollout import make_report_predicate
        from modelward.attest.statement import PredicateType
        from modelward.client.errors import RegistryClientError

        self._attempted = self.clock()
        scrape = self._scrape()
        if scrape is None:
            return None
        now = self.clock()
        figures = diff_scrapes(scrape, self._before)
        predicate = make_report_predicate(
            repository=self.repo,
            alias=self.alias,
            rollout_id=serving.rollout_id,
            digest=serving.digest,
            worker_keyid=self.worker_keyid,
            seq=self.seq.next(int(now * 100)),
            interval_seconds=round(min(3600.0, max(0.001, now - self._last)), 3),
            requests=figures.requests,
            errors=figures.errors,
            retries=figures.retries,
            ttft_p50_ms=figures.ttft_p50_ms,
            ttft_p95_ms=figures.ttft_p95_ms,
            itl_p95_ms=figures.itl_p95_ms,
            queue_age_p95_ms=figures.queue_age_p95_ms,
            capacity=serving.capacity,
            inflight_peak=self._peak,
            stable_warm=serving.stable_warm,
        )
        envelope = sign_predicate(
            self.worker_key, self.repo, serving.digest, PredicateType.ROLLOUT_REPORT, predicate
        )
        try:
            answer = self.client.send_report(self.repo, self.alias, envelope)
        except RegistryClientError as exc:
            self.failed += 1
            log.warning(
                "report seq %s for %s@%s (%s) not sent: %s; its figures go with the next one",
                predicate["seq"],
                self.repo,
                self.alias,
                serving.digest,
                exc,
            )
            return None
        self.sent += 1
        self._before, self._peak, self._last = scrape, 0, now
        return answer


def _read_bounded(chunks: Iterable[bytes], limit: int) -> bytes:
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise ValueError(f"the metrics page is larger than {limit} bytes")
    return bytes(body)


def capacity_from_args(extra_args: Iterable[str], default: int) -> int:
    """The engine's concurrent-request limit: ``--max-num-seqs`` among ``extra_args`` (the
    last one), else ``default``."""
    args = list(extra_args)
    found = default
    for index, arg in enumerate(args):
        value: str | None = None
        if arg.startswith("--max-num-seqs="):
            value = arg.partition("=")[2]
        elif arg == "--max-num-seqs" and index + 1 < len(args):
            value = args[index + 1]
        if value is not None:
            try:
                found = int(value)
            except ValueError:
                continue
    return max(0, found)
