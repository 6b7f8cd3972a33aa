"""Issue 39 item 7 on a serving worker: a bundle whose serving configuration the engine
refuses is refused at pull (the worker's own verify, before a file is materialized), naming
the field; vLLM itself refuses the same bundle; and the KV-cache hint stays with failures
about memory.

The tiny Llama (tests/tinymodel.py) states max_position_embeddings 256; its modelward.yaml
asks for 512. ``test_vllm_refuses_what_the_scan_refuses`` boots real vLLM (marked vllm).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from modelward.attest.spec import render_spec_template
from modelward.loader.hardening import KvCacheChoice
from tests.conftest import REPO_ROOT
from tests.loader.hostile_registry import HostileRegistry, serve_dir
from tests.loader.test_pull import REPO, hostile, nothing_materialized, pull_prod, signer

__all__ = ["hostile"]  # the fixture, used by name

REFUSED = "modelward.yaml serving.max_model_len 512 exceeds config.json max_position_embeddings 256"


def too_long(model: Path) -> Path:
    """The tiny model with a modelward.yaml asking for twice its context."""
    spec = render_spec_template(dtype="float32", max_model_len=512)
    (model / "modelward.yaml").write_text(spec)
    return model


@pytest.fixture(scope="module")
def key() -> Any:
    from modelward.attest.keys import generate_private_key

    return generate_private_key()


def test_pull_refuses_a_max_model_len_the_model_cannot_serve(
    hostile: HostileRegistry, tiny_model: Path, key: Any, tmp_path: Path
) -> None:
    from modelward.attest.keys import public_key_pem

    pem = tmp_path / "publisher.pub.pem"
    pem.write_bytes(public_key_pem(key.public_key()))
    hostile.add(serve_dir(too_long(tiny_model), REPO, signer(key)))
    cache = tmp_path / "cache"
    result = pull_prod(hostile, pem, cache)
    assert result.returncode == 1, result.stderr
    assert f"modelward.yaml: scan.serving: {REFUSED}" in result.stderr
    assert nothing_materialized(cache)


def test_kv_cache_hint_only_for_a_failure_about_memory() -> None:
    choice = KvCacheChoice(4, "default")
    refused = ValueError(
        "User-specified max_model_len (512) is greater than the derived max_model_len "
        "(max_position_embeddings=256.0 or model_max_length=None in model's config.json)."
    )
    assert choice.hint_for(refused) == ""
    for failure in (
        ValueError("No available memory for the cache blocks. Try increasing KV cache space"),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB"),
        MemoryError(),
    ):
        hint = choice.hint_for(failure)
        assert "--cpu-kvcache-space" in hint, failure
        assert hint.startswith("; the CPU KV cache was 4 GiB")


# Boots through loader.engine.boot_engine as `boot` does: the spec read from the bundle.
_BOOT = """
import sys
from pathlib import Path

if __name__ == "__main__":
    from modelward.loader.engine import boot_engine
    from modelward.loader.errors import EngineFailed
    from modelward.loader.hardening import KvCacheChoice, ServingConfig, check_extra_args
    from modelward.loader.worker import load_bundle_spec

    model = Path(sys.argv[1])
    config = ServingConfig.from_spec(model, load_bundle_spec(model))
    try:
        extra = check_extra_args(["--enforce-eager"], serve=False)
        boot_engine(config, extra, kv_cache=KvCacheChoice(1, "env"))
    except EngineFailed as exc:
        print("REFUSED:", exc)
    else:
        print("BOOTED")
"""


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_refuses_what_the_scan_refuses(tiny_model: Path, tmp_path: Path) -> None:
    from modelward.attest.scanner import scan_tree

    model = too_long(tiny_model)
    assert [f.reason for f in scan_tree(model).findings] == [REFUSED]
    script = tmp_path / "boot.py"
    script.write_text(_BOOT)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    done = subprocess.run(
        [sys.executable, str(script), str(model)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = done.stdout
    assert "REFUSED:" in out, (out, done.stderr[-3000:])
    assert "User-specified max_model_len (512) is greater than the derived max_model_len" in out
    assert "max_position_embeddings=256" in out
    # the engine's refusal gets no advice about the KV cache
    assert "--cpu-kvcache-space" not in out
