"""Boot vLLM once through loader/ and run several checks; write one JSON result.

Run as ``python -m tests.loader._engine_run JOB.json OUT.json`` (a subprocess: vLLM's
start-up spawns processes, hence the ``__main__`` guard). JOB holds ``model_dir``,
``dtype`` and a list of ``steps``: ``{"baseline": {...}}``, ``{"replay": {...}}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(job_path: Path, out_path: Path) -> None:
    from modelward.loader.baseline import record_baseline
    from modelward.loader.engine import boot_engine
    from modelward.loader.fingerprint import collect_fingerprint
    from modelward.loader.hardening import ServingConfig, check_extra_args
    from modelward.loader.probes import resolve_probes
    from modelward.loader.replay import load_requests, run_replay

    job = json.loads(job_path.read_text())
    config = ServingConfig(
        model_dir=Path(job["model_dir"]), dtype=job["dtype"], max_model_len=256, seed=0
    )
    engine = boot_engine(config, check_extra_args(["--enforce-eager"], serve=False))
    replays: dict[str, object] = {}
    result: dict[str, object] = {
        "replays": replays,
        "env": {
            k: os.environ.get(k)
            for k in (
                "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE",
                "VLLM_PLUGINS",
                "VLLM_ALLOW_INSECURE_SERIALIZATION",
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
                "HF_TOKEN",
            )
        },
    }
    fingerprint = collect_fingerprint(config, os.environ, llm=engine.llm)
    result["fingerprint"] = {"id": fingerprint.id, "data": fingerprint.data}
    # vLLM's client of its engine core: InprocClient when the core runs in this process
    result["engine_core"] = type(engine.llm.llm_engine.engine_core).__name__
    for step in job["steps"]:
        if "baseline" in step:
            baseline = record_baseline(
                engine,
                resolve_probes(),
                bundle_digest=job["digest"],
                fingerprint=fingerprint,
                max_tokens=16,
                seed=0,
            )
            result["baseline"] = baseline.to_predicate()
        if "replay" in step:
            spec = step["replay"]
            requests = load_requests(Path(spec["requests"]))
            outputs = run_replay(
                engine, requests, runs=spec["runs"], concurrency=spec["concurrency"]
            )
            replays[spec["name"]] = {
                "ids": [r.id for r in requests],
                "outputs": [[list(ids) for ids in run] for run in outputs],
            }
    engine.shutdown()
    out_path.write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
