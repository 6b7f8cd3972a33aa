"""What a fleet report says (``loader.reporting``): the stand-in engine's real Prometheus
text (vLLM's names) parsed and diffed, quantiles from histogram buckets, sequence numbers
that never repeat, and the ``boot`` flags refused when misused (exit 2, the flag named)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from modelward.loader.reporting import (
    Scrape,
    SeqFile,
    capacity_from_args,
    diff_scrapes,
    histogram_quantile,
    parse_metrics,
)
from modelward.rehearsal.standin_engine import Engine
from modelward.rehearsal.worker import STANDIN
from tests.registry.conftest import MODELWARD

pytestmark = pytest.mark.sqlite_only  # no registry at all
FOLLOW = ("--serve", "--follow", "--worker-key", "k")


def _engine(error_rate: float, latency_ms: float = 40.0) -> Engine:
    return Engine("m", latency_ms=latency_ms, error_rate=error_rate, rps=1.0)


def test_counts_requests_and_errors_between_two_scrapes_of_vllm_metrics() -> None:
    engine = _engine(error_rate=0.5)
    for _ in range(10):
        engine.one()
    before = parse_metrics(engine.metrics().decode())
    outcomes = [engine.one() for _ in range(40)]
    now = parse_metrics(engine.metrics().decode())
    figures = diff_scrapes(now, before)
    assert figures.requests == 40
    assert figures.errors == outcomes.count(False)
    assert 0 < figures.errors < 40
    assert figures.retries == 0


def test_ttft_quantiles_come_from_the_interval_buckets_only() -> None:
    slow = _engine(error_rate=0.0, latency_ms=400.0)
    for _ in range(20):
        slow.one()
    before = parse_metrics(slow.metrics().decode())
    slow.latency = 0.02  # the interval's requests are fast
    for _ in range(20):
        slow.one()
    figures = diff_scrapes(parse_metrics(slow.metrics().decode()), before)
    assert figures.ttft_p95_ms is not None
    assert figures.ttft_p95_ms <= 25.0  # the slow requests before the interval do not count
    assert figures.itl_p95_ms is not None
    assert figures.queue_age_p95_ms is not None


def test_no_request_in_the_interval_means_null_latencies() -> None:
    engine = _engine(error_rate=0.0)
    engine.one()
    scrape = parse_metrics(engine.metrics().decode())
    figures = diff_scrapes(scrape, scrape)
    assert (figures.requests, figures.ttft_p50_ms, figures.ttft_p95_ms) == (0, None, None)


def test_a_restarted_engine_counts_from_zero() -> None:
    old = _engine(error_rate=0.0)
    for _ in range(30):
        old.one()
    before = parse_metrics(old.metrics().decode())
    new = _engine(error_rate=0.0)
    for _ in range(5):
        new.one()
    assert diff_scrapes(parse_metrics(new.metrics().decode()), before).requests == 5
    assert diff_scrapes(parse_metrics(new.metrics().decode()), Scrape()).requests == 5


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    buckets = ((0.1, 10.0), (0.2, 20.0), (float("inf"), 20.0))
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.15)
    assert histogram_quantile(0.5, ((0.1, 0.0), (float("inf"), 0.0))) is None
    # a rank in the +Inf bucket is the largest finite bound
    assert histogram_quantile(0.99, ((0.1, 1.0), (float("inf"), 10.0))) == pytest.approx(0.1)


def test_seq_never_repeats_across_restarts_or_a_lost_file(tmp_path: Path) -> None:
    keyid = "ab" * 32
    seqs = [SeqFile(tmp_path, keyid).next(1000) for _ in range(3)]
    assert seqs == [1000, 1001, 1002]
    assert SeqFile(tmp_path, keyid).next(500) == 1003  # the clock went back: the file wins
    SeqFile(tmp_path, keyid).path.unlink()
    assert SeqFile(tmp_path, keyid).next(5000) == 5000  # the file lost: the clock is ahead


def test_capacity_is_max_num_seqs_when_given() -> None:
    assert capacity_from_args(["--enforce-eager"], 256) == 256
    assert capacity_from_args(["--max-num-seqs", "32"], 256) == 32
    assert capacity_from_args(["--max-num-seqs=8", "--max-num-seqs", "16"], 256) == 16


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--follow"], "--follow needs --serve"),
        (["--serve", "--report-interval", "5"], "--report-interval needs --worker-key"),
        (["--serve", "--poll", "3", "--worker-key", "k"], "--poll needs --follow"),
        (
            ["--serve", "--drain-seconds", "3", "--worker-key", "k"],
            "--drain-seconds needs --follow",
        ),
        (
            ["--serve", "--follow", "--worker-key", "k", "--unsigned-aliases"],
            "--follow needs signed aliases",
        ),
    ],
    ids=["follow-without-serve", "report-without-key", "poll-alone", "drain-alone", "unsigned"],
)
def test_boot_refuses_misused_follow_flags(args: list[str], message: str) -> None:
    result = subprocess.run(
        [MODELWARD, "boot", "acme/m@prod", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_boot_refuses_follow_of_a_digest() -> None:
    result = subprocess.run(
        [
            MODELWARD,
            "boot",
            f"acme/m@sha256:{'a' * 64}",
            *("--serve", "--follow", "--worker-key", "k"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "--follow needs a REPO@ALIAS reference" in result.stderr


def test_a_report_the_registry_does_not_take_is_logged_and_the_next_gets_a_new_seq(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from modelward.attest.keys import generate_private_key, save_private_key
    from modelward.client.api import RegistryClient
    from modelward.loader.reporting import Reporter, Serving
    from modelward.loader.statements import load_worker_key
    from tests.registry.conftest import free_port

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    engine = subprocess.Popen(
        [sys.executable, str(STANDIN), "--bundle-dir", str(bundle)], stdout=subprocess.PIPE
    )
    try:
        assert engine.stdout is not None
        port = int(engine.stdout.readline().split()[1])
        save_private_key(generate_private_key(), tmp_path / "worker.key")
        nowhere = RegistryClient(f"http://127.0.0.1:{free_port()}", "t", timeout=2)
        reporter = Reporter(
            nowhere,
            repo="acme/m",
            alias="prod",
            worker_key=load_worker_key(tmp_path / "worker.key"),
            cache_root=tmp_path / "cache",
            interval=60,
        )
        reporter.engine_started(f"http://127.0.0.1:{port}/metrics")
        serving = Serving(digest=f"sha256:{'a' * 64}", capacity=8)
        with caplog.at_level(logging.WARNING, logger="modelward.loader"):
            assert reporter.report(serving) is None
            first = int(reporter.seq.path.read_text())
            assert not reporter.due()  # the next attempt waits an interval, sent or not
            assert reporter.report(serving) is None
        assert int(reporter.seq.path.read_text()) > first
        assert reporter.failed == 2
        assert reporter.sent == 0
        assert "its figures go with the next one" in caplog.text
        reporter.close()
        nowhere.close()
    finally:
        engine.terminate()
        engine.wait(10)
