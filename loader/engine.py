"""Start vLLM from a verified local directory only (docs/loader.md#boot).

``boot_engine`` applies the hardened environment to this process (vLLM's worker
processes inherit it), then builds ``vllm.LLM`` from ``hardening.engine_kwargs``: the
pinned, local-only configuration. ``Engine.generate`` returns output token ids only.
``boot --serve`` starts the OpenAI-compatible server instead (loader.server).

On a CPU, ``choose_kv_cache`` decides the KV-cache size (``hardening.cpu_kv_cache``) and
``apply_kv_cache`` sets it as ``VLLM_CPU_KVCACHE_SPACE`` for the engine and the server
child; an engine failure about memory then names the size and the setting (any other
failure, such as a configuration vLLM refuses, gets no advice about the cache).

vLLM's start-up spawns processes: a script that calls ``boot_engine`` needs an
``if __name__ == "__main__":`` guard (the ``modelward`` console script has one).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelward.loader.errors import EngineFailed, EngineUnavailable, EngineVersionMismatch
from modelward.loader.hardening import (
    CPU_KVCACHE_ENV,
    KvCacheChoice,
    ServingConfig,
    cpu_kv_cache,
    engine_kwargs,
    hardened_env,
)

__all__ = [
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
]


@dataclass(frozen=True)
class GenerationRequest:
    """One request: a prompt or prompt token ids, and its sampling parameters."""

    prompt: str | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    #: a structured-output constraint: (kind, canonical JSON of its value), kind one of
    #: ``json`` (a JSON schema), ``regex`` and ``choice`` (loader.side_effects)
    structured: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.prompt_token_ids is None):
            raise ValueError("give exactly one of prompt and prompt_token_ids")


@dataclass(frozen=True)
class Completion:
    """One completion: its token ids and, where the engine gives it, its text."""

    token_ids: tuple[int, ...]
    text: str | None = None


# vLLM logs to stdout unless told otherwise; a modelward command's stdout holds only its own
# output (docs/cli.md#output), with or without --json.
VLLM_LOG_STREAM_ENV = "VLLM_LOGGING_STREAM"
VLLM_LOG_STREAM = "ext://sys.stderr"


def route_engine_logs_to_stderr() -> None:
    """Point vLLM's log stream at stderr: in this process (read when vLLM configures its
    logging, at engine start), in its worker processes and in a ``--serve`` child, which
    inherit the environment."""
    os.environ[VLLM_LOG_STREAM_ENV] = VLLM_LOG_STREAM


def require_vllm() -> Any:
    """Import and return the ``vllm`` module, or raise ``EngineUnavailable`` naming the extra.
    vLLM's logs go to stderr from here on (``route_engine_logs_to_stderr``)."""
    route_engine_logs_to_stderr()
    try:
        import vllm
    except ImportError as exc:
        raise EngineUnavailable(str(exc)) from None
    return vllm


def running_vllm_version() -> str:
    """The installed vLLM version (``EngineUnavailable`` without vLLM)."""
    return str(require_vllm().__version__)


def check_engine_version(pinned: str, *, enforce: bool) -> str | None:
    """Compare the running vLLM with the bundle's pinned version.

    Returns None when they match, a warning text when they differ and ``enforce`` is
    False; raises ``EngineVersionMismatch`` when they differ and ``enforce`` is True.
    """
    running = running_vllm_version()
    if running == pinned:
        return None
    if enforce:
        raise EngineVersionMismatch("vllm", pinned, running)
    return f"warning: bundle pins vllm {pinned} but this worker runs vllm {running}"


