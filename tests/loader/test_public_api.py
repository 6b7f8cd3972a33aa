"""The loader's public surface, pinned: a change here is a deliberate API change."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "loader.errors": [
        "BaselineDivergence",
        "BundleQuarantined",
        "EngineFailed",
        "EngineUnavailable",
        "EngineVersionMismatch",
        "InputError",
        "LoaderError",
        "RefusedError",
        "UnsafeArgument",
    ],
    "loader.hardening": [
        "CPU_KVCACHE_ENV",
        "HARDENED_ENV",
        "KvCacheChoice",
        "ServingConfig",
        "allowed_extra_args",
        "check_extra_args",
        "cpu_kv_cache",
        "engine_kwargs",
        "hardened_env",
        "serve_argv",
    ],
    "loader.engine": [
        "Completion",
        "Engine",
        "GenerationRequest",
        "apply_kv_cache",
        "available_memory",
        "boot_engine",
        "check_engine_version",
        "choose_kv_cache",
        "require_vllm",
        "running_vllm_version",
    ],
    "loader.server": ["ServedEngine"],
    "loader.follow": [
        "EngineLauncher",
        "FollowOptions",
        "FollowRefused",
        "FollowSource",
        "Follower",
        "KILL_AFTER_DRAIN_SECONDS",
        "RunningEngine",
        "VLLM_DEFAULT_CAPACITY",
        "VllmEngine",
        "VllmLauncher",
        "follow_flags_problem",
        "serve_and_follow",
    ],
    "loader.reporting": [
        "Figures",
        "MAX_METRICS_BYTES",
        "ReportSender",
        "ReportSetupError",
        "Reporter",
        "Scrape",
        "SeqFile",
        "Serving",
        "VLLM",
        "capacity_from_args",
        "diff_scrapes",
        "histogram_quantile",
        "parse_metrics",
    ],
    "loader.baseline": [
        "Baseline",
        "Comparison",
        "Divergence",
        "ProbeResult",
        "aggregate_hash",
        "compare_baselines",
        "first_difference",
        "record_baseline",
        "token_hash",
    ],
    "loader.replay": [
        "Completer",
        "ReplayDivergence",
        "ReplayReport",
        "ReplayRequest",
        "ReplayTally",
        "SideEffectDivergence",
        "load_expected",
        "load_requests",
        "load_requests_file",
        "replay_once",
        "run_replay",
        "summarize",
        "write_capture",
    ],
    "loader.replay_run": [
        "ENGINE_HEADROOM_BYTES",
        "ReplayRun",
        "replay_bundle",
        "second_engine_fits",
    ],
    "loader.side_effects": [
        "STRUCTURED_KINDS",
        "TOOL_CALL_FORMATS",
        "canonical_log",
        "first_difference_path",
        "log_difference",
        "side_effect_log",
    ],
    "loader.pull": ["PulledBundle", "pull_bundle"],
    "loader.fingerprint": [
        "DETERMINISM_ENV",
        "Fingerprint",
        "collect_fingerprint",
        "fingerprint_id",
    ],
    "loader.probes": ["BUILTIN_PROBES", "Probe", "resolve_probes"],
    "loader.source": ["RegistrySource"],
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_exported_names(module: str) -> None:
    mod = importlib.import_module(f"modelward.{module}")
    assert sorted(mod.__all__) == sorted(EXPECTED[module])
    for name in mod.__all__:
        assert hasattr(mod, name)


def test_importing_the_loader_does_not_import_vllm() -> None:
    import subprocess
    import sys

    modules = ["cli.worker", "cli.replay", "loader.worker", "loader.server", "loader.follow"]
    code = "import sys; " + "; ".join(f"import modelward.{m}" for m in modules)
    code += "; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
