"""The pinned, hardened vLLM configuration (docs/loader.md#hardening).

One module owns what the engine may be told. ``ServingConfig`` is built from the
bundle's ``modelward.yaml`` and a local directory; ``engine_kwargs`` turns it into the
``vllm.LLM`` arguments, ``serve_argv`` into the OpenAI server's command line, and
``hardened_env`` into the environment both run under. Extra arguments a worker operator
passes are checked by ``check_extra_args``: an allowlist (fail closed), with a specific
reason for every argument known to weaken the pinning (remote code, other weights or
tokenizer, another load format, revisions, download locations, numerics the bundle pins).
It needs no vLLM: ``boot`` and ``replay`` check their input here before vLLM is imported.

On a CPU, vLLM without ``VLLM_CPU_KVCACHE_SPACE`` sizes its KV cache from the NUMA node's
memory (most of it). ``cpu_kv_cache`` chooses the size instead: ``--cpu-kvcache-space``,
else the variable, else ``min(4 GiB, 25% of available memory)`` (at least 1 GiB).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelward.loader.errors import InputError, UnsafeArgument

__all__ = [
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
]

# Set for the engine and every process it spawns.
HARDENED_ENV: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "VLLM_PLUGINS": "",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "0",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0",
    "VLLM_USE_MODELSCOPE": "False",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "DO_NOT_TRACK": "1",
}
# Removed: credentials the engine never needs, and switches that reach other sources.
REMOVED_ENV: tuple[str, ...] = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_ENDPOINT",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "VLLM_USE_RAY_SPMD_WORKER",
    "MODELWARD_TOKEN",
)

# Refused with a reason: each would weaken what the bundle pins.
_REFUSED: Mapping[str, str] = {
    "--trust-remote-code": "would run code shipped with the model",
    "--model": "the model is the verified bundle directory",
    "--tokenizer": "the tokenizer is the bundle's own",
    "--hf-config-path": "the config is the bundle's own",
    "--revision": "a verified bundle has no revisions",
    "--code-revision": "a verified bundle has no revisions",
    "--tokenizer-revision": "a verified bundle has no revisions",
    "--download-dir": "nothing is downloaded",
    "--load-format": "the load format is pinned to safetensors",
    "--dtype": "dtype is pinned by the bundle",
    "--max-model-len": "max_model_len is pinned by the bundle",
    "--seed": "the seed is pinned by the bundle",
    "--generation-config": "the generation config is pinned by the bundle",
    "--override-generation-config": "the generation config is pinned by the bundle",
    "--hf-overrides": "would change the model config",
    "--tensor-parallel-size": "tensor parallelism is pinned by the bundle",
    "--quantization": "would change the model's numerics",
    "--enable-lora": "would load weights outside the bundle",
    "--lora-modules": "would load weights outside the bundle",
    "--speculative-config": "would load another model",
    "--model-loader-extra-config": "would change how weights load",
    "--allowed-local-media-path": "would open local files",
    "--chat-template": "the chat template is the bundle's own",
    "--config": "a config file could carry any of the refused arguments",
    "--tokenizer-mode": "the tokenizer is the bundle's own",
}
_REFUSED_SWITCHES = frozenset({"--trust-remote-code", "--enable-lora"})

# Allowed: flag -> (takes a value, engine keyword or None when it only means something to
# the server process).
_ALLOWED: Mapping[str, tuple[bool, str | None]] = {
    "--enforce-eager": (False, "enforce_eager"),
    "--max-num-seqs": (True, "max_num_seqs"),
    "--max-num-batched-tokens": (True, "max_num_batched_tokens"),
    "--gpu-memory-utilization": (True, "gpu_memory_utilization"),
    "--block-size": (True, "block_size"),
    "--enable-prefix-caching": (False, "enable_prefix_caching"),
    "--no-enable-prefix-caching": (False, None),
    "--disable-log-stats": (False, "disable_log_stats"),
    "--served-model-name": (True, None),
    "--uvicorn-log-level": (True, None),
    "--api-key": (True, None),
    "--root-path": (True, None),
    "--disable-log-requests": (False, None),
    "--shutdown-timeout": (True, None),  # how long SIGTERM drains (boot --follow sets it)
}
_INT_KWARGS = frozenset({"max_num_seqs", "max_num_batched_tokens", "block_size"})
_FLOAT_KWARGS = frozenset({"gpu_memory_utilization"})


@dataclass(frozen=True)
class ServingConfig:
    """What the engine is started with: a local bundle directory and the pinned serving spec."""

    model_dir: Path
    dtype: str
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    seed: int = 0
    generation_config: str = "auto"

    def __post_init__(self) -> None:
        if self.generation_config not in {"auto", "vllm"}:
            raise ValueError(
                f"generation_config must be 'auto' or 'vllm', not {self.generation_config!r}"
            )
        if self.tensor_parallel_size < 1:
            raise ValueError("tensor_parallel_size must be >= 1")

    @classmethod
    def from_spec(cls, model_dir: Path, spec: Any) -> ServingConfig:
        """Build from an ``attest.spec.BundleSpec`` (its ``serving`` section)."""
        serving = spec.serving
        return cls(
            model_dir=model_dir,
            dtype=str(serving.dtype),
            max_model_len=serving.max_model_len,
            tensor_parallel_size=int(serving.tensor_parallel_size),
            seed=int(serving.seed),
            generation_config=str(serving.generation_config),
        )


def hardened_env(base: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``base`` with the hardening applied (``HARDENED_ENV`` set, secrets removed)."""
    env = {k: v for k, v in base.items() if k not in REMOVED_ENV}
    env.update(HARDENED_ENV)
    return env


