"""Start vLLM from a verified local directory only (docs/loader.md#boot).

``boot_engine`` applies the hardened environment to this process (vLLM's worker
processes inherit it), then builds ``vllm.LLM`` from ``hardening.engine_kwargs``: the
pinned, local-only configuration. ``Engine.generate`` returns output token ids only.
``boot --serve`` starts the OpenAI-compatible server instead (loader.server).

vLLM's start-up spawns processes: a script that calls ``boot_engine`` needs an
``if __name__ == "__main__":`` guard (the ``modelward`` console script has one).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modelward.loader.errors import EngineFailed, EngineUnavailable, EngineVersionMismatch
from modelward.loader.hardening import ServingConfig, engine_kwargs, hardened_env

__all__ = [
    "Engine",
    "GenerationRequest",
    "boot_engine",
    "check_engine_version",
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

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.prompt_token_ids is None):
            raise ValueError("give exactly one of prompt and prompt_token_ids")


def require_vllm() -> Any:
    """Import and return the ``vllm`` module, or raise ``EngineUnavailable`` naming the extra."""
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
        if not requests:
            return []
        vllm = require_vllm()
        from vllm.inputs import TokensPrompt

        prompts: list[Any] = []
        params: list[Any] = []
        for req in requests:
            if req.prompt_token_ids is not None:
                prompts.append(TokensPrompt(prompt_token_ids=list(req.prompt_token_ids)))
            else:
                prompts.append(req.prompt)
            params.append(vllm.SamplingParams(
                temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
                max_tokens=req.max_tokens, seed=req.seed,
            ))
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except Exception as exc:  # vLLM raises anything; report it as ours
            raise EngineFailed(f"generation failed: {exc}") from exc
        return [tuple(int(t) for t in out.outputs[0].token_ids) for out in outputs]

    def shutdown(self) -> None:
        """Stop the engine's worker processes (best effort) and drop the engine."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        stop = getattr(core, "shutdown", None)
        if callable(stop):
            stop()
        self.llm = None
        gc.collect()


def boot_engine(config: ServingConfig, extra: Mapping[str, Any] | None = None) -> Engine:
    """Boot ``vllm.LLM`` from ``config.model_dir`` under the hardened environment.

    ``extra`` are keywords from ``hardening.check_extra_args``. Raises
    ``EngineUnavailable`` without vLLM and ``EngineFailed`` when vLLM refuses to start.
    """
    apply_hardened_env()
    vllm = require_vllm()
    kwargs = engine_kwargs(config, extra)
    try:
        llm = vllm.LLM(**kwargs)
    except Exception as exc:  # vLLM raises anything; report it as ours
        raise EngineFailed(f"vLLM failed to start from {config.model_dir}: {exc}") from exc
    return Engine(llm, config)