def available_memory(cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes of memory available now: ``MemAvailable`` in /proc/meminfo (else the free
    physical pages), capped by this process's cgroup limit less its usage (``cgroup``: the
    cgroup v2 mount, or v1's ``memory`` controller below it), which a container's memory
    limit sets and /proc/meminfo does not show; None when nothing can be read."""
    host = _meminfo_available()
    limited = _cgroup_available(cgroup)
    if host is None or limited is None:
        return host if limited is None else limited
    return min(host, limited)


def _meminfo_available() -> int | None:
    try:
        with Path("/proc/meminfo").open(encoding="ascii") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name == "MemAvailable":
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def _cgroup_available(cgroup: Path) -> int | None:
    """The cgroup's memory limit less its usage, or None without a limit (v2 ``max``; v1's
    "unlimited", a number past any machine) or when the files cannot be read."""
    for limit_file, usage_file in (
        ("memory.max", "memory.current"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"),
    ):
        try:
            limit_text = (cgroup / limit_file).read_text(encoding="ascii").strip()
            usage = int((cgroup / usage_file).read_text(encoding="ascii").strip())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if limit_text == "max":
            return None
        try:
            limit = int(limit_text)
        except ValueError:
            return None
        if limit >= 1 << 60:  # v1 spells "no limit" as a huge page-rounded number
            return None
        return max(0, limit - usage)
    return None


def _on_cpu() -> bool:
    """Whether vLLM runs on the CPU platform here (imports vLLM)."""
    require_vllm()
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def choose_kv_cache(option: int | None) -> KvCacheChoice | None:
    """The CPU KV-cache size for this process's engine, or None when vLLM is not on a CPU.

    ``option`` is ``--cpu-kvcache-space``; see ``hardening.cpu_kv_cache`` for the order.
    Raises ``InputError`` for a malformed value, ``EngineUnavailable`` without vLLM.
    """
    if not _on_cpu():
        return None
    return cpu_kv_cache(os.environ, option=option, available_bytes=available_memory())


def apply_kv_cache(choice: KvCacheChoice | None) -> None:
    """Set ``VLLM_CPU_KVCACHE_SPACE`` to ``choice`` (in-process engine and server child)."""
    if choice is not None:
        os.environ[CPU_KVCACHE_ENV] = str(choice.gib)


def apply_hardened_env() -> None:
    """Apply ``hardening.hardened_env`` to this process's environment."""
    target = hardened_env(os.environ)
    for name in list(os.environ):
        if name not in target:
            del os.environ[name]
    os.environ.update(target)


class Engine:
    """A booted in-process ``vllm.LLM`` with the pinned configuration."""

    def __init__(self, llm: Any, config: ServingConfig) -> None:
        self.llm = llm
        self.config = config

    def generate(self, requests: Sequence[GenerationRequest]) -> list[tuple[int, ...]]:
        """Generate for ``requests`` as one batch; return each request's output token ids."""
        return [c.token_ids for c in self.complete(requests)]

    def complete(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Generate for ``requests`` as one batch; return each request's token ids and text."""
        if not requests:
            return []
        vllm = require_vllm()
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        prompts: list[Any] = []
        params: list[Any] = []
        for req in requests:
            if req.prompt_token_ids is not None:
                prompts.append(TokensPrompt(prompt_token_ids=list(req.prompt_token_ids)))
            else:
                prompts.append(req.prompt)
            structured = None
            if req.structured is not None:
                kind, value = req.structured
                structured = StructuredOutputsParams(**{kind: json.loads(value)})
            params.append(
                vllm.SamplingParams(
                    temperature=req.temperature,
                    top_p=req.top_p,
                    top_k=req.top_k,
                    max_tokens=req.max_tokens,
                    seed=req.seed,
                    structured_outputs=structured,
                )
            )
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except Exception as exc:  # vLLM raises anything; report it as ours
            raise EngineFailed(f"generation failed: {exc}") from exc
        return [
            Completion(tuple(int(t) for t in out.outputs[0].token_ids), str(out.outputs[0].text))
            for out in outputs
        ]

    def shutdown(self) -> None:
        """Stop the engine's worker processes (best effort) and drop the engine."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        stop = getattr(core, "shutdown", None)
        if callable(stop):
            stop()
        self.llm = None
        gc.collect()


# The in-process engine (baselines, replay) runs in this process: vLLM's default starts an
# engine-core process and a worker process, each importing vLLM and torch again, which on a
# CPU more than doubles the boot (docs/performance.md#boot). The fingerprint records it (it
# reads the environment after the boot); a value the operator set is kept.
IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def _apply_in_process_env() -> None:
    """Set ``IN_PROCESS_ENV`` where the environment does not name it already. Only
    ``boot_engine`` calls it: a ``--serve`` child (vLLM's OpenAI server) keeps vLLM's
    process layout."""
    for name, value in IN_PROCESS_ENV.items():
        os.environ.setdefault(name, value)


def boot_engine(
    config: ServingConfig,
    extra: Mapping[str, Any] | None = None,
    *,
    kv_cache: KvCacheChoice | None = None,
) -> Engine:
    """Boot ``vllm.LLM`` from ``config.model_dir`` under the hardened environment.

    ``extra`` are keywords from ``hardening.check_extra_args``; ``kv_cache`` the CPU
    KV-cache size (``choose_kv_cache``), named in the failure message. Raises
    ``EngineUnavailable`` without vLLM and ``EngineFailed`` when vLLM refuses to start.
    """
    apply_kv_cache(kv_cache)
    apply_hardened_env()
    _apply_in_process_env()
    vllm = require_vllm()
    kwargs = engine_kwargs(config, extra)
    try:
        llm = vllm.LLM(**kwargs)
    except Exception as exc:  # vLLM raises anything; report it as ours
        hint = kv_cache.hint_for(exc) if kv_cache is not None else ""
        raise EngineFailed(f"vLLM failed to start from {config.model_dir}: {exc}{hint}") from exc
    return Engine(llm, config)