def engine_kwargs(config: ServingConfig, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments: pinned values always win over ``extra``."""
    model = str(config.model_dir)
    pinned: dict[str, Any] = {
        "model": model,
        "tokenizer": model,
        "trust_remote_code": False,
        "load_format": "safetensors",
        "dtype": config.dtype,
        "max_model_len": config.max_model_len,
        "seed": config.seed,
        "generation_config": config.generation_config,
        "tensor_parallel_size": config.tensor_parallel_size,
        "revision": None,
        "tokenizer_revision": None,
        "code_revision": None,
    }
    kwargs = dict(extra or {})
    kwargs.update(pinned)
    return kwargs


def serve_argv(
    config: ServingConfig, python: str, host: str, port: int, extra_args: Sequence[str] = ()
) -> list[str]:
    """The OpenAI-compatible server command line; ``extra_args`` must already be checked."""
    model = str(config.model_dir)
    argv = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--tokenizer",
        model,
        "--load-format",
        "safetensors",
        "--dtype",
        config.dtype,
        "--seed",
        str(config.seed),
        "--generation-config",
        config.generation_config,
        "--tensor-parallel-size",
        str(config.tensor_parallel_size),
        "--host",
        host,
        "--port",
        str(port),
    ]
    if config.max_model_len is not None:
        argv += ["--max-model-len", str(config.max_model_len)]
    return argv + list(extra_args)


def check_extra_args(args: Sequence[str], *, serve: bool) -> dict[str, Any]:
    """Check extra engine arguments; return the engine keywords they mean.

    Raises ``UnsafeArgument`` listing every refused argument: one on the refused list
    (with its reason), one not on the allowlist, a positional argument, a server-only
    argument without ``--serve``, or a value of the wrong type. ``--load-format
    safetensors`` is accepted (it is the pinned value).
    """
    problems: list[tuple[str, str]] = []
    kwargs: dict[str, Any] = {}
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        flag, eq, inline = arg.partition("=")
        flag = flag.replace("_", "-") if flag.startswith("--") else flag
        if not flag.startswith("--"):
            problems.append(
                (arg, "positional arguments are not accepted (the model is the verified bundle)")
            )
            continue
        if flag == "--load-format":
            value = inline if eq else (args[index] if index < len(args) else "")
            index += 0 if eq else 1
            if value != "safetensors":
                problems.append(
                    (arg if eq else f"{arg} {value}", "the load format is pinned to safetensors")
                )
            continue
        if flag in _REFUSED:
            if (
                not eq
                and flag not in _REFUSED_SWITCHES
                and index < len(args)
                and not args[index].startswith("--")
            ):
                index += 1  # the refused flag's value
            problems.append((arg, _REFUSED[flag]))
            continue
        if flag not in _ALLOWED:
            problems.append((arg, "not on the allowlist of extra engine arguments"))
            continue
        takes_value, keyword = _ALLOWED[flag]
        value_text: str | None = None
        if takes_value:
            if eq:
                value_text = inline
            elif index < len(args) and not args[index].startswith("-"):
                value_text = args[index]
                index += 1
            else:
                problems.append((arg, "needs a value"))
                continue
        elif eq:
            problems.append((arg, "takes no value"))
            continue
        if keyword is None:
            if not serve:
                problems.append((arg, "only means something with --serve"))
            continue
        try:
            kwargs[keyword] = _convert(keyword, value_text)
        except ValueError:
            problems.append((arg, f"bad value {value_text!r}"))
    if problems:
        raise UnsafeArgument(problems)
    return kwargs


def allowed_extra_args(*, serve: bool) -> tuple[str, ...]:
    """The extra engine arguments ``check_extra_args`` accepts (with ``--serve``: more)."""
    return tuple(flag for flag, (_, keyword) in _ALLOWED.items() if serve or keyword is not None)


def _convert(keyword: str, value: str | None) -> Any:
    if value is None:
        return True
    if keyword in _INT_KWARGS:
        return int(value)
    if keyword in _FLOAT_KWARGS:
        return float(value)
    return value


# -- the CPU KV cache ------------------------------------------------------------------------
CPU_KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
DEFAULT_CPU_KVCACHE_GIB = 4
DEFAULT_CPU_KVCACHE_SHARE = 0.25
_GIB = 1 << 30


@dataclass(frozen=True)
class KvCacheChoice:
    """The CPU KV-cache size the engine gets (GiB, as ``VLLM_CPU_KVCACHE_SPACE`` takes it)
    and where it came from: ``option`` (``--cpu-kvcache-space``), ``env`` (the variable)
    or ``default`` (``min(4 GiB, 25% of available memory)``, at least 1 GiB)."""

    gib: int
    source: str
    available_bytes: int | None = None

    def describe(self) -> str:
        """One line for stderr: the size, where it came from and how to change it."""
        where = {
            "option": "from --cpu-kvcache-space",
            "env": f"from {CPU_KVCACHE_ENV}",
            "default": (
                "default: min(4 GiB, 25% of available memory"
                + (f" {self.available_bytes / _GIB:.1f} GiB" if self.available_bytes else "")
                + ")"
            ),
        }[self.source]
        return (
            f"cpu kv cache: {self.gib} GiB ({where}; change it with --cpu-kvcache-space "
            f"or {CPU_KVCACHE_ENV})"
        )

    def failure_hint(self) -> str:
        """Appended to an engine failure on a CPU: names the setting to lower."""
        return (
            f"the CPU KV cache was {self.gib} GiB ({self.source}); if vLLM ran out of "
            f"memory, lower it with --cpu-kvcache-space GIB or {CPU_KVCACHE_ENV}=GIB"
        )

    def hint_for(self, failure: BaseException) -> str:
        """``failure_hint`` as "; HINT" when ``failure`` is about memory (an allocation, the
        KV cache), else "": a refused configuration gets no advice about the cache."""
        about_memory = isinstance(failure, MemoryError) or _MEMORY_FAILURE.search(str(failure))
        return f"; {self.failure_hint()}" if about_memory else ""

    def as_dict(self) -> dict[str, Any]:
        return {"device": "cpu", "gib": self.gib, "source": self.source, "env": CPU_KVCACHE_ENV}


# what vLLM and the OS say when memory, or the KV cache carved out of it, runs short
_MEMORY_FAILURE = re.compile(
    r"out of memory|outofmemory|memoryerror|(?:can't|cannot|unable to|failed to) allocate"
    r"|not enough memory"
    r"|insufficient memory|kv[ _]cache|cache blocks|\boom\b",
    re.IGNORECASE,
)


def cpu_kv_cache(
    env: Mapping[str, str], *, option: int | None, available_bytes: int | None
) -> KvCacheChoice:
    """Choose the CPU KV-cache size: ``option``, else ``env[VLLM_CPU_KVCACHE_SPACE]``, else
    ``min(4, 25% of available_bytes)`` GiB, at least 1 (4 when the memory is unknown).

    Raises ``InputError`` naming the option or variable when it is not a whole number of
    GiB >= 1 (vLLM would otherwise fail late, or take 0 as "no cache").
    """
    if option is not None:
        if isinstance(option, bool) or option < 1:
            raise InputError(f"--cpu-kvcache-space {option}: must be a whole number of GiB >= 1")
        return KvCacheChoice(option, "option")
    text = env.get(CPU_KVCACHE_ENV, "").strip()
    if text:
        try:
            gib = int(text)
        except ValueError:
            gib = 0
        if gib < 1:
            raise InputError(
                f"{CPU_KVCACHE_ENV}={text!r}: must be a whole number of GiB >= 1 "
                "(or unset it: modelward then chooses min(4 GiB, 25% of "
                "available memory))"
            )
        return KvCacheChoice(gib, "env")
    if available_bytes is None or available_bytes <= 0:
        return KvCacheChoice(DEFAULT_CPU_KVCACHE_GIB, "default")
    share = int(available_bytes * DEFAULT_CPU_KVCACHE_SHARE) // _GIB
    return KvCacheChoice(max(1, min(DEFAULT_CPU_KVCACHE_GIB, share)), "default", available_bytes)
