"""``boot --serve``: vLLM's OpenAI-compatible server as a child process (docs/loader.md#boot).

``ServedEngine.start`` runs the pinned server command (``hardening.serve_argv``) under the
hardened environment and forwards SIGINT, SIGTERM and SIGHUP to it from then on.
``wait_ready`` polls the server's ``/v1/models`` on loopback until it answers, the child
exits or the deadline passes. ``generate`` is the baseline's generator over HTTP: it asks
``/v1/completions`` for the output token ids themselves (``return_token_ids``), one
request per call, so a list of prompts is one batch in the server's scheduler. ``wait``
passes the child's exit status through; ``stop`` terminates it (then kills it). On a CPU
the child gets the chosen KV-cache size (``engine.apply_kv_cache``), and a child that exits
before it is ready is reported with that size and the setting that changes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from modelward.loader.engine import GenerationRequest, apply_kv_cache, require_vllm
from modelward.loader.errors import EngineFailed
from modelward.loader.hardening import KvCacheChoice, ServingConfig, hardened_env, serve_argv

__all__ = ["ServedEngine"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_WILDCARDS = {"0.0.0.0", "::", ""}  # noqa: S104 - compared with, not bound to


def _api_key(extra_args: Sequence[str], env: dict[str, str]) -> str | None:
    """The key the server will demand: ``--api-key`` (last one wins), else VLLM_API_KEY."""
    key = env.get("VLLM_API_KEY") or None
    for index, arg in enumerate(extra_args):
        if arg.startswith("--api-key="):
            key = arg.partition("=")[2]
        elif arg in {"--api-key", "--api_key"} and index + 1 < len(extra_args):
            key = extra_args[index + 1]
    return key


class ServedEngine:
    """A running OpenAI-compatible vLLM server (the child) and an HTTP client to it."""

    def __init__(self, child: subprocess.Popen[bytes], base_url: str, api_key: str | None) -> None:
        import httpx

        self.child = child
        self.base_url = base_url
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=600.0, trust_env=False
        )
        self._model: str | None = None
        self._previous: dict[int, Any] = {}
        self.kv_cache: KvCacheChoice | None = None

    @classmethod
    def start(
        cls,
        config: ServingConfig,
        *,
        host: str,
        port: int,
        extra_args: Sequence[str] = (),
        kv_cache: KvCacheChoice | None = None,
    ) -> ServedEngine:
        """Start the server child; ``extra_args`` must have passed ``check_extra_args``;
        ``kv_cache`` is the CPU KV-cache size it gets (``engine.choose_kv_cache``)."""
        require_vllm()
        apply_kv_cache(kv_cache)
        env = hardened_env(os.environ)
        argv = serve_argv(config, sys.executable, host, port, extra_args)
        child = subprocess.Popen(argv, env=env)
        local = "127.0.0.1" if host in _WILDCARDS else host
        local = f"[{local}]" if ":" in local else local
        served = cls(child, f"http://{local}:{port}", _api_key(extra_args, env))
        served.kv_cache = kv_cache
        served._forward_signals()
        return served

    def _forward_signals(self) -> None:
        def forward(signum: int, _frame: FrameType | None) -> None:
            if self.child.poll() is None:
                self.child.send_signal(signum)

        self._previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}

    def wait_ready(self, timeout: float) -> None:
        """Wait until the server lists its model; ``EngineFailed`` if the child exits or
        ``timeout`` seconds pass first."""
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            code = self.child.poll()
            if code is not None:
                # its own log says why; killed (the OOM killer's SIGKILL): likely memory
                killed = code == -signal.SIGKILL
                hint = f"; {self.kv_cache.failure_hint()}" if self.kv_cache and killed else ""
                raise EngineFailed(
                    f"the vLLM server exited with status {code} before it was ready{hint}"
                )
            try:
                answer = self._http.get("/v1/models", timeout=5.0)
                if answer.status_code == 200:
                    self._model = str(answer.json()["data"][0]["id"])
                    return
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
                pass
            if time.monotonic() >= deadline:
                raise EngineFailed(
                    f"the vLLM server at {self.base_url} was not ready after {timeout:.0f} s"
                )
            time.sleep(0.5)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[tuple[int, ...]]:
        """Generate for ``requests`` in one server request; each request's output token ids.

        The requests must share their sampling parameters and all be text or all token ids
        (as the baseline's probes are); ``ValueError`` otherwise.
        """
        import httpx

        if not requests:
            return []
        first = requests[0]
        params = (first.max_tokens, first.temperature, first.top_p, first.top_k, first.seed)
        if any((r.max_tokens, r.temperature, r.top_p, r.top_k, r.seed) != params for r in requests):
            raise ValueError("one server request needs one set of sampling parameters")
        texts = [r.prompt for r in requests if r.prompt is not None]
        if texts and len(texts) != len(requests):
            raise ValueError("one server request needs all text or all token-id prompts")
        prompts: list[Any] = texts or [list(r.prompt_token_ids or ()) for r in requests]
        body = {
            "model": self._model,
            "prompt": prompts,
            "max_tokens": first.max_tokens,
            "temperature": first.temperature,
            "top_p": first.top_p,
            "top_k": first.top_k,
            "seed": first.seed,
            "return_token_ids": True,
        }
        try:
            answer = self._http.post("/v1/completions", json=body)
            answer.raise_for_status()
            choices = sorted(answer.json()["choices"], key=lambda c: int(c["index"]))
            outputs = [tuple(int(t) for t in c["token_ids"]) for c in choices]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise EngineFailed(f"generation on the vLLM server failed: {exc}") from exc
        if len(outputs) != len(requests):
            raise EngineFailed(
                f"the vLLM server answered {len(outputs)} completions for {len(requests)} prompts"
            )
        return outputs

    def wait(self) -> int:
        """Wait for the child to exit; its exit status. Restores the signal handlers."""
        try:
            return self.child.wait()
        finally:
            self._close()

    def stop(self, grace: float = 30.0) -> None:
        """Terminate the child (SIGTERM, then SIGKILL after ``grace`` seconds)."""
        try:
            if self.child.poll() is None:
                self.child.terminate()
                try:
                    self.child.wait(grace)
                except subprocess.TimeoutExpired:
                    self.child.kill()
                    self.child.wait()
        finally:
            self._close()

    def _close(self) -> None:
        self._http.close()
        for sig, handler in self._previous.items():
            with contextlib.suppress(ValueError):
                signal.signal(sig, handler)
        self._previous = {}
