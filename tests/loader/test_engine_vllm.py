"""Real vLLM (CPU) through loader/: boot, baseline, replay, divergence detection.

Two boots in all (the tiny model, and a copy with perturbed weights); a baseline
matched on a second boot is shown end to end in test_boot_vllm.py, each shared by several tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from modelward.loader.baseline import Baseline, compare_baselines
from modelward.loader.probes import BUILTIN_PROBES
from modelward.loader.replay import load_requests, summarize

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _outputs(run: dict[str, Any], name: str) -> list[list[tuple[int, ...]]]:
    return [[tuple(ids) for ids in r] for r in run["replays"][name]["outputs"]]


def test_boot_generates_under_hardened_env(f32_run: dict[str, Any]) -> None:
    env = f32_run["env"]
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["VLLM_PLUGINS"] == ""
    assert env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "0"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "0"
    assert env["HF_TOKEN"] is None
    baseline = Baseline.from_predicate(f32_run["baseline"])
    assert len(baseline.probes) == len(BUILTIN_PROBES)
    assert all(len(p.token_ids) > 0 for p in baseline.probes)


def test_fingerprint_records_runtime(f32_run: dict[str, Any]) -> None:
    data = f32_run["fingerprint"]["data"]
    assert data["engine"]["version"] == "0.32.0"
    assert data["dtype"] == "float32"
    assert data["device"]["type"] == "cpu"
    assert data["tensor_parallel_size"] == 1
    assert "VLLM_BATCH_INVARIANT" in data["env"]
    # the in-process engine runs in the booting process (no engine-core or worker process
    # importing vLLM again), and the fingerprint says so
    assert f32_run["engine_core"] == "InprocClient"
    assert data["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert f32_run["fingerprint"]["id"].startswith("sha256:")


def test_serial_and_batched_probes_agree_on_cpu(f32_run: dict[str, Any]) -> None:
    baseline = Baseline.from_predicate(f32_run["baseline"])
    assert baseline.batch_invariant, baseline.batch_divergences


def test_perturbed_weight_is_a_divergence_naming_probe_and_index(
    f32_run: dict[str, Any], perturbed_run: dict[str, Any]
) -> None:
    f32 = Baseline.from_predicate(f32_run["baseline"])
    perturbed = Baseline.from_predicate(perturbed_run["baseline"])
    comparison = compare_baselines(f32, perturbed)
    assert not comparison.matched
    assert comparison.divergences
    for div in comparison.divergences:
        old = next(p for p in f32.probes if p.probe_id == div.probe_id).token_ids
        new = next(p for p in perturbed.probes if p.probe_id == div.probe_id).token_ids
        assert old[: div.index] == new[: div.index]
        assert old[div.index] != new[div.index]
        assert div.probe_id in comparison.describe()


def test_replay_100_requests_10_runs_all_match(
    f32_run: dict[str, Any], replay_requests: Path
) -> None:
    requests = load_requests(replay_requests)
    outputs = _outputs(f32_run, "main")
    assert len(outputs) == 10
    report = summarize(requests, outputs, None, reference_name="")
    assert report.executions == 1000
    assert report.consecutive_matches == 1000
    assert report.divergence_count == 0
    assert set(report.unique_completions.values()) == {1}


def test_replay_counts_unique_completions_of_sampled_requests(
    f32_run: dict[str, Any], sampled_requests: Path
) -> None:
    requests = load_requests(sampled_requests)
    outputs = _outputs(f32_run, "sampled")
    report = summarize(requests, outputs, None, reference_name="")
    for index, req in enumerate(requests):
        distinct = {run[index] for run in outputs}
        assert report.unique_completions[req.id] == len(distinct)
    # seeded greedy requests are stable; unseeded temperature-1 ones vary
    assert report.unique_completions["r000"] == 1
    assert max(report.unique_completions[f"s{i}"] for i in range(4)) > 1
    assert report.divergence_count > 0
    first_bad = min(
        (d.run, [r.id for r in requests].index(d.request_id)) for d in report.divergences
    )
    assert report.consecutive_matches == (first_bad[0] - 1) * len(requests) + first_bad[1]


def test_replay_catches_the_perturbed_config(
    f32_run: dict[str, Any], perturbed_run: dict[str, Any], replay_requests: Path
) -> None:
    requests = load_requests(replay_requests)
    reference = dict(zip((r.id for r in requests), _outputs(f32_run, "main")[0], strict=True))
    report = summarize(
        requests, _outputs(perturbed_run, "main"), reference, reference_name="original weights"
    )
    assert report.divergence_count > 0
    assert report.consecutive_matches < report.executions
    div = report.divergences[0]
    position = [r.id for r in requests].index(div.request_id)
    got = _outputs(perturbed_run, "main")[div.run - 1][position]
    want = reference[div.request_id]
    assert want[: div.index] == got[: div.index]
