"""Running a replay on booted engines (docs/loader.md#replay).

``replay_bundle`` boots the candidate with the checked extra engine arguments and replays
run by run into a ``ReplayTally``, reporting progress after each run. With a reference
bundle (``--against``) it chooses how the two engines run:

- ``interleaved``: both engines are booted side by side and every run goes to the
  reference, then to the candidate; the candidate's run N is compared with the
  reference's run N, and the reference's own drift from its first run is counted too.
  Chosen on a CPU when the memory available now holds two engines
  (``second_engine_fits``).
- ``sequential``: the reference boots alone, runs once, and shuts down; then the candidate
  runs every time against that one run. Chosen otherwise (on a GPU vLLM claims most of the
  device memory for one engine), or when asked for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelward.loader.engine import Completion, Engine, available_memory, boot_engine
from modelward.loader.fingerprint import Fingerprint, collect_fingerprint
from modelward.loader.hardening import KvCacheChoice, ServingConfig
from modelward.loader.replay import ReplayReport, ReplayRequest, ReplayTally, replay_once

__all__ = ["ENGINE_HEADROOM_BYTES", "ReplayRun", "replay_bundle", "second_engine_fits"]

GIB = 1024**3
#: what one more in-process engine needs besides its KV cache and weights: its engine-core
#: and worker processes, torch and the runtime (measured about 1.3 GiB for the tiny model)
ENGINE_HEADROOM_BYTES = 2 * GIB

Progress = Callable[[ReplayTally], None]


@dataclass(frozen=True)
class ReplayRun:
    """What a replay found: the report, the candidate's fingerprint, how the engines ran."""

    report: ReplayReport
    fingerprint: Fingerprint
    mode: str  # "single", "interleaved" or "sequential"
    mode_reason: str | None
    reference_report: ReplayReport | None  # interleaved: the reference against its run 1
    first_run: list[Completion]


def _weights_bytes(model_dir: Path) -> int:
    total = 0
    for path in model_dir.rglob("*.safetensors"):
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total


def second_engine_fits(
    available: int | None, kv_cache: KvCacheChoice | None, model_dirs: Sequence[Path]
) -> tuple[bool, str]:
    """Whether two engines (one per ``model_dirs``) fit in ``available`` bytes, and why."""
    if kv_cache is None:
        return False, "not on a CPU: one engine claims the accelerator's memory"
    if available is None:
        return False, "the memory available cannot be read"
    need = sum(kv_cache.gib * GIB + _weights_bytes(d) + ENGINE_HEADROOM_BYTES for d in model_dirs)
    if available < need:
        return False, (
            f"two engines need about {need / GIB:.1f} GiB and "
            f"{available / GIB:.1f} GiB is available"
        )
    return True, f"{available / GIB:.1f} GiB available holds both engines"


def _as_map(requests: Sequence[ReplayRequest], run: Sequence[Completion]) -> dict[str, Completion]:
    return {req.id: out for req, out in zip(requests, run, strict=True)}


def replay_bundle(
    candidate: ServingConfig,
    requests: Sequence[ReplayRequest],
    *,
    runs: int,
    concurrency: int,
    extra: Mapping[str, Any],
    kv_cache: KvCacheChoice | None,
    reference: ServingConfig | None = None,
    reference_name: str = "",
    expected: Mapping[str, Completion] | None = None,
    sequential: bool = False,
    progress: Progress | None = None,
) -> ReplayRun:
    """Replay ``requests`` ``runs`` times through ``candidate`` (module docstring).

    ``expected`` (an outputs file) and ``reference`` (another bundle) are exclusive; with
    neither, the candidate's first run is the reference.
    """
    if runs < 1:
        raise ValueError("runs must be >= 1")
    mode, reason = "single", None
    if reference is not None and sequential:
        mode, reason = "sequential", "asked for (--sequential)"
    elif reference is not None:
        fits, reason = second_engine_fits(
            available_memory(), kv_cache, [candidate.model_dir, reference.model_dir]
        )
        mode = "interleaved" if fits else "sequential"
    if mode == "sequential" and reference is not None:
        engine = boot_engine(reference, extra, kv_cache=kv_cache)
        try:
            expected = _as_map(requests, replay_once(engine, requests, concurrency=concurrency))
        finally:
            engine.shutdown()
    engine = boot_engine(candidate, extra, kv_cache=kv_cache)
    other: Engine | None = None
    try:
        fingerprint = collect_fingerprint(candidate, os.environ, llm=engine.llm)
        if mode == "interleaved" and reference is not None:
            other = boot_engine(reference, extra, kv_cache=kv_cache)
        tally: ReplayTally | None = None
        drift: ReplayTally | None = None
        first_run: list[Completion] = []
        for _ in range(runs):
            theirs = None
            if other is not None:
                theirs = replay_once(other, requests, concurrency=concurrency)
                if drift is None:
                    drift = ReplayTally(requests, None, "the reference's first run")
                drift.add_run(theirs)
            ours = replay_once(engine, requests, concurrency=concurrency)
            if tally is None:
                start = _as_map(requests, theirs) if theirs is not None else expected
                tally = ReplayTally(requests, start, reference_name)
                first_run = ours
            tally.add_run(ours, _as_map(requests, theirs) if theirs is not None else None)
            if progress is not None:
                progress(tally)
    finally:
        if other is not None:
            other.shutdown()
        engine.shutdown()
    if tally is None:  # unreachable: runs >= 1
        raise ValueError("runs must be >= 1")
    return ReplayRun(
        report=tally.report(),
        fingerprint=fingerprint,
        mode=mode,
        mode_reason=reason,
        reference_report=drift.report() if drift is not None else None,
        first_run=first_run,
    )
